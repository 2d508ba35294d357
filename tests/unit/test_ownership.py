"""Ownership and identity in the pure core: one owner per host identity, decided by its
TakoformBinding (core.ownership's table, row by row); identity fields immutable once the target
is recorded."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import builders
import pytest
from hypothesis import given
from hypothesis import strategies as st
from memory_bindings import MemoryBindings
from one_host import reconcile_with_one_host

from takoform_operator.core.actions import Target, Update
from takoform_operator.core.binding import (
    Binding,
    ClaimRef,
    Identity,
    InvalidBinding,
    Phase,
    binding_from_json,
)
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.decide import Observation, decide
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.keys import proves_ours
from takoform_operator.core.outcome import Outcome
from takoform_operator.core.ownership import (
    Bind,
    Contested,
    Ours,
    by_evidence,
    claim,
    let_go,
    restored,
    restores,
)
from takoform_operator.core.plan import Plan, plan, reclaims, target_of
from takoform_operator.core.state import (
    DEFAULT_HOST,
    DeletionPolicy,
    Desired,
    ManagementPolicy,
    Requested,
    ResourceView,
    State,
)
from takoform_operator.host_port import HostUnavailable

REGISTRY, REF = builders.REGISTRY, builders.BUCKET_REF
T0, T1 = "2026-11-30T08:00:00Z", "2026-11-30T08:00:01Z"


def _desired(**changes: object) -> Desired:
    """CR a/cr-me (uid `me`)."""
    return builders.desired(
        **{"cr_uid": "me", "namespace": "a", "cr_name": "cr-me", "created": T1, **changes}
    )


def _claimed_state(desired: Desired, **changes: object) -> State:
    state = State(
        form_ref=REF,
        space=desired.space,
        name=desired.name,
        requested=Requested.of(desired),
    )
    return replace(state, **changes)  # type: ignore[arg-type]


# -- the binding rules (core.ownership: the table in its docstring) ------------------------------

TARGET = Target("team-a", REF, "logs")
IDENTITY = Identity("team-a", REF.line, "logs", DEFAULT_HOST)
OWNER = ClaimRef("a", "cr-owner", "owner-uid")
#: What a CR that may not take the binding asserts: Blocked, and Stalled beside it.
ALREADY_MANAGED = {
    ConditionType.BLOCKED: Reason.ALREADY_MANAGED,
    ConditionType.STALLED: Reason.ALREADY_MANAGED,
}


def _bound(claim: ClaimRef | None = OWNER, **changes: object) -> Binding:
    base = Binding(IDENTITY, Phase.BOUND, claim, form_ref=REF, resource_version="7")
    return replace(base, **changes)  # type: ignore[arg-type]


def test_no_binding_creates_one_for_this_cr_with_the_target_it_records() -> None:
    verdict = claim(_desired(), State(), TARGET, None)
    assert isinstance(verdict, Bind) and not verdict.binding.resource_version, "a create"
    assert verdict.binding.claim == ClaimRef("a", "cr-me", "me")
    assert verdict.binding.form_ref == REF
    assert verdict.binding.requested == Requested("team-a", "logs", None, None)
    assert verdict.state.form_ref == REF and verdict.state.uid is None, "claimed, not bound"


def test_a_state_claimed_before_bindings_existed_gets_its_binding_with_its_uid() -> None:
    desired = _desired()
    state = _claimed_state(desired, uid="h-1")
    verdict = claim(desired, state, TARGET, None)
    assert isinstance(verdict, Bind) and verdict.binding.uid == "h-1"
    assert verdict.state == state


def test_our_own_binding_restores_the_target_the_status_lost() -> None:
    desired = _desired()
    mine = _bound(ClaimRef("a", "cr-me", "me"), requested=Requested.of(desired))
    verdict = claim(desired, State(), TARGET, mine)
    assert isinstance(verdict, Ours)
    assert verdict.state.form_ref == REF and verdict.state.requested == Requested.of(desired)
    assert restored(State(), mine) == verdict.state


def test_bound_to_another_cr_is_contested_and_names_only_the_binding() -> None:
    verdict = claim(_desired(namespace="b"), State(), TARGET, _bound())
    assert isinstance(verdict, Contested)
    blocked = verdict.outcome
    assert blocked.asserted() == ALREADY_MANAGED
    message = blocked.conditions[0].message
    assert IDENTITY.binding_name() in message
    assert "cr-owner" not in message and "cr-owner" not in str(blocked.remedies)
    assert blocked.state == State(), "nothing recorded, nothing sent"


def test_a_deletion_of_a_cr_that_is_not_the_owner_sends_nothing() -> None:
    verdict = claim(_desired(deleting=True), _claimed_state(_desired()), TARGET, _bound())
    assert isinstance(verdict, Outcome) and verdict.finalized


@pytest.mark.parametrize(
    ("phase", "namespace", "name", "importing", "binds"),
    [
        # Released (Orphan): only an import from the last owner's namespace.
        (Phase.RELEASED, "a", "other", True, True),
        (Phase.RELEASED, "a", "other", False, False),
        (Phase.RELEASED, "b", "other", True, False),
        # Lost (the owner vanished): only the CR of the same namespace and name (a restore).
        (Phase.LOST, "a", "cr-owner", False, True),
        (Phase.LOST, "a", "cr-owner", True, True),
        (Phase.LOST, "a", "other", True, False),
        (Phase.LOST, "b", "cr-owner", False, False),
    ],
)
def test_who_may_take_over_a_released_or_lost_binding(
    phase: Phase, namespace: str, name: str, importing: bool, binds: bool
) -> None:
    let_go = replace(_bound(None, uid="h-1", last_owner=OWNER), phase=phase)
    import_id = canonical_import_id("team-a", "logs", REF) if importing else None
    desired = _desired(namespace=namespace, cr_name=name, cr_uid="new-uid", import_id=import_id)
    verdict = claim(desired, State(), TARGET, let_go)
    if not binds:
        assert isinstance(verdict, Outcome)
        assert verdict.asserted() == ALREADY_MANAGED
        return
    assert isinstance(verdict, Bind) and verdict.binding.resource_version == "7", "a replace"
    assert verdict.binding.claim == ClaimRef(namespace, name, "new-uid")
    assert verdict.binding.phase is Phase.BOUND
    assert verdict.state.uid == "h-1", "the uid the binding kept is checked, not trusted anew"
    if phase is Phase.LOST:
        assert verdict.event is not None and verdict.event.reason is Reason.REBOUND


@pytest.mark.parametrize("phase", [Phase.BOUND, Phase.RELEASED, Phase.LOST])
def test_an_admins_pre_binding_admits_exactly_the_cr_it_names(phase: Phase) -> None:
    reserved = replace(_bound(ClaimRef("b", "taker"), uid="h-1", last_owner=OWNER), phase=phase)
    taker = _desired(namespace="b", cr_name="taker", cr_uid="t-uid")
    verdict = claim(taker, State(), TARGET, reserved)
    assert isinstance(verdict, Bind) and verdict.binding.claim == ClaimRef("b", "taker", "t-uid")
    assert verdict.state.uid == "h-1"
    other = claim(_desired(namespace="b", cr_name="other"), State(), TARGET, reserved)
    assert isinstance(other, Outcome)
    assert other.asserted() == ALREADY_MANAGED


@pytest.mark.parametrize("recorded", [False, True], ids=["fresh", "target recorded"])
def test_a_bound_binding_without_claim_ref_blocks_every_cr(recorded: bool) -> None:
    # Made by hand: it names no owner, so no owner can be proven gone and nobody may take it.
    hand_made = _bound(None)
    desired = _desired()
    state = _claimed_state(desired) if recorded else State()
    verdict = claim(desired, state, TARGET, hand_made)
    assert isinstance(verdict, Outcome), verdict
    assert verdict.asserted() == ALREADY_MANAGED
    assert "without claimRef, to no CR" in verdict.conditions[0].message
    _an_admin_decides(verdict)


def _commands(outcome: Outcome) -> list[str]:
    return [remedy.command or "" for remedy in outcome.remedies]


def _an_admin_decides(outcome: Outcome) -> None:
    """A binding of another namespace (or of none): the remedy hands nothing across namespaces
    as routine; it says an admin decides, and points at the binding to inspect."""
    assert not any("takoform release" in command for command in _commands(outcome))
    texts = " ".join(remedy.text() for remedy in outcome.remedies)
    assert "a cluster admin decides" in texts
    assert f"kubectl get takoformbindings/{IDENTITY.binding_name()} -o yaml" in _commands(outcome)


@pytest.mark.parametrize("phase", [Phase.RELEASED, Phase.LOST])
def test_a_binding_of_another_namespace_is_an_admins_decision_never_a_routine_remedy(
    phase: Phase,
) -> None:
    let_go = replace(_bound(None, uid="h-1", last_owner=OWNER), phase=phase)
    verdict = claim(_desired(namespace="b", cr_name="cr-owner"), State(), TARGET, let_go)
    assert isinstance(verdict, Outcome)
    assert verdict.asserted() == ALREADY_MANAGED
    _an_admin_decides(verdict)


def test_a_namespace_of_the_same_name_created_again_is_another_namespace() -> None:
    owner = replace(OWNER, namespace_uid="ns-uid-1")
    let_go = replace(_bound(None, uid="h-1", last_owner=owner), phase=Phase.LOST)
    verdict = claim(_desired(cr_name="other", namespace_uid="ns-uid-2"), State(), TARGET, let_go)
    assert isinstance(verdict, Outcome)
    _an_admin_decides(verdict)


def test_a_reservation_for_another_namespaces_cr_is_an_admins_decision() -> None:
    reserved = _bound(ClaimRef("b", "taker"))
    verdict = claim(_desired(), State(), TARGET, reserved)
    assert isinstance(verdict, Outcome)
    _an_admin_decides(verdict)


@pytest.mark.parametrize("phase", [Phase.RELEASED, Phase.LOST])
def test_a_binding_of_this_namespace_offers_the_pre_binding_to_ask_for(phase: Phase) -> None:
    let_go = replace(_bound(None, uid="h-1", last_owner=OWNER), phase=phase)
    verdict = claim(_desired(cr_name="other"), State(), TARGET, let_go)
    assert isinstance(verdict, Outcome)
    release = f"kubectl takoform release {IDENTITY.binding_name()} --to a/other"
    assert release in _commands(verdict)


class _NoHost:
    """A host that fails the test on any call: a CR that may not bind sends nothing."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"host call {name}")


