"""The state in the CR status, and conditions: round trips and Kubernetes conventions."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import BUCKET_REF, bound

from takoform_operator.core.conditions import (
    Condition,
    ConditionType,
    Reason,
    merge_conditions,
    transitions,
)
from takoform_operator.core.outcome import blocked, waiting
from takoform_operator.core.remedies import Remedy
from takoform_operator.core.state import (
    Pending,
    State,
    StateUnreadable,
    Verb,
    state_from_status,
    state_to_status,
)

REF = BUCKET_REF


def test_state_round_trips_through_the_status() -> None:
    state = bound(
        generation="3",
        revision="7",
        package_digest="sha256:" + "1" * 64,
        outputs={"endpoint": "https://x"},
        pending=Pending("op-1", Verb.UPDATE),
        attempt=2,
    )
    assert state_from_status(state_to_status(state)) == state


def test_cleared_fields_are_explicit_nulls_so_a_merge_patch_removes_them() -> None:
    status = state_to_status(State(form_ref=REF, space="s", name="n", uid="u"))
    assert status["pendingOperationId"] is None
    assert "pendingOperationId" in status


def test_empty_status_is_the_unbound_state() -> None:
    assert state_from_status(None) == State()
    assert state_from_status({}) == State()


@pytest.mark.parametrize(
    "status",
    [
        {"formRef": {"apiVersion": "x"}},
        {"formRef": {**(REF.to_json() if REF else {}), "schemaDigest": "md5:1"}},
        {"pendingOperationId": "op", "pendingOperationVerb": "Explode"},
        {"attempt": "many"},
    ],
    ids=["formRef incomplete", "formRef digest malformed", "unknown verb", "attempt not a number"],
)
def test_a_malformed_status_is_reported_not_guessed(status: dict) -> None:
    with pytest.raises(StateUnreadable):
        state_from_status(status)


def test_conditions_keep_transition_time_until_status_flips() -> None:
    blocked = Condition(ConditionType.BLOCKED, True, Reason.UID_MISMATCH, "uid changed")
    first = merge_conditions(None, [blocked], now="T1", observed_generation=1)
    assert first == [
        {
            "type": "Blocked",
            "status": "True",
            "reason": "UidMismatch",
            "message": "uid changed",
            "lastTransitionTime": "T1",
            "observedGeneration": 1,
        }
    ]
    again = merge_conditions(first, [blocked], now="T2", observed_generation=2)
    assert again[0]["lastTransitionTime"] == "T1"
    assert again[0]["observedGeneration"] == 2
    cleared = merge_conditions(again, [], now="T3", observed_generation=2)
    assert cleared[0]["status"] == "False" and cleared[0]["lastTransitionTime"] == "T3"


def test_transitions_become_events_only_when_something_changed() -> None:
    ready = Condition(ConditionType.READY, True, Reason.AVAILABLE, "ok")
    first = merge_conditions(None, [ready], now="T1", observed_generation=1)
    assert [c["type"] for c in transitions(None, first)] == ["Ready"]
    second = merge_conditions(first, [ready], now="T2", observed_generation=1)
    assert transitions(first, second) == []


def test_a_condition_that_stops_being_true_carries_the_reason_true_now() -> None:
    """kstatus: Reconciling False must not keep the CreatePending it had while True. A cleared
    condition repeats Ready's reason; its reason following Ready's is no Event, its clearing is."""
    creating = [
        Condition(ConditionType.RECONCILING, True, Reason.CREATE_PENDING, "creating"),
        Condition(ConditionType.READY, False, Reason.CREATE_PENDING, "creating"),
    ]
    first = merge_conditions(None, creating, now="T1", observed_generation=1)
    ready = Condition(ConditionType.READY, True, Reason.AVAILABLE, "ok")
    second = merge_conditions(first, [ready], now="T2", observed_generation=1)
    by_type = {c["type"]: c for c in second}
    assert {k: (c["status"], c["reason"], c["message"]) for k, c in by_type.items()} == {
        "Ready": ("True", "Available", "ok"),
        "Reconciling": ("False", "Available", ""),
    }
    assert by_type["Reconciling"]["lastTransitionTime"] == "T2"
    assert [c["type"] for c in transitions(first, second)] == ["Ready", "Reconciling"]
    blocked = [
        Condition(ConditionType.BLOCKED, True, Reason.UID_MISMATCH, "uid changed"),
        Condition(ConditionType.STALLED, True, Reason.UID_MISMATCH, "uid changed"),
        Condition(ConditionType.READY, False, Reason.UID_MISMATCH, "uid changed"),
    ]
    third = merge_conditions(second, blocked, now="T3", observed_generation=1)
    reconciling = next(c for c in third if c["type"] == "Reconciling")
    assert (reconciling["status"], reconciling["reason"]) == ("False", "UidMismatch")
    assert reconciling["lastTransitionTime"] == "T2", "no flip: the time stays"
    changed = [(c["type"], c["status"]) for c in transitions(second, third)]
    assert changed == [("Ready", "False"), ("Blocked", "True"), ("Stalled", "True")]
    # Written back as read: a False condition with another condition's reason is kept.
    assert merge_conditions(third, blocked, now="T4", observed_generation=1) == third


def test_blocked_comes_with_stalled_and_the_same_reason_and_message() -> None:
    outcome = blocked(State(), Reason.NAME_TAKEN, "taken", (Remedy("do this"),))
    by_type = {c.type: c for c in outcome.conditions}
    assert by_type[ConditionType.STALLED] == replace(
        by_type[ConditionType.BLOCKED], type=ConditionType.STALLED
    )
    assert by_type[ConditionType.READY].status is False
    pending = waiting(State(), Reason.NAME_BUSY, "x").conditions
    assert not any(c.type is ConditionType.STALLED for c in pending)
