"""The pause annotation and spec.managementPolicy (core.policy), through the core's public steps.

Pause: nothing is planned, so nothing can be sent; deletion waits unless it needs no host call.
Observe: whatever the reconcile concludes, the decision never carries a mutation; what the
mutation would have repaired is reported with the closed condition set.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import builders
import pytest
from builders import BUCKET, BUCKET_REF, REGISTRY, SPEC, cr_body, desired
from core_steps import decided
from looks import look_once
from memory_bindings import MemoryBindings
from one_host import OneHost

from takoform_operator.core.actions import Create, Delete, Target, Update
from takoform_operator.core.binding import Binding, ClaimRef, Identity, Phase
from takoform_operator.core.conditions import (
    Condition,
    ConditionType,
    Reason,
    merge_conditions,
)
from takoform_operator.core.decide import Decision, Observation
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.outcome import NextLook, Outcome
from takoform_operator.core.policy import hold, observe_only
from takoform_operator.core.state import (
    DeletionPolicy,
    Desired,
    ManagementPolicy,
    OperationView,
    OpState,
    Pending,
    Requested,
    ResourceView,
    State,
    Verb,
)
from takoform_operator.core.tenancy import SpaceGrant
from takoform_operator.kube.crs import InvalidCustomResource, desired_from_cr, status_patch
from takoform_operator.service import reconcile

REF = BUCKET_REF
OBSERVE = ManagementPolicy.OBSERVE


def served(spec: dict[str, Any] | None = None, uid: str = "uid-1") -> ResourceView:
    return builders.served(
        uid=uid, spec=dict(spec or SPEC), outputs={"endpoint": "https://logs.example"}
    )


CLAIMED = State(form_ref=REF, host="default", space="team-a", name="logs")
BOUND = replace(CLAIMED, uid="uid-1", generation="1", revision="1")
PENDING = replace(BOUND, pending=Pending("op-1", Verb.UPDATE))
#: Every kind of recorded state a paused CR can be in.
STATES = {"fresh": State(), "claimed": CLAIMED, "bound": BOUND, "pending": PENDING}


class NoCalls:
    """A host port that fails the test on any call: a paused CR must send nothing at all."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.calls.append(name)
        raise AssertionError(f"host call {name} while paused")


class ListsNothing(NoCalls):
    """A host port that answers only the listing of a name's operations (with none) and fails
    the test on any other call: a deletion that sends no mutation may still read whether a
    create of ours the status does not record named an incarnation."""

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        self.calls.append("list_operations")
        return []


# -- pause ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", STATES.values(), ids=STATES.keys())
@pytest.mark.parametrize("policy", list(ManagementPolicy))
async def test_a_paused_cr_sends_nothing_not_even_a_read(
    state: State, policy: ManagementPolicy
) -> None:
    host = NoCalls()
    outcome = await _reconcile(desired(paused=True, management=policy), state, host)
    assert host.calls == []
    assert outcome.state == state, "the state (the pending operation too) is kept as it was"
    assert outcome.conditions == (
        Condition(ConditionType.RECONCILING, False, Reason.PAUSED, outcome.conditions[0].message),
    )
    assert "takoform.io/paused" in outcome.conditions[0].message
    assert outcome.holds_conditions and outcome.next_look is NextLook.POLL and not outcome.finalized


@pytest.mark.parametrize("state", STATES.values(), ids=STATES.keys())
@pytest.mark.parametrize(
    "releasing",
    [
        desired(deleting=True, deletion_policy=DeletionPolicy.ORPHAN),
        desired(deleting=True, management=OBSERVE),
    ],
    ids=["Orphan", "Observe"],
)
async def test_a_deletion_that_leaves_the_host_resource_sends_nothing(
    state: State, releasing: Desired
) -> None:
    """Whatever was recorded (a bound uid, a running operation), an Orphan or Observe deletion
    finishes at once without a mutation, and without a single host call, not even the read
    that would find the resource still there, unless a create of ours may be unrecorded
    (claimed, neither bound nor pending): then the operations are listed once, so the binding
    it releases remembers the incarnation that create named."""
    host = ListsNothing()
    outcome = await _reconcile(releasing, state, host)
    assert host.calls == (["list_operations"] if state is CLAIMED else [])
    assert outcome.finalized and outcome.state == state