class _LaggingBook(MemoryBindings):
    """A process whose binding cache has not seen another process's claim yet (a shard
    handover) until it reads from the API server (`read`), as the real book then has it."""

    def __init__(self) -> None:
        super().__init__()
        self.caught_up = False

    async def read(self, identity: Identity) -> Binding | None:
        self.caught_up = True
        return await super().read(identity)

    def held_by(self, cr_uid: str) -> Binding | None:
        return super().held_by(cr_uid) if self.caught_up else None

    async def get(self, identity: Identity) -> Binding | None:
        return await super().get(identity) if self.caught_up else None


class _Listing:
    """A host that answers the listing of operations (none) and a read (absent), and records
    them."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def list_operations(self, target: Target) -> list[Any]:
        self.calls.append("list_operations")
        return []

    async def read(self, target: Target) -> None:
        self.calls.append("read")


async def test_a_deletion_that_never_claimed_asks_the_api_server_not_its_cache() -> None:
    """Deleted before its status recorded anything, the CR is let go without a host call only
    when the API server (not this process's cache, which may lag another process's claim)
    holds no binding of it: a claim found there is a deletion like any other."""
    desired = _desired(deleting=True)
    bindings = _LaggingBook()
    claimed = replace(_bound(ClaimRef("a", "cr-me", "me")), requested=Requested.of(desired))
    bindings.objects[IDENTITY.binding_name()] = claimed
    host = _Listing()
    outcome = await reconcile_with_one_host(desired, State(), host, REGISTRY, bindings)  # type: ignore[arg-type]
    assert host.calls == ["list_operations", "read"], "the operations first, then the read"
    assert outcome.finalized, "nothing of ours was created"
    assert ("delete", IDENTITY.binding_name()) in bindings.writes
    unclaimed = await reconcile_with_one_host(desired, State(), _NoHost(), REGISTRY, _LaggingBook())
    assert unclaimed.finalized, "no binding anywhere: let go, nothing sent"


async def test_a_look_at_a_bound_binding_without_claim_ref_sends_and_writes_nothing() -> None:
    bindings = MemoryBindings()
    bindings.objects[IDENTITY.binding_name()] = _bound(None)
    outcome = await reconcile_with_one_host(_desired(), State(), _NoHost(), REGISTRY, bindings)
    assert outcome.asserted() == ALREADY_MANAGED
    assert outcome.contends_for == IDENTITY.binding_name(), "a change of it wakes this CR"
    assert bindings.writes == [], "the binding stays as the admin made it"


@pytest.mark.parametrize(
    ("orphan", "after"), [(True, Phase.RELEASED), (False, None)], ids=["Orphan", "Delete"]
)
def test_a_finished_deletion_releases_or_deletes_the_binding(
    orphan: bool, after: Phase | None
) -> None:
    policy = DeletionPolicy.ORPHAN if orphan else DeletionPolicy.DELETE
    desired = _desired(deleting=True, deletion_policy=policy)
    mine = _bound(ClaimRef("a", "cr-me", "me"))
    result = let_go(desired, _claimed_state(desired, uid="h-9"), mine)
    if after is None:
        assert result is None, "deleted: the host resource went"
        return
    assert result is not None and result.phase is after and result.claim is None
    assert result.last_owner == ClaimRef("a", "cr-me", "me") and result.uid == "h-9"


@pytest.mark.parametrize(
    "never_creates",
    [{"import_id": '{"name": "logs"}'}, {"management": ManagementPolicy.OBSERVE}],
    ids=["import", "Observe"],
)
def test_a_cr_that_never_bound_an_incarnation_nor_created_one_deletes_its_binding(
    never_creates: dict[str, object],
) -> None:
    """Released without a uid, the binding would keep the name from every other namespace for
    good, although it holds nothing (an import or an Observe CR of a name that never existed)."""
    desired = _desired(deleting=True, deletion_policy=DeletionPolicy.ORPHAN, **never_creates)
    mine = _bound(ClaimRef("a", "cr-me", "me"))
    assert let_go(desired, _claimed_state(desired), mine) is None
    released = let_go(desired, _claimed_state(desired, uid="h-9"), mine)
    assert released is not None and released.phase is Phase.RELEASED, "a bound one is kept"
    created = _desired(deleting=True, deletion_policy=DeletionPolicy.ORPHAN)
    kept = let_go(created, _claimed_state(created), mine)
    assert kept is not None and kept.phase is Phase.RELEASED, "a create may have landed"


@pytest.mark.parametrize("phase", [Phase.RELEASED, Phase.LOST])
def test_a_namespace_created_again_under_the_same_name_inherits_nothing(phase: Phase) -> None:
    last = ClaimRef("a", "cr-me", "old-cr", namespace_uid="ns-1")
    left = replace(_bound(None, uid="h-1", last_owner=last), phase=phase)
    import_id = canonical_import_id("team-a", "logs", REF)
    recycled = _desired(cr_uid="new-cr", import_id=import_id, namespace_uid="ns-2")
    verdict = claim(recycled, State(), TARGET, left)
    assert isinstance(verdict, Outcome), "another tenant's namespace of the same name"
    assert verdict.asserted() == ALREADY_MANAGED
    same = _desired(cr_uid="new-cr", import_id=import_id, namespace_uid="ns-1")
    taken = claim(same, State(), TARGET, left)
    assert isinstance(taken, Bind) and taken.binding.claim == ClaimRef(
        "a", "cr-me", "new-cr", namespace_uid="ns-1"
    ), "the same namespace takes it back, and the binding records its uid"
    unrecorded = replace(left, last_owner=ClaimRef("a", "cr-me", "old-cr"))
    assert isinstance(claim(recycled, State(), TARGET, unrecorded), Bind), "an earlier release's"


def test_a_restore_proves_its_vanished_predecessors_create_its_own() -> None:
    """The owner went while no operator ran: its binding went Lost without the incarnation.
    The same manifest applied again (same namespace and name, a new CR uid) takes the binding
    over, and the resource its predecessor created with its key is this CR's to adopt."""
    vanished = ClaimRef("a", "cr-me", "old-cr", namespace_uid="ns-1")
    lost = replace(_bound(None, last_owner=vanished), phase=Phase.LOST)
    again = _desired(cr_uid="new-cr", namespace_uid="ns-1")
    taken = claim(again, State(), TARGET, lost)
    assert isinstance(taken, Bind)
    assert restores(taken.binding, again) == "old-cr"
    created = _served("h-1", "old-cr:create:0")
    assert proves_ours(created, replace(again, restores="old-cr"))
    assert not proves_ours(created, again), "without the restore, somebody else's"
    stranger = _desired(cr_uid="new-cr", cr_name="other", namespace_uid="ns-1")
    assert restores(taken.binding, stranger) == "", "another name restores nothing"
    recycled = _desired(cr_uid="new-cr", namespace_uid="ns-2")
    assert restores(taken.binding, recycled) == "", "nor another namespace of the same name"
    bound = replace(taken.binding, uid="h-1")
    assert restores(bound, again) == "", "a recorded incarnation is checked by its uid instead"


