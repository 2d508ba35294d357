"""Ownership and identity in the pure core: one owner per host identity, decided from persisted
claims alone; identity fields immutable once the target is recorded."""

from __future__ import annotations

import itertools
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from takoform_operator.core.actions import Update
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.decide import Observation, decide
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.outcome import Outcome
from takoform_operator.core.ownership import Claimant, owner
from takoform_operator.core.plan import Plan, plan
from takoform_operator.core.state import Desired, Requested, ResourceView, State
from takoform_operator.registry_data import load_registry

REGISTRY = load_registry()
REF = next(r for r in REGISTRY.default_creates.values() if r.kind == "Bucket")
T0, T1 = "2026-11-30T08:00:00Z", "2026-11-30T08:00:01Z"


def _claimant(uid: str, created: str = T0, *, claimed: bool = False, ns: str = "a") -> Claimant:
    return Claimant(uid=uid, namespace=ns, name=f"cr-{uid}", created=created, claimed=claimed)


def _desired(**changes: object) -> Desired:
    base: dict[str, object] = {
        "cr_uid": "me",
        "cr_generation": 1,
        "line": REF.line,
        "space": "team-a",
        "name": "logs",
        "parameters": {"region": "eu-west-1", "sizeGiB": 10},
        "namespace": "a",
        "cr_name": "cr-me",
        "created": T1,
    }
    base.update(changes)
    return Desired(**base)  # type: ignore[arg-type]


def _claimed_state(desired: Desired, **changes: object) -> State:
    state = State(
        form_ref=REF,
        space=desired.space,
        name=desired.name,
        requested=Requested.of(desired),
    )
    return replace(state, **changes)  # type: ignore[arg-type]


# -- the tie-break ---------------------------------------------------------------------------------


def test_a_claim_beats_an_older_cr_that_never_claimed() -> None:
    older, claimed = _claimant("old", T0), _claimant("new", T1, claimed=True)
    assert owner([older, claimed]) == claimed


def test_among_unclaimed_the_oldest_wins_then_namespace_then_name() -> None:
    assert owner([_claimant("b", T1), _claimant("a", T0)]).uid == "a"  # type: ignore[union-attr]
    same_instant = [_claimant("x", ns="zeta"), _claimant("y", ns="alpha")]
    assert owner(same_instant).uid == "y"  # type: ignore[union-attr]
    assert owner([]) is None


@given(
    st.lists(
        st.tuples(st.sampled_from([T0, T1]), st.booleans(), st.sampled_from(["a", "b"])),
        min_size=1,
        max_size=5,
    )
)
def test_the_owner_does_not_depend_on_the_order_reconciles_see_the_claimants(
    facts: list[tuple[str, bool, str]],
) -> None:
    claimants = [
        _claimant(str(i), created, claimed=claimed, ns=ns)
        for i, (created, claimed, ns) in enumerate(facts)
    ]
    owners = {owner(list(order)) for order in itertools.permutations(claimants)}
    assert len(owners) == 1


# -- plan() with rivals ----------------------------------------------------------------------------


def test_a_cr_whose_identity_another_owns_is_blocked_and_sends_nothing() -> None:
    rival = _claimant("rival", T1, claimed=True)
    planned = plan(_desired(created=T0), State(), REGISTRY, [rival])
    assert isinstance(planned, Outcome), "no host read is planned"
    assert planned.asserted()[ConditionType.BLOCKED] is Reason.ALREADY_MANAGED
    assert "a/cr-rival" in planned.conditions[0].message
    assert planned.state == State(), "nothing recorded"


def test_deleting_a_cr_that_does_not_own_its_identity_releases_it_without_a_host_call() -> None:
    rival = _claimant("rival", T0, claimed=True)
    planned = plan(_desired(deleting=True), State(), REGISTRY, [rival])
    assert isinstance(planned, Outcome) and planned.finalized


def test_the_owner_itself_is_not_its_own_rival() -> None:
    desired = _desired()
    me_in_index = _claimant("me", T1, claimed=True)
    state = _claimed_state(desired)
    planned = plan(desired, state, REGISTRY, [me_in_index, _claimant("late", T1)])
    assert isinstance(planned, Plan)


# -- the claim and the identity rule ---------------------------------------------------------------


def test_the_first_step_records_the_target_and_sends_nothing() -> None:
    desired = _desired()
    claimed = plan(desired, State(), REGISTRY)
    assert isinstance(claimed, Outcome) and claimed.continue_now
    assert claimed.state.form_ref == REF and claimed.state.name == "logs"
    assert claimed.state.requested == Requested("team-a", "logs", None, None)
    assert claimed.state.uid is None, "claimed, not bound"


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
    never_found = plan(changed, _claimed_state(imported), REGISTRY)
    assert isinstance(never_found, Outcome) and never_found.continue_now, "claims afresh"
    assert never_found.state.requested == Requested.of(changed)


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
    planned = plan(corrected, state, REGISTRY)
    assert isinstance(planned, Outcome) and planned.continue_now, "claimed afresh"
    assert planned.state.name == "logs-2"


def test_an_accepted_rebind_starts_a_fresh_key_sequence() -> None:
    desired = _desired(accept_uid="h-new", cr_generation=3)
    state = _claimed_state(desired, uid="h-old", generation="1", attempt=2)
    resource = ResourceView(
        form_ref=REF,
        space="team-a",
        name="logs",
        uid="h-new",
        generation="1",
        revision="1",
        spec={"region": "eu-west-1", "sizeGiB": 99},
    )
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
    planned = plan(desired, State(), REGISTRY)
    assert isinstance(planned, Outcome)
    assert planned.asserted() == {ConditionType.DEGRADED: reason}
    assert says in planned.conditions[0].message