@pytest.mark.parametrize("state", STATES.values(), ids=STATES.keys())
async def test_a_paused_deletion_waits_unless_it_needs_no_host_call(state: State) -> None:
    host = NoCalls()
    waiting = await _reconcile(desired(paused=True, deleting=True), state, host)
    if not state.claimed:
        # Nothing was ever sent (a claim is written before any request): nothing to wait for.
        assert waiting.finalized and host.calls == []
        return
    assert not waiting.finalized, "the finalizer stays: the deletion waits for the pause to end"
    assert waiting.asserted() == {ConditionType.DELETING: Reason.PAUSED}
    for releasing in (
        desired(paused=True, deleting=True, deletion_policy=DeletionPolicy.ORPHAN),
        desired(paused=True, deleting=True, management=OBSERVE),
    ):
        outcome = await _reconcile(releasing, state, host)
        assert outcome.finalized and outcome.state == state
    assert host.calls == []


def test_a_pause_keeps_the_last_known_conditions_and_ends_without_a_trace() -> None:
    ready = merge_conditions(
        None,
        [Condition(ConditionType.READY, True, Reason.AVAILABLE, "up to date")],
        now="t1",
        observed_generation=1,
    )
    held = hold(desired(paused=True), BOUND)
    assert held is not None
    paused = merge_conditions(
        ready, held.conditions, now="t2", observed_generation=2, keep_unnamed=True
    )
    by_type = {c["type"]: c for c in paused}
    assert by_type["Ready"] == ready[0], "Ready keeps its last value, generation and time"
    assert (by_type["Reconciling"]["status"], by_type["Reconciling"]["reason"]) == (
        "False",
        "Paused",
    )
    resumed = merge_conditions(
        paused,
        [Condition(ConditionType.READY, True, Reason.AVAILABLE, "up to date")],
        now="t3",
        observed_generation=2,
    )
    assert [c["type"] for c in resumed] == ["Ready"], "the pause is over: its condition goes"
    assert resumed[0]["lastTransitionTime"] == "t1"


def test_a_paused_status_does_not_claim_the_current_generation() -> None:
    held = hold(desired(paused=True), BOUND)
    assert held is not None
    patch = status_patch(held, None, now="t", cr_generation=4)
    assert "observedGeneration" not in patch
    assert patch["uid"] == "uid-1", "the state is written as it was"
    working = Outcome(state=BOUND, conditions=(), next_look=NextLook.POLL)
    assert status_patch(working, None, now="t", cr_generation=4)["observedGeneration"] == 4


def test_the_pause_annotation_and_the_policy_are_read_from_the_cr() -> None:
    assert desired_from_cr(cr_body(annotations={"takoform.io/paused": "true"})).paused
    assert not desired_from_cr(cr_body(annotations={"takoform.io/paused": "false"})).paused
    assert not desired_from_cr(cr_body()).paused
    assert desired_from_cr(cr_body()).management is ManagementPolicy.FULL
    assert desired_from_cr(cr_body(managementPolicy="Observe")).management is OBSERVE


def test_an_unclear_policy_is_refused() -> None:
    with pytest.raises(InvalidCustomResource, match="managementPolicy"):
        desired_from_cr(cr_body(managementPolicy="ReadOnly"))


@pytest.mark.parametrize("value", ["True", "yes", ""])
@pytest.mark.parametrize("deletion_policy", ["Delete", "Orphan"])
def test_an_unclear_pause_sends_nothing_but_an_orphan_deletion_goes(
    value: str, deletion_policy: str
) -> None:
    """Refused rather than guessed: Degraded InvalidSpec naming the annotation, no host call;
    Orphan sends nothing paused or not, so an unclear pause cannot hold its deletion."""
    body = cr_body(annotations={"takoform.io/paused": value}, deletionPolicy=deletion_policy)
    state = State(space="team-a", name="logs", form_ref=REF, uid="uid-1")
    want = desired_from_cr(body)
    refused = hold(want, state)
    assert refused is not None and not refused.finalized
    assert refused.asserted()[ConditionType.DEGRADED] is Reason.INVALID_SPEC
    assert "takoform.io/paused" in refused.conditions[0].message
    deleting = hold(replace(want, deleting=True), state)
    assert deleting is not None
    assert deleting.finalized == (deletion_policy == "Orphan")


async def _reconcile(desired: Desired, state: State, host: Any) -> Outcome:
    """One reconcile of the operator's path with one host granted to every namespace."""
    return (await reconcile(desired, state, REGISTRY, OneHost(host), MemoryBindings())).outcome


class Policy:
    """Tenancy with no grant at all: every request would be refused."""

    def default_host(self) -> str | None:
        return "default"

    def marked_default(self) -> set[str]:
        return {"default"}

    def hosts(self) -> set[str]:
        return {"default"}

    def grants(self) -> list[SpaceGrant]:
        return []

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return {}

    def namespace_uid(self, namespace: str) -> str:
        return ""

    def port(self, host: str, namespace: str = "") -> Any:
        return NoCalls()


def _bound_status() -> dict[str, Any]:
    return {
        "formRef": REF.to_json(),
        "host": "default",
        "space": "team-a",
        "name": "logs",
        "uid": "uid-1",
        "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
    }