def test_an_import_records_the_incarnation_it_bound_in_its_binding_once() -> None:
    """No creation key of ours proves an imported resource: the binding records its uid (one
    write, once), so a restore of a vanished import is held to that incarnation."""
    import_id = canonical_import_id("team-a", "logs", REF)
    desired = _desired(import_id=import_id)
    imported = _claimed_state(desired, uid="h-1")
    mine = _bound(ClaimRef("a", "cr-me", "me"))
    verdict = claim(desired, imported, TARGET, mine)
    assert isinstance(verdict, Bind) and verdict.binding.uid == "h-1"
    assert verdict.binding.resource_version == mine.resource_version, "a conditional replace"
    recorded = replace(verdict.binding, resource_version="8")
    assert isinstance(claim(desired, imported, TARGET, recorded), Ours), "once"
    created = _desired()
    assert isinstance(claim(created, _claimed_state(created, uid="h-1"), TARGET, mine), Ours), (
        "a create's incarnation is proven by its creation key: no write"
    )
    vanished = recorded.lost(None)
    restore = _desired(cr_uid="again", import_id=import_id)
    taken = claim(restore, State(), TARGET, vanished)
    assert isinstance(taken, Bind) and taken.state.uid == "h-1", "held to that incarnation"


class _Serving:
    """A host that serves one resource to reads and accepts nothing."""

    def __init__(self, resource: ResourceView) -> None:
        self.resource = resource

    async def read(self, target: Target) -> ResourceView:
        return self.resource

    async def list_operations(self, target: Target) -> list[Any]:
        return []

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"host call {name}")


