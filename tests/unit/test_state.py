"""The state in the CR status, and conditions: round trips and Kubernetes conventions."""

from __future__ import annotations

import pytest

from takoform_operator.core.conditions import (
    Condition,
    ConditionType,
    Reason,
    merge_conditions,
    transitions,
)
from takoform_operator.core.state import (
    Pending,
    State,
    StateUnreadable,
    Verb,
    state_from_status,
    state_to_status,
)
from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

REF = load_registry().default_create_ref(FormLine("storage.takoform.io/v1", "Bucket"))


def test_state_round_trips_through_the_status() -> None:
    state = State(
        form_ref=REF,
        space="team-a",
        name="logs",
        uid="u-1",
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