async def test_a_paused_cr_reports_its_pause_before_any_tenancy_check() -> None:
    body = {**cr_body(annotations={"takoform.io/paused": "true"}), "status": _bound_status()}
    result = (await look_once(body, Policy(), MemoryBindings()))[0]
    assert result.outcome.asserted() == {}
    assert result.wrote is not None
    conditions = {c["type"]: c for c in result.wrote["conditions"]}
    assert conditions["Ready"]["status"] == "True", "Ready keeps its last known value"
    assert conditions["Reconciling"]["reason"] == "Paused"


async def test_an_invalid_pause_value_is_reported_and_sends_nothing() -> None:
    body = {**cr_body(annotations={"takoform.io/paused": "yes"}), "status": _bound_status()}
    result = (await look_once(body, OneHost(NoCalls()), MemoryBindings()))[0]
    assert result.outcome.asserted()[ConditionType.DEGRADED] is Reason.INVALID_SPEC


async def test_an_observe_deletion_needs_no_grant_and_no_host_call() -> None:
    body = cr_body(managementPolicy="Observe", deleting=True)
    body["status"] = _bound_status()
    result = (await look_once(body, Policy(), MemoryBindings()))[0]
    assert result.outcome.finalized and result.wrote is None


# -- Observe -------------------------------------------------------------------------------------


def observed(want: Desired, state: State, seen: Observation) -> Decision:
    """One reconcile as the service runs it: plan (a recorded claim followed at once), decide,
    then the policy."""
    return observe_only(want, decided(want, state, seen, REGISTRY), seen, REGISTRY)


def test_observe_reports_drift_instead_of_updating() -> None:
    full = observed(desired(), BOUND, Observation(resource=served({**SPEC, "sizeGiB": 20})))
    assert isinstance(full.action, Update), "under Full the same reconcile updates"
    watched = desired(management=OBSERVE)
    decision = observed(watched, BOUND, Observation(resource=served({**SPEC, "sizeGiB": 20})))
    assert decision.action is None
    assert decision.outcome.asserted() == {ConditionType.DRIFTED: Reason.SPEC_DRIFT}
    drift = next(c for c in decision.outcome.conditions if c.type is ConditionType.DRIFTED)
    assert "sizeGiB" in drift.message and "region" not in drift.message
    assert decision.outcome.state.outputs == {"endpoint": "https://logs.example"}, "status filled"
    assert decision.outcome.next_look is NextLook.POLL


def test_observe_without_drift_is_ready() -> None:
    decision = observed(desired(management=OBSERVE), BOUND, Observation(resource=served()))
    assert decision.action is None
    assert decision.outcome.asserted() == {ConditionType.READY: Reason.AVAILABLE}


def test_observe_never_creates_a_missing_resource() -> None:
    decision = observed(desired(management=OBSERVE), State(), Observation())
    assert decision.action is None
    assert decision.outcome.asserted()[ConditionType.DEGRADED] is Reason.OBSERVED_RESOURCE_MISSING
    assert decision.outcome.state.uid is None
    full = observed(desired(), State(), Observation())
    assert isinstance(full.action, Create), "under Full the same reconcile creates"


def test_observe_reports_a_vanished_resource_without_promising_to_recreate_it() -> None:
    decision = observed(desired(management=OBSERVE), BOUND, Observation())
    assert decision.action is None
    reason = decision.outcome.asserted()[ConditionType.DEGRADED]
    assert reason is Reason.OBSERVED_RESOURCE_MISSING
    assert "created again" not in " ".join(c.message for c in decision.outcome.conditions)


def test_observe_keeps_the_uid_rule() -> None:
    decision = observed(
        desired(management=OBSERVE), BOUND, Observation(resource=served(uid="uid-other"))
    )
    assert decision.action is None
    assert decision.outcome.asserted()[ConditionType.BLOCKED] is Reason.UID_MISMATCH


def test_an_observe_import_binds_like_an_import_and_never_creates() -> None:
    import_id = canonical_import_id("team-a", "logs", REF)
    watched = desired(management=OBSERVE, import_id=import_id)
    bound = observed(watched, State(), Observation(resource=served({**SPEC, "sizeGiB": 3})))
    assert bound.action is None and bound.outcome.state.uid == "uid-1"
    assert bound.outcome.asserted()[ConditionType.RECONCILING] is Reason.IMPORTED
    drift = observed(
        watched, bound.outcome.state, Observation(resource=served({**SPEC, "sizeGiB": 3}))
    )
    assert drift.action is None
    assert drift.outcome.asserted() == {ConditionType.DRIFTED: Reason.SPEC_DRIFT}
    missing = observed(watched, State(), Observation())
    assert missing.action is None
    assert missing.outcome.asserted()[ConditionType.DEGRADED] is Reason.IMPORT_TARGET_NOT_FOUND
    # The safe import path: switching to Full sends the one update the drift announced.
    full = observed(
        replace(watched, management=ManagementPolicy.FULL),
        drift.outcome.state,
        Observation(resource=served({**SPEC, "sizeGiB": 3})),
    )
    assert isinstance(full.action, Update) and full.action.spec["sizeGiB"] == 10