@pytest.mark.parametrize(
    ("creation_key", "recorder", "waits"),
    [
        ("owner:create:0", "owner", True),  # its creator lives: it binds again
        ("owner:create:0", "status", True),  # another CR's status records it
        ("owner:create:0", None, False),  # its creator is gone, nobody records it
        (None, None, False),  # made without any CR
    ],
)
async def test_an_import_never_binds_a_resource_another_live_cr_records(
    creation_key: str | None, recorder: str | None, waits: bool
) -> None:
    """A resource without a binding (an admin's forced release, the binding CRD reinstalled, a
    restore without cluster-scoped objects) is rebuilt from evidence, never won by a race: an
    import waits while another CR records it, and asks the API server (not a cache) first."""
    asked: list[tuple[str, str | None]] = []

    def recorded(identity: Identity, cr_uid: str, creator: str | None) -> bool:
        asked.append((cr_uid, creator))
        return recorder == "status" or (recorder is not None and creator == recorder)

    bindings = MemoryBindings(recorded=recorded)
    desired = _desired(import_id=canonical_import_id("team-a", "logs", REF))
    host = _Serving(_served("h-1", creation_key))
    outcome = await reconcile_with_one_host(desired, State(), host, REGISTRY, bindings)  # type: ignore[arg-type]
    assert asked == [("me", creation_key and "owner")], "asked once, before any binding write"
    if waits:
        assert outcome.asserted() == ALREADY_MANAGED
        assert "another CR records it" in outcome.conditions[0].message
        assert outcome.contends_for == IDENTITY.binding_name(), "woken when it is written"
        assert bindings.writes == [] and outcome.state.uid is None, "bound nothing"
    else:
        assert bindings.writes[0] == ("create", IDENTITY.binding_name())


