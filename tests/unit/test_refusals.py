"""What the core concludes when the host refuses a mutation: nothing changed on the host."""

from __future__ import annotations

import pytest

from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.reconcile import (
    Create,
    Decision,
    Outcome,
    Rejection,
    Target,
    Update,
    rejected,
)
from takoform_operator.core.state import Desired, OperationView, OpState, State, Verb
from takoform_operator.registry_data import load_registry

REGISTRY = load_registry()
REF = next(iter(sorted(REGISTRY.default_creates.values())))
TARGET = Target("team-a", REF, "logs")
DESIRED = Desired(
    cr_uid="cr-1", cr_generation=2, line=REF.line, space="team-a", name="logs", parameters={}
)
BOUND = State(form_ref=REF, space="team-a", name="logs", uid="u-1", generation="4")
CREATE = Decision(Outcome(State(), (), 2.0), Create(TARGET, {}, "cr-1:create:0"))
UPDATE = Decision(Outcome(BOUND, (), 2.0), Update(TARGET, {}, "4", "u-1", "cr-1:update:2:4:0"))


@pytest.mark.parametrize("code", ["generation_conflict", "revision_conflict", "uid_mismatch"])
def test_a_stale_fence_rereads_and_never_overwrites(code: str) -> None:
    outcome = rejected(UPDATE, Rejection(code, "stale"), DESIRED)
    assert outcome.state == BOUND, "nothing recorded: the next reconcile re-reads"
    assert outcome.requeue_after == 0.0
    assert ConditionType.RECONCILING in outcome.asserted()


def test_create_meeting_a_resource_under_another_ref_blocks_with_the_import_remedy() -> None:
    outcome = rejected(CREATE, Rejection("resource_exists", "exists"), DESIRED)
    assert outcome.asserted()[ConditionType.BLOCKED] is Reason.NAME_TAKEN
    assert outcome.state == State()


@pytest.mark.parametrize("code", ["operation_in_progress", "idempotency_key_reused"])
def test_a_named_operation_carrying_our_key_is_resumed(code: str) -> None:
    ours = OperationView(OpState.RUNNING, resource_uid="u-9", idempotency_key="cr-1:create:0")
    outcome = rejected(CREATE, Rejection(code, "busy", "op-5", ours), DESIRED)
    assert outcome.state.pending is not None
    assert outcome.state.pending.operation_id == "op-5"
    assert outcome.state.pending.verb is Verb.CREATE
    assert outcome.state.form_ref == REF and outcome.state.uid == "u-9"


@pytest.mark.parametrize(
    "operation",
    [
        OperationView(OpState.RUNNING, idempotency_key="cr-2:create:0"),
        OperationView(OpState.RUNNING, idempotency_key=None),
        None,
    ],
    ids=["another CR's key", "no key recorded", "operation unreadable"],
)
def test_somebody_elses_operation_is_waited_for_not_adopted(
    operation: OperationView | None,
) -> None:
    outcome = rejected(CREATE, Rejection("operation_in_progress", "b", "op-5", operation), DESIRED)
    assert outcome.state == State()
    assert outcome.asserted()[ConditionType.RECONCILING] is Reason.NAME_BUSY


def test_validation_failure_waits_for_a_spec_change() -> None:
    outcome = rejected(UPDATE, Rejection("validation_failed", "sizeGiB too big"), DESIRED)
    assert outcome.asserted()[ConditionType.DEGRADED] is Reason.INVALID_SPEC
    assert outcome.requeue_after is None