SETTLED = OperationView(OpState.SUCCEEDED, resource_uid="uid-1")


@pytest.mark.parametrize(
    ("state", "seen"),
    [
        (State(), Observation()),
        (State(), Observation(resource=served())),
        (CLAIMED, Observation()),
        (BOUND, Observation()),
        (BOUND, Observation(resource=served({**SPEC, "sizeGiB": 1}))),
        (BOUND, Observation(resource=served(uid="uid-2"))),
        (PENDING, Observation(operation=SETTLED, resource=served({**SPEC, "sizeGiB": 1}))),
        (PENDING, Observation(operation=SETTLED)),
        (
            replace(CLAIMED, pending=Pending("op-1", Verb.CREATE)),
            Observation(operation=OperationView(OpState.FAILED, error_code="x")),
        ),
    ],
)
def test_observe_never_sends_a_mutation(state: State, seen: Observation) -> None:
    for accept_uid in (None, "uid-2"):
        want = desired(management=OBSERVE, accept_uid=accept_uid)
        decision = observed(want, state, seen)
        assert decision.action is None, decision
        assert decision.outcome.asserted(), "something is reported"


def test_observe_only_withholds_every_verb() -> None:
    target = Target("team-a", REF, "logs")
    decided = Outcome(state=BOUND, conditions=(), next_look=NextLook.NOW)
    for action in (Create(target, SPEC, "k"), Update(target, SPEC, "1", "uid-1", "k")):
        decision = observe_only(
            desired(management=OBSERVE), Decision(decided, action), Observation(), REGISTRY
        )
        assert decision.action is None
        full = observe_only(desired(), Decision(decided, action), Observation(), REGISTRY)
        assert full.action is action
    # hold() lets an Observe deletion go before anything is planned: a Delete never gets here.
    delete = Decision(decided, Delete(target, "uid-1", "k"))
    with pytest.raises(AssertionError):
        observe_only(desired(management=OBSERVE), delete, Observation(), REGISTRY)


async def test_a_paused_cr_keeps_its_binding() -> None:
    """A paused owner is still the owner: its binding stays Bound, so no other CR can take its
    host resource over while it is paused."""
    bindings = MemoryBindings()
    paused = {**cr_body(annotations={"takoform.io/paused": "true"}), "status": _bound_status()}
    identity = Identity("team-a", BUCKET, "logs", "default")
    await bindings.create(Binding(identity, Phase.BOUND, ClaimRef("demo", "logs", "cr-1"), REF))
    result = (await look_once(paused, OneHost(NoCalls()), bindings))[0]
    assert result.outcome.asserted() == {}, "paused: nothing decided, nothing sent"
    rival = cr_body(resourceName="logs")
    rival["metadata"] = {**rival["metadata"], "uid": "cr-2", "name": "rival"}
    host = OneHost(NoCalls())
    outcome = ((await look_once(rival, host, bindings))[0]).outcome
    assert outcome.asserted()[ConditionType.BLOCKED] is Reason.ALREADY_MANAGED
    assert [b.claim.uid for b in bindings.objects.values() if b.claim] == ["cr-1"]


async def test_a_deletion_whose_claim_is_only_in_its_binding_ends_despite_a_malformed_spec() -> (
    None
):
    """The status write after the binding was lost and the pin no longer parses: the deletion
    takes the recorded identity fields from the binding, and finishes."""
    bindings = MemoryBindings()
    identity = Identity("team-a", BUCKET, "logs", "default")
    recorded = Requested("team-a", "logs")
    await bindings.create(
        Binding(identity, Phase.BOUND, ClaimRef("demo", "logs", "cr-1"), REF, recorded)
    )
    body = cr_body(formRef={"definitionVersion": "1.0"}, deletionPolicy="Orphan", deleting=True)
    host = ListsNothing()
    result = (await look_once(body, OneHost(host), bindings))[0]
    assert host.calls == ["list_operations"], "no mutation; the uid of a create looked for"
    assert result.outcome.finalized, result.outcome
    (binding,) = bindings.objects.values()
    assert binding.phase is Phase.RELEASED and binding.last_owner == ClaimRef(
        "demo", "logs", "cr-1"
    )