@pytest.mark.parametrize("went", [True, False], ids=["binding went", "never bound"])
async def test_a_create_weighs_the_evidence_only_where_its_binding_went(went: bool) -> None:
    """A create binds a name nobody holds at the cost of its binding alone (the lock; its
    create is fenced). Where this process saw the binding go, another CR may still record
    the resource: it is asked first (no host read), and this CR waits while one does."""
    asked: list[str | None] = []

    def recorded(identity: Identity, cr_uid: str, creator: str | None) -> bool:
        asked.append(creator)
        return True

    bindings = MemoryBindings(recorded=recorded)
    if went:
        bindings.gone.add(IDENTITY.binding_name())
    host = _NoHost() if went else _Down()
    outcome = await reconcile_with_one_host(_desired(), State(), host, REGISTRY, bindings)  # type: ignore[arg-type]
    if went:
        assert asked == [None], "the API server asked, the host not"
        assert outcome.asserted() == ALREADY_MANAGED and bindings.writes == []
    else:
        assert asked == [], "no list on the create path"
        assert bindings.writes == [("create", IDENTITY.binding_name())]


class _Down:
    """A host that cannot be reached."""

    async def list_operations(self, target: Target) -> list[Any]:
        raise HostUnavailable("down")

    async def read(self, target: Target) -> None:
        raise HostUnavailable("down")


