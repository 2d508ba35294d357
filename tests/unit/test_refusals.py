"""What the core concludes when the host refuses a mutation: nothing changed on the host."""

from __future__ import annotations

import pytest
from builders import BUCKET_REF, REGISTRY, bound, desired

from takoform_operator.core.actions import Create, Target, Update
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.decide import Decision
from takoform_operator.core.host_answer import Rejection, rejected
from takoform_operator.core.outcome import NextLook, Outcome
from takoform_operator.core.state import OperationView, OpState, State, Verb
from takoform_spec.host_api import ErrorCode

REF = BUCKET_REF
assert REF is not None
TARGET = Target("team-a", REF, "logs")
DESIRED = desired(cr_generation=2, parameters={})
BOUND = bound(DESIRED, generation="4")
CREATE = Decision(Outcome(State(), (), NextLook.PENDING), Create(TARGET, {}, "cr-1:create:0"))
UPDATE = Decision(
    Outcome(BOUND, (), NextLook.PENDING), Update(TARGET, {}, "4", "u-1", "cr-1:update:u-1:2:4:0")
)


@pytest.mark.parametrize(
    "code", [ErrorCode.GENERATION_CONFLICT, ErrorCode.REVISION_CONFLICT, ErrorCode.UID_MISMATCH]
)
def test_a_stale_fence_rereads_and_never_overwrites(code: ErrorCode) -> None:
    outcome = rejected(UPDATE, Rejection(code, "stale"), DESIRED)
    assert outcome.state == BOUND, "nothing recorded: the next reconcile re-reads"
    assert outcome.next_look is NextLook.NOW
    assert ConditionType.RECONCILING in outcome.asserted()


def test_create_meeting_a_resource_under_another_ref_blocks_with_the_import_remedy() -> None:
    outcome = rejected(CREATE, Rejection(ErrorCode.RESOURCE_EXISTS, "exists"), DESIRED)
    assert outcome.asserted()[ConditionType.BLOCKED] is Reason.NAME_TAKEN
    assert outcome.state == State()


@pytest.mark.parametrize(
    "code", [ErrorCode.OPERATION_IN_PROGRESS, ErrorCode.IDEMPOTENCY_KEY_REUSED]
)
def test_a_named_operation_carrying_our_key_is_resumed(code: ErrorCode) -> None:
    ours = _named("cr-1:create:0", resource_uid="u-9")
    outcome = rejected(CREATE, Rejection(code, "busy", "op-5", ours), DESIRED)
    assert outcome.state.pending is not None
    assert outcome.state.pending.operation_id == "op-5"
    assert outcome.state.pending.verb is Verb.CREATE
    assert outcome.state.form_ref == REF and outcome.state.uid == "u-9"


def _named(key: str | None, **changes: object) -> OperationView:
    """The record of a create of `logs` in team-a under REF, as the host keeps it."""
    fields: dict[str, object] = {
        "verb": Verb.CREATE,
        "space": "team-a",
        "form_ref": REF,
        "name": "logs",
        "resource_uid": None,
        **changes,
    }
    return OperationView(OpState.RUNNING, idempotency_key=key, **fields)  # type: ignore[arg-type]


OTHER_REF = next(ref for ref in REGISTRY.known_refs(REF.line) if ref != REF)


@pytest.mark.parametrize(
    "changes",
    [{"name": "logs-old"}, {"space": "team-b"}, {"verb": Verb.UPDATE}, {"form_ref": OTHER_REF}],
    ids=["another name", "another space", "another verb", "another FormRef"],
)
def test_our_operation_for_another_request_is_never_adopted(changes: dict[str, object]) -> None:
    """Our key on a record for another target (the spec changed since): not this request's."""
    operation = _named("cr-1:create:0", **changes)
    outcome = rejected(
        CREATE, Rejection(ErrorCode.OPERATION_IN_PROGRESS, "b", "op-5", operation), DESIRED
    )
    assert outcome.state.pending is None
    assert outcome.asserted()[ConditionType.RECONCILING] is Reason.NAME_BUSY


def test_a_spent_key_of_ours_moves_to_a_fresh_attempt_instead_of_resuming() -> None:
    """The livelock: an update key reused by the host for an old, settled update of ours must
    not be recorded as pending; the next update goes out under a fresh key."""
    old = _named("cr-1:update:u-1:2:4:0", verb=Verb.UPDATE, resource_uid="u-0")
    refusal = Rejection(ErrorCode.IDEMPOTENCY_KEY_REUSED, "reused", "op-1", old)
    outcome = rejected(UPDATE, refusal, DESIRED)
    assert outcome.state.pending is None
    assert outcome.state.attempt == BOUND.attempt + 1
    assert outcome.next_look is NextLook.NOW


@pytest.mark.parametrize(
    "operation",
    [
        _named("cr-2:create:0"),
        _named(None),
        None,
    ],
    ids=["another CR's key", "no key recorded", "operation unreadable"],
)
def test_somebody_elses_operation_is_waited_for_not_adopted(
    operation: OperationView | None,
) -> None:
    outcome = rejected(
        CREATE, Rejection(ErrorCode.OPERATION_IN_PROGRESS, "b", "op-5", operation), DESIRED
    )
    assert outcome.state == State()
    assert outcome.asserted()[ConditionType.RECONCILING] is Reason.NAME_BUSY


def test_validation_failure_waits_for_a_spec_change() -> None:
    outcome = rejected(UPDATE, Rejection(ErrorCode.VALIDATION_FAILED, "sizeGiB too big"), DESIRED)
    assert outcome.asserted()[ConditionType.DEGRADED] is Reason.INVALID_SPEC
    assert outcome.next_look is NextLook.POLL
