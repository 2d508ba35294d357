"""Rule 7's adopt-if-proven rows: a pending create whose resource uid nobody recorded.

The host may accept a create without naming the uid it will have (its 202 record carries
resourceUid null). State is then bound to the exact target with the marker but no uid, and the
next read finds a resource whose uid it cannot compare: rule 7 adopts it only with proof that it
is ours - our own create idempotency key recorded on it - and otherwise blocks without binding.

Everything goes through the core's public steps (plan, decide, accepted); the keys are the ones
the core itself sends, so nothing here depends on how a key is spelled.
"""

from __future__ import annotations

from typing import Any

import builders
import pytest
from builders import REGISTRY, SPEC, desired
from core_steps import decided

from takoform_operator.core.actions import Create, Update
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.decide import Decision, Observation
from takoform_operator.core.host_answer import accepted
from takoform_operator.core.state import Desired, OperationView, OpState, ResourceView, State

CR_UID = desired().cr_uid
FOUND_UID = "uid-found"


def reconcile(want: Desired, state: State, seen: Observation) -> Decision:
    """One reconcile as the service runs it: the target claimed, planned, decided."""
    return decided(want, state, seen, REGISTRY)


def create_of(want: Desired) -> Create:
    """The create the core sends for a fresh CR (and with it, that CR's create key)."""
    action = reconcile(want, State(), Observation()).action
    assert isinstance(action, Create)
    return action


def accepted_without_uid(want: Desired) -> tuple[State, Create]:
    """State after the host accepted our create with `resourceUid: null` on its 202."""
    decision = reconcile(want, State(), Observation())
    assert isinstance(decision.action, Create)
    running = OperationView(OpState.RUNNING, resource_uid=None, idempotency_key=decision.action.key)
    state = accepted(decision, "op-1", running, want).state
    assert state.pending is not None and state.uid is None and state.form_ref is not None
    return state, decision.action


def served(create: Create, key: str | None, spec: dict[str, Any] | None = None) -> ResourceView:
    """What the host serves under the exact target of `create`, with `key` as creation key."""
    return builders.served(
        form_ref=create.target.form_ref,
        space=create.target.space,
        name=create.target.name,
        uid=FOUND_UID,
        spec=dict(create.spec) if spec is None else spec,
        creation_key=key,
    )


@pytest.mark.parametrize("op", [OpState.SUCCEEDED, OpState.FAILED, OpState.NOT_FOUND])
def test_a_settled_create_with_our_key_on_it_is_adopted_and_the_marker_cleared(
    op: OpState,
) -> None:
    want = desired()
    state, create = accepted_without_uid(want)
    decision = reconcile(want, state, Observation(OperationView(op), served(create, create.key)))
    adopted = decision.outcome.state
    assert adopted.uid == FOUND_UID, "bound to the incarnation our key proves is ours"
    assert adopted.form_ref == create.target.form_ref, "under the exact ref it was created with"
    assert adopted.pending is None, "the operation settled (or its record expired)"
    if op is OpState.FAILED:  # adopted as ours, and the failure is still reported
        assert decision.outcome.asserted() == {ConditionType.DEGRADED: Reason.OPERATION_FAILED}
    else:
        assert decision.outcome.asserted() == {ConditionType.READY: Reason.AVAILABLE}
    assert decision.action is None, "the spec already matches: nothing to send"


def test_a_running_create_with_our_key_on_it_is_adopted_and_the_marker_kept() -> None:
    want = desired()
    state, create = accepted_without_uid(want)
    running = OperationView(OpState.RUNNING)
    decision = reconcile(want, state, Observation(running, served(create, create.key)))
    adopted = decision.outcome.state
    assert adopted.uid == FOUND_UID and adopted.form_ref == create.target.form_ref
    assert adopted.pending == state.pending, "nothing committed yet: the marker survives"
    assert decision.outcome.asserted().get(ConditionType.RECONCILING) is Reason.OPERATION_RUNNING
    assert ConditionType.BLOCKED not in decision.outcome.asserted()
    assert decision.action is None, "never a second mutation while one is pending"


def test_an_adopted_resource_is_then_reconciled_with_the_adopted_uid_as_fence() -> None:
    want = desired()
    state, create = accepted_without_uid(want)
    stale = {**create.spec, "sizeGiB": 99}
    decision = reconcile(
        want,
        state,
        Observation(OperationView(OpState.NOT_FOUND), served(create, create.key, stale)),
    )
    assert decision.outcome.state.uid == FOUND_UID
    assert isinstance(decision.action, Update)
    assert decision.action.expected_uid == FOUND_UID
    assert decision.action.spec["sizeGiB"] == SPEC["sizeGiB"]


def _update_key_of_ours() -> str:
    """A key of ours, but not a create key: the update the core sends for this CR."""
    first = create_of(desired())
    bound = State(form_ref=first.target.form_ref, space="team-a", name="logs", uid=FOUND_UID)
    want = desired(cr_generation=2, parameters={**SPEC, "sizeGiB": 20})
    action = reconcile(want, bound, Observation(None, served(first, None))).action
    assert isinstance(action, Update)
    return action.key


@pytest.mark.parametrize(
    ("key", "reason", "why"),
    [
        (None, Reason.OWNERSHIP_UNPROVABLE, "the host records no creation key"),
        (create_of(desired(cr_uid="cr-2")).key, Reason.NAME_TAKEN, "another CR's create"),
        (
            create_of(desired(cr_uid=CR_UID + "1")).key,
            Reason.NAME_TAKEN,
            "a CR uid we are a prefix of",
        ),
        (_update_key_of_ours(), Reason.NAME_TAKEN, "ours, but an update key proves no create"),
    ],
)
@pytest.mark.parametrize("op", [OpState.RUNNING, OpState.SUCCEEDED, OpState.NOT_FOUND])
def test_without_proof_nothing_is_adopted(
    op: OpState, key: str | None, reason: Reason, why: str
) -> None:
    want = desired()
    state, create = accepted_without_uid(want)
    decision = reconcile(want, state, Observation(OperationView(op), served(create, key)))
    assert decision.outcome.asserted().get(ConditionType.BLOCKED) is reason, why
    assert decision.outcome.state.uid is None, "never bound by name alone"
    assert decision.action is None and not decision.outcome.finalized