async def test_an_orphan_deletion_whose_binding_went_releases_one_rebuilt_from_status() -> None:
    """The binding went from under its owner (an admin's forced release, the binding CRD
    reinstalled) before the owner wrote it again; its Orphan deletion still releases the
    resource to its namespace, remembering the owner and the uid its status records: it
    never leaves the resource unbound for any namespace to import."""
    desired = _desired(deleting=True, deletion_policy=DeletionPolicy.ORPHAN)
    state = _claimed_state(desired, host=DEFAULT_HOST, uid="h-1")
    bindings = MemoryBindings()
    outcome = await reconcile_with_one_host(desired, state, _NoHost(), REGISTRY, bindings)  # type: ignore[arg-type]
    assert outcome.finalized
    released = bindings.objects[IDENTITY.binding_name()]
    assert released.phase is Phase.RELEASED and released.uid == "h-1"
    assert released.last_owner == ClaimRef("a", "cr-me", "me")


def test_a_binding_whose_owner_went_is_lost_remembering_it() -> None:
    lost = _bound(uid=None).lost("h-2")
    assert lost.phase is Phase.LOST and lost.claim is None
    assert lost.last_owner == OWNER and lost.uid == "h-2"


@given(
    st.text(min_size=1, max_size=20),
    st.text(min_size=1, max_size=20),
    st.text(min_size=1, max_size=20),
)
def test_binding_names_are_valid_object_names_and_differ_by_identity(
    host: str, space: str, name: str
) -> None:
    one = Identity(space, REF.line, name, host)
    named = one.binding_name()
    assert len(named) <= 63 and named.startswith("tb-") and named[3:].isalnum()
    assert named.islower()
    assert named != Identity(space + "x", REF.line, name, host).binding_name()
    assert named != Identity(space, REF.line, name, host + "x").binding_name()


def test_a_binding_round_trips_through_its_object() -> None:
    binding = replace(
        _bound(ClaimRef("b", "taker")), uid="h-1", requested=Requested("team-a", "logs")
    )
    assert binding_from_json(binding.to_json()) == binding
    with pytest.raises(InvalidBinding):
        binding_from_json({"spec": {"space": "x"}})


# -- the identity rule ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("change", "label"),
    [
        ({"name": "logs-2"}, "resource name"),
        ({"space": "team-b"}, "spec.space"),
        ({"pin": (REF.definition_version, REF.schema_digest)}, "spec.formRef"),
        ({"import_id": "team-a/logs"}, "spec.importId"),
    ],
)
def test_a_changed_identity_field_is_blocked_naming_both_values(
    change: dict[str, object], label: str
) -> None:
    desired = _desired()
    state = _claimed_state(desired, uid="h-1")
    planned = plan(replace(desired, **change), state, REGISTRY)  # type: ignore[arg-type]
    assert isinstance(planned, Outcome)
    assert planned.asserted()[ConditionType.BLOCKED] is Reason.IDENTITY_CHANGED
    assert label in planned.conditions[0].message
    assert planned.state == state, "state kept"


@pytest.mark.parametrize(
    "change",
    [
        {"name": "other", "import_id": canonical_import_id("team-a", "other", REF)},
        {"space": "team-b", "import_id": canonical_import_id("team-b", "logs", REF)},
    ],
    ids=["another name", "another space"],
)
def test_a_bound_import_never_claims_a_new_target(change: dict[str, object]) -> None:
    # Only an import that never found its target (it sent nothing but reads) claims afresh; a
    # bound one keeps its incarnation, exactly as a created resource does.
    imported = _desired(import_id=canonical_import_id("team-a", "logs", REF))
    changed = replace(imported, **change)  # type: ignore[arg-type]
    bound = _claimed_state(imported, uid="h-1", generation="1")
    planned = plan(changed, bound, REGISTRY)
    assert isinstance(planned, Outcome)
    assert planned.asserted()[ConditionType.BLOCKED] is Reason.IDENTITY_CHANGED
    assert planned.state == bound, "state kept"
    assert reclaims(changed, _claimed_state(imported)), "one that never bound claims afresh"
    assert not reclaims(changed, bound)


