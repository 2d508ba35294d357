"""An accepted create the status does not record (its pending write held and dropped, or lost):
the host's listing of the name is consulted before the resource read (0017 rule 7: "the
operation is consulted first"), and a create of ours found there is judged as if the status had
recorded it pending: the same rule 7 row, whatever its state (docs/crash-safety.md, "The
pending write, held for one look")."""

from __future__ import annotations

from dataclasses import replace

import pytest
from builders import REGISTRY, desired, served
from core_steps import planned

from takoform_operator.core.actions import Create, Delete, Target, bound_to
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.decide import Decision, Observation, decide
from takoform_operator.core.keys import create_key
from takoform_operator.core.plan import Plan, plan
from takoform_operator.core.state import (
    Desired,
    OperationView,
    OpState,
    Pending,
    Requested,
    ResourceView,
    State,
    Verb,
)
from takoform_operator.core.tables import MUTATION_TABLE, Presence

OURS, OTHER = "u-ours", "u-other"


def claimed(want: Desired, **changes: object) -> State:
    """The CR's target recorded (by its binding), nothing bound, nothing pending."""
    state, step = planned(want, State(), REGISTRY)
    assert isinstance(step, Plan)
    return replace(state, **changes)  # type: ignore[arg-type]


def target(state: State) -> Target:
    assert state.form_ref is not None and state.space is not None and state.name is not None
    return Target(state.space, state.form_ref, state.name)


def create_record(
    want: Desired, state: State, op: OpState, *, key: str | None = None, uid: str | None = OURS
) -> OperationView:
    where = target(state)
    return OperationView(
        op,
        uid,
        idempotency_key=create_key(want, state) if key is None else key,
        verb=Verb.CREATE,
        space=where.space,
        form_ref=where.form_ref,
        name=where.name,
    )


def resource(state: State, found: Presence) -> ResourceView | None:
    """What the read finds, judged against the uid the create named (UNKNOWN_UID: a host whose
    record names none, H-31 broken; the resource carries our creation key)."""
    if found is Presence.ABSENT:
        return None
    where = target(state)
    ours = found is not Presence.DIFFERENT_UID
    uid, key = (OURS, "cr-1:create:0") if ours else (OTHER, "someone:create:0")
    return served(
        form_ref=where.form_ref, space=where.space, name=where.name, uid=uid, creation_key=key
    )


# -- the plan: the listing, before the read, wherever a create of ours may be unrecorded --------


@pytest.mark.parametrize("deleting", [False, True])
def test_a_claimed_unbound_cr_lists_the_operations_of_its_name(deleting: bool) -> None:
    want = desired(deleting=deleting)
    step = plan(want, claimed(want), REGISTRY)
    assert isinstance(step, Plan) and step.list_operations and step.operation_id is None


def test_a_target_claimed_by_this_very_look_lists_nothing() -> None:
    """Its binding is written before anything is sent: nothing of this claim can be running."""
    want = desired()
    step = plan(want, claimed(want), REGISTRY, claimed_now=True)
    assert isinstance(step, Plan) and not step.list_operations


@pytest.mark.parametrize(
    "changes",
    [
        {"uid": OURS},  # bound: the incarnation is recorded
        {"pending": Pending("op-1", Verb.CREATE)},  # the operation itself is consulted
    ],
    ids=["bound", "pending"],
)
def test_a_recorded_incarnation_or_operation_lists_nothing(changes: dict[str, object]) -> None:
    want = desired(deleting=True)
    step = plan(want, claimed(want, **changes), REGISTRY)
    assert isinstance(step, Plan) and not step.list_operations


def test_an_import_lists_nothing() -> None:
    """An import never creates: nothing of it can be running."""
    want = desired(deleting=True)
    state = claimed(want, requested=replace(Requested.of(want), import_id="logs"))
    step = plan(want, state, REGISTRY)
    assert isinstance(step, Plan) and not step.list_operations


# -- decide: the listed create of ours, judged as the pending one ---------------------------------


def _named_uid(found: Presence) -> str | None:
    return None if found is Presence.UNKNOWN_UID else OURS


def _as_listed(want: Desired, op: OpState, found: Presence) -> Decision:
    state = claimed(want)
    step = Plan(None, target(state), list_operations=True)
    listed = create_record(want, state, op, uid=_named_uid(found))
    seen = Observation(resource=resource(state, found), operations=(("op-1", listed),))
    return decide(want, state, step, seen, REGISTRY)


def _as_recorded(want: Desired, op: OpState, found: Presence) -> Decision:
    state = claimed(want)
    uid = _named_uid(found)
    recorded = bound_to(state, target(state), uid).with_pending(Pending("op-1", Verb.CREATE))
    seen = Observation(create_record(want, state, op, uid=uid), resource(state, found))
    return decide(want, recorded, Plan("op-1", target(state)), seen, REGISTRY)


#: Every row a listed record can meet (a listing holds only the records the host retains).
LISTED_ROWS = [(op, found) for op, found in sorted(MUTATION_TABLE) if op is not OpState.NOT_FOUND]


@pytest.mark.parametrize("deleting", [False, True], ids=["look", "deletion"])
@pytest.mark.parametrize(("op", "found"), LISTED_ROWS, ids=str)
def test_a_listed_create_of_ours_is_judged_as_if_the_status_recorded_it(
    op: OpState, found: Presence, deleting: bool
) -> None:
    want = desired(deleting=deleting)
    assert _as_listed(want, op, found) == _as_recorded(want, op, found)


def test_a_deletion_whose_create_committed_deletes_the_resource() -> None:
    """The case of issue 37: the create succeeded before the listing; the read after it
    finds the resource, which is deleted, never forgotten."""
    decision = _as_listed(desired(deleting=True), OpState.SUCCEEDED, Presence.SAME_UID)
    assert isinstance(decision.action, Delete) and decision.action.expected_uid == OURS
    assert not decision.outcome.finalized


def test_a_deletion_never_finalizes_over_another_incarnation_of_its_create() -> None:
    """Our create committed, then another client's incarnation replaced it: the deletion is
    Blocked on the uid (it never deletes the replacement, nor forgets ours)."""
    decision = _as_listed(desired(deleting=True), OpState.SUCCEEDED, Presence.DIFFERENT_UID)
    assert decision.action is None and not decision.outcome.finalized
    assert decision.outcome.asserted().get(ConditionType.BLOCKED) is Reason.UID_MISMATCH


def test_a_running_create_of_ours_is_waited_for_not_replayed() -> None:
    decision = _as_listed(desired(), OpState.RUNNING, Presence.ABSENT)
    assert decision.action is None
    assert decision.outcome.state.pending == Pending("op-1", Verb.CREATE)
    assert decision.outcome.state.uid == OURS


@pytest.mark.parametrize(
    "key",
    ["cr-1:create:0", "someone:create:1"],
    ids=["an-earlier-attempt-of-ours", "another-crs"],
)
def test_a_settled_create_under_another_key_is_not_the_one_to_replay(key: str) -> None:
    """Only the create this state would send (its key) stands in for the unrecorded one: the
    create of an earlier attempt (its resource since gone: drift repair) or another CR's is
    not ours now, so the create is sent."""
    want = desired()
    state = claimed(want, attempt=1)
    step = Plan(None, target(state), list_operations=True)
    listed = create_record(want, state, OpState.SUCCEEDED, key=key)
    decision = decide(want, state, step, Observation(operations=(("op-1", listed),)), REGISTRY)
    assert isinstance(decision.action, Create) and decision.action.key == "cr-1:create:1"