def test_deleting_after_an_identity_change_deletes_the_recorded_target() -> None:
    desired = _desired()
    state = _claimed_state(desired, uid="h-1")
    planned = plan(replace(desired, name="logs-2", deleting=True), state, REGISTRY)
    assert isinstance(planned, Plan) and planned.target is not None
    assert planned.target.name == "logs", "the target that was sent to, not the spec's"


def test_an_import_that_never_found_its_target_may_be_corrected() -> None:
    desired = _desired(import_id="team-a/logs")
    state = _claimed_state(desired)
    corrected = replace(desired, name="logs-2", import_id="team-a/logs-2")
    assert reclaims(corrected, state), "claimed afresh"
    target = target_of(corrected, State(), REGISTRY)
    assert isinstance(target, Target) and target.name == "logs-2"


def test_an_accepted_rebind_starts_a_fresh_key_sequence() -> None:
    desired = _desired(accept_uid="h-new", cr_generation=3)
    state = _claimed_state(desired, uid="h-old", generation="1", attempt=2)
    resource = builders.served(uid="h-new", spec={"region": "eu-west-1", "sizeGiB": 99})
    planned = plan(desired, state, REGISTRY)
    assert isinstance(planned, Plan)
    decision = decide(desired, state, planned, Observation(None, resource), REGISTRY)
    assert decision.outcome.state.uid == "h-new"
    assert decision.outcome.state.attempt == 3
    assert isinstance(decision.action, Update)
    assert decision.action.key == "me:update:h-new:3:1:3", "never the old incarnation's key"


@pytest.mark.parametrize(
    ("named", "reason", "says"),
    [
        (("team-a", "r24"), Reason.NAME_MISMATCH, "names resource 'r24', but the resource name"),
        (("team-b", "logs"), Reason.SPACE_MISMATCH, "names space 'team-b', but spec.space"),
    ],
)
def test_an_import_id_that_disagrees_names_what_disagrees(
    named: tuple[str, str], reason: Reason, says: str
) -> None:
    desired = _desired(import_id=canonical_import_id(*named, REF))
    planned = target_of(desired, State(), REGISTRY)
    assert isinstance(planned, Outcome)
    assert planned.asserted() == {ConditionType.DEGRADED: reason}
    assert says in planned.conditions[0].message


# -- an upgrade: two CRs had both recorded the target before bindings existed -------------------


def _served(uid: str, creation_key: str | None) -> ResourceView:
    return builders.served(uid=uid, spec={}, creation_key=creation_key)


@pytest.mark.parametrize(
    ("mine_uid", "binding_uid", "served", "takes"),
    [
        (None, None, _served("h-1", "me:create:0"), True),  # created with this CR's key
        ("h-1", "h-0", _served("h-1", "other:create:0"), True),  # the incarnation it is bound to
        ("h-1", "h-1", _served("h-1", "other:create:0"), False),  # the holder is bound to it too
        ("h-2", "h-0", _served("h-1", "other:create:0"), False),  # neither: it stays
        ("h-1", "h-0", None, False),  # nothing on the host: no evidence
    ],
)
def test_two_recorded_claims_are_decided_by_host_evidence_never_by_age(
    mine_uid: str | None, binding_uid: str | None, served: ResourceView | None, takes: bool
) -> None:
    desired = _desired(created="2026-12-01T00:00:00Z")  # the younger CR
    state = _claimed_state(desired, uid=mine_uid)
    held = _bound(uid=binding_uid)
    verdict = claim(desired, state, TARGET, held)
    assert isinstance(verdict, Contested) and verdict.recorded
    taken = by_evidence(desired, state, held, served)
    if not takes:
        assert taken is None
        return
    assert taken is not None and taken.binding.claim == ClaimRef("a", "cr-me", "me")
    assert taken.binding.resource_version == "7", "a replace, conditioned on what was read"
    assert taken.binding.uid == "h-1" and taken.state == state


def test_a_cr_that_never_recorded_the_target_is_never_decided_by_evidence() -> None:
    verdict = claim(_desired(), State(), TARGET, _bound())
    assert isinstance(verdict, Contested) and not verdict.recorded
