"""Shrunk sequences the model checker found against the operator before ownership was a
persisted fact (issue 8), kept as regression tests against the current seam.

Each replays the steps as the state machine runs them (invariants after every step, liveness at
the end) and then asserts the outcome the issue asks for.
"""

from __future__ import annotations

from typing import Any

import pytest

from takoform_operator.core.actions import Create, Update
from takoform_operator.core.conditions import ConditionType, Reason

from .cluster import creator_of, status_of
from .machine import OwnershipModel, World
from .steps import Step, replay, step

pytestmark = pytest.mark.host


def create_cr(
    name: str,
    namespace: str = "ns-a",
    *,
    resource_name: str | None = None,
    policy: str = "Delete",
    same_instant: bool = False,
) -> Step:
    """The step that makes CR `namespace/name` (sizeGiB 10)."""
    return step(
        "create_cr",
        namespace=namespace,
        name=name,
        resource_name=resource_name,
        size=10,
        policy=policy,
        same_instant=same_instant,
    )


def import_cr(name: str, namespace: str = "ns-a", *, policy: str = "Delete") -> Step:
    """The step that makes CR `namespace/name` importing the first host resource (sizeGiB 10)."""
    return step(
        "create_importing_cr", namespace=namespace, name=name, pick=0, size=10, policy=policy
    )


CREATE_ALPHA = create_cr("alpha")


def resources(machine: OwnershipModel) -> list[dict[str, Any]]:
    machine._touched()
    return machine.host().resources


def reason(machine: OwnershipModel, index: int, kind: ConditionType) -> Reason | None:
    uid = list(machine.cluster.crs)[index]
    return machine.last_outcomes[uid].asserted().get(kind)


def test_lost_status_write_after_an_accepted_create_then_a_name_edit_makes_no_second_resource(
    model_world: World,
) -> None:
    """(a) The create of "beta" is accepted, its status write lost, then spec.resourceName is
    set to "alpha" (the name another CR asks for): before, the first resource was orphaned the
    moment the spec stopped naming it, and the next reconcile created a second one."""
    machine = replay(
        model_world,
        [
            create_cr("beta"),
            step("reconcile_losing_status_write", pick=0),
            CREATE_ALPHA,
            step("edit_resource_name", pick=0, resource_name="alpha"),
        ],
    )
    first_uid = next(iter(machine.cluster.crs))
    creates = [s for s in machine.port.sent if isinstance(s.action, Create)]
    assert [s.action.target.name for s in creates if s.cr_uid == first_uid] == ["beta"]
    (beta,) = [r for r in resources(machine) if r["metadata"]["name"] == "beta"]
    assert creator_of(beta) == first_uid
    assert machine.cluster.crs[first_uid]["status"]["name"] == "beta", "it holds what it made"
    assert reason(machine, 0, ConditionType.BLOCKED) is Reason.IDENTITY_CHANGED


CREATE_BETA = create_cr("beta")
CREATE_ALPHA_IN_B = create_cr("alpha", "ns-b")
#: The exact sequence the checker shrank: CR ns-a/alpha imports what ns-a/beta created.
IMPORT_OWNED = [
    CREATE_BETA,
    step("reconcile", pick=0),
    import_cr("alpha"),
    step("reconcile", pick=1),
]


def test_a_second_cr_importing_an_owned_resource_is_blocked(model_world: World) -> None:
    """(b) A second CR sets spec.importId to a resource another CR manages: before, it was
    bound at once and both CRs claimed (and then managed) one host resource."""
    machine = replay(model_world, IMPORT_OWNED)
    assert reason(machine, 1, ConditionType.BLOCKED) is Reason.ALREADY_MANAGED
    owner = next(iter(machine.cluster.crs.values()))
    (owned,) = resources(machine)
    assert owned["metadata"]["uid"] == owner["status"]["uid"]


def test_deleting_the_blocked_importer_leaves_the_owned_resource(model_world: World) -> None:
    """(b, continued) Before, deleting the second CR (policy Delete) deleted the first CR's
    host resource."""
    machine = replay(
        model_world,
        [*IMPORT_OWNED, step("delete_cr", pick=1, policy="Delete"), step("reconcile", pick=1)],
    )
    assert len(machine.cluster.crs) == 1
    owner = next(iter(machine.cluster.crs.values()))
    (owned,) = resources(machine)
    assert owned["metadata"]["uid"] == owner["status"]["uid"]
    assert not [s for s in machine.port.sent if s.cr_uid != owner["metadata"]["uid"]]


def test_a_second_cr_for_the_same_name_never_creates_over_the_owners_vanished_resource(
    model_world: World,
) -> None:
    """Found on the code before the ownership work while searching for the rebind livelock:
    ns-b/alpha owns "alpha"; ns-a/beta (created in the same second) asks for resourceName
    "alpha"; the host resource is replaced and then deleted out of band. Before, beta created
    "alpha" for itself, an identity alpha was still bound to: two CRs, one host resource."""
    machine = replay(
        model_world,
        [
            step("out_of_band", verb="delete", which=0),
            CREATE_ALPHA_IN_B,
            step("reconcile", pick=0),
            step("reconcile", pick=0),
            create_cr("beta", resource_name="alpha", same_instant=True),
            step("out_of_band", verb="recreate", which=0),
            step("accept_uid", pick=0),
            step("accept_uid", pick=0),
            step("accept_uid", pick=0),
            step("out_of_band", verb="delete", which=0),
            step("out_of_band", verb="delete", which=0),
            step("reconcile", pick=1),
        ],
    )
    assert reason(machine, 1, ConditionType.BLOCKED) is Reason.ALREADY_MANAGED
    owner_uid, other_uid = list(machine.cluster.crs)
    assert not [s for s in machine.port.sent if s.cr_uid == other_uid]
    (alpha,) = resources(machine)
    assert machine.cluster.crs[owner_uid]["status"]["uid"] == alpha["metadata"]["uid"]


def test_an_accepted_uid_rebind_starts_a_fresh_key_sequence_and_converges(
    model_world: World,
) -> None:
    """(c) An update (CR generation 2 at host generation 1) settled; someone else changes the
    host spec and replaces the resource (new uid, host generation 1 again); the new uid is
    accepted. Before, the update to the new incarnation reused the first update's key, got
    idempotency_key_reused, recorded that old operation as pending and never converged
    (host spec 30, CR spec 20, forever)."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("reconcile", pick=0),
            step("reconcile", pick=0),
            step("edit_parameters", pick=0, size=20),
            step("reconcile", pick=0),
            step("reconcile", pick=0),
            step("out_of_band_update", which=0, size=30),
            step("out_of_band", which=0, verb="recreate"),
            step("reconcile", pick=0),
            step("accept_uid", pick=0),
            step("reconcile", pick=0),
        ],
    )
    assert reason(machine, 0, ConditionType.READY) is Reason.AVAILABLE
    (resource,) = resources(machine)
    assert resource["spec"]["sizeGiB"] == 20
    replacement = resource["metadata"]["uid"]
    updates = [s.action for s in machine.port.sent if isinstance(s.action, Update)]
    assert len(updates) == 2, "one update to the old incarnation, one to the accepted one"
    assert updates[0].expected_uid != replacement
    assert updates[1].expected_uid == replacement
    assert updates[1].key != updates[0].key


def test_a_malformed_pin_is_a_condition_not_an_exception(model_world: World) -> None:
    """(d) spec.formRef.definitionVersion "1.0": before, every reconcile raised ValueError."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("edit_pin", pick=0, pin="1.0"),
            step("reconcile", pick=0),
        ],
    )
    assert reason(machine, 0, ConditionType.DEGRADED) is Reason.INVALID_SPEC
    assert resources(machine) == []


def test_deleting_a_cr_whose_unrecorded_create_record_expired_deletes_what_it_made(
    model_world: World,
) -> None:
    """Found by the long run as a false alarm of the checker itself (the binding's evidence,
    the resource and its create record, were both gone when the status was written): the
    create is accepted, its status write lost, the record expires and the CR is deleted. The
    deletion adopts the resource by our creation key and deletes it, and nothing is left."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("reconcile_losing_status_write", pick=0),
            step("expire_operation_records"),
            step("delete_cr", pick=0, policy="Delete"),
        ],
    )
    assert machine.cluster.crs == {}
    assert resources(machine) == []
    assert [type(s.action).__name__ for s in machine.port.sent] == ["Create", "Delete"]


def test_a_waiting_cr_takes_over_a_released_name_only_by_import(model_world: World) -> None:
    """Found by a long run on the current code as a false alarm of the checker (it counted the
    refused creates a Blocked CR re-sends): ns-a/alpha creates "alpha" under 1.1.0; ns-a/beta
    also asks for "alpha"; DefaultCreates moves to 1.0.0; alpha is deleted with Orphan. beta
    then claims "alpha" under 1.0.0 and is Blocked NameTaken with the import remedy: the released
    resource is never adopted by name, and its fenced creates are refused, never accepted. With
    TakoformBindings, beta is Blocked AlreadyManaged by the Released binding (only an import of
    ns-a takes it over) and sends nothing at all."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            create_cr("beta", resource_name="alpha"),
            step("reconcile", pick=0),
            step("upgrade_registry", version="1.0.0"),
            step("delete_cr", pick=0, policy="Orphan"),
        ],
    )
    assert reason(machine, 0, ConditionType.BLOCKED) is Reason.ALREADY_MANAGED
    (alpha,) = resources(machine)
    assert alpha["formRef"]["definitionVersion"] == "1.1.0"
    waiting = next(iter(machine.cluster.crs))
    assert all(s.operation_id is None for s in machine.port.sent if s.cr_uid == waiting)


# -- found on the current code ----------------------------------------------------------------


def test_deleting_a_claimed_cr_with_a_malformed_pin_ends(model_world: World) -> None:
    """A CR claims (and creates) its resource, then gets spec.formRef.definitionVersion "1.0"
    and is deleted with deletionPolicy Orphan. It stayed Degraded InvalidSpec with its
    deletionTimestamp forever (read_cr stopped at the spec error before the plan);
    now the deletion reads the recorded identity and the policy, and the CR goes."""
    machine = replay(
        model_world,
        [
            create_cr("alpha", policy="Orphan"),
            step("reconcile", pick=0),
            step("edit_pin", pick=0, pin="1.0"),
            step("delete_cr", pick=0, policy="Orphan"),
            step("reconcile", pick=0),
        ],
    )
    assert machine.cluster.crs == {}
    assert len(resources(machine)) == 1, "orphaned on purpose"


# -- found on the tie-break ownership (ClaimBook), kept for the TakoformBindings ---------------


def cr_named(machine: OwnershipModel, namespace: str, name: str) -> dict[str, Any]:
    (body,) = [
        b
        for b in machine.cluster.live()
        if (b["metadata"]["namespace"], b["metadata"]["name"]) == (namespace, name)
    ]
    return body


def asserted(machine: OwnershipModel, body: dict[str, Any], kind: ConditionType) -> Reason | None:
    return machine.last_outcomes[body["metadata"]["uid"]].asserted().get(kind)


def sent_by(machine: OwnershipModel, body: dict[str, Any]) -> list[Any]:
    return [s for s in machine.port.sent if s.cr_uid == body["metadata"]["uid"]]


def assert_waits_holding_nothing(machine: OwnershipModel, body: dict[str, Any]) -> None:
    """`body` is Blocked AlreadyManaged, bound to no incarnation, and has sent nothing."""
    assert asserted(machine, body, ConditionType.BLOCKED) is Reason.ALREADY_MANAGED
    assert not status_of(body).get("uid")
    assert not sent_by(machine, body)


#: ns-a/alpha makes "alpha" and is deleted with Orphan; ns-b/alpha then imports it.
RELEASED_THEN_IMPORTED_IN_B = [
    CREATE_ALPHA,
    step("reconcile", pick=0),
    step("delete_cr", pick=0, policy="Orphan"),
    import_cr("alpha", "ns-b"),
]


def test_a_cr_without_a_grant_never_keeps_a_granted_cr_from_its_name(model_world: World) -> None:
    """Squatting: ns-c (no grant for any space) makes alpha first; ns-a then makes alpha for
    the same name. The tie-break counted ns-c/alpha as the oldest claimant, so ns-a/alpha was
    Blocked AlreadyManaged by a CR that can never send anything, for ever."""
    machine = replay(
        model_world,
        [
            step(
                "create_cr_ungranted",
                name="alpha",
                resource_name=None,
                policy="Delete",
                same_instant=False,
            ),
            CREATE_ALPHA,
        ],
    )
    squatter, granted = cr_named(machine, "ns-c", "alpha"), cr_named(machine, "ns-a", "alpha")
    assert asserted(machine, squatter, ConditionType.BLOCKED) is Reason.SPACE_NOT_GRANTED
    assert asserted(machine, granted, ConditionType.READY) is Reason.AVAILABLE
    assert not sent_by(machine, squatter)
    (alpha,) = resources(machine)
    assert creator_of(alpha) == granted["metadata"]["uid"]


def test_a_released_resource_never_goes_to_another_namespaces_import(model_world: World) -> None:
    """Hand-off to another team: ns-a/alpha made "alpha" and is deleted with Orphan; ns-b/alpha
    imports it. The tie-break let ns-b's CR bind it (and update or delete it) once ns-a's CR was
    gone: a Released resource goes only to an import of ns-a, or to a CR an admin pre-binds."""
    machine = replay(model_world, RELEASED_THEN_IMPORTED_IN_B)
    assert_waits_holding_nothing(machine, cr_named(machine, "ns-b", "alpha"))
    assert len(resources(machine)) == 1, "orphaned on purpose, and left alone"


def test_an_import_whose_resource_vanished_never_binds_the_next_incarnation(
    model_world: World,
) -> None:
    """Silent re-bind of an import: ns-a/alpha imports "alpha" (made by another host client);
    the resource is deleted out of band for longer than a poll, then made again under the same
    name (new uid). The import forgot the uid while the resource was gone and then bound the new
    incarnation as if it were the one imported, without UidMismatch."""
    machine = replay(
        model_world,
        [
            step("out_of_band_create_new", name="alpha", version="1.0.0"),
            import_cr("alpha"),
            step("reconcile", pick=0),
            step("out_of_band_delete_seen_then_create", which=0),
        ],
    )
    importer = cr_named(machine, "ns-a", "alpha")
    assert asserted(machine, importer, ConditionType.BLOCKED) is Reason.UID_MISMATCH
    (alpha,) = resources(machine)
    (first,) = machine.first_bound_of(importer["metadata"]["uid"]).values()
    assert alpha["metadata"]["uid"] != first
    assert status_of(importer).get("uid") == first, "still bound to what it imported"
    assert not [s for s in sent_by(machine, importer) if s.operation_id is not None]


def test_two_namespace_shards_never_both_own_one_name(model_world: World) -> None:
    """Two operator processes, one for ns-a and one for ns-b and ns-c: each ClaimBook saw only
    its own namespaces, so ns-a/alpha and ns-b/alpha (the same name in the same space) both
    claimed "alpha", and both acted on it."""
    machine = replay(
        model_world,
        [
            step("shard_operators", two=True),
            CREATE_ALPHA,
            CREATE_ALPHA_IN_B,
        ],
    )
    a, b = cr_named(machine, "ns-a", "alpha"), cr_named(machine, "ns-b", "alpha")
    outcomes = {
        asserted(machine, body, ConditionType.READY)
        or asserted(machine, body, ConditionType.BLOCKED)
        for body in (a, b)
    }
    assert outcomes == {Reason.AVAILABLE, Reason.ALREADY_MANAGED}, "one owner, one waiting"
    (alpha,) = resources(machine)
    assert creator_of(alpha) in {a["metadata"]["uid"], b["metadata"]["uid"]}


def test_a_lost_resource_never_goes_to_another_namespaces_import(model_world: World) -> None:
    """ns-a/alpha made "alpha"; its finalizer is removed by hand (it vanishes without a
    reconcile); ns-b/alpha imports "alpha". The tie-break forgot the vanished owner and let
    ns-b's CR bind it: a Lost resource goes only to a restore of ns-a/alpha, or to a CR an admin
    pre-binds."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("reconcile", pick=0),
            step("remove_finalizer", pick=0),
            import_cr("alpha", "ns-b"),
        ],
    )
    assert_waits_holding_nothing(machine, cr_named(machine, "ns-b", "alpha"))


def test_a_hand_off_to_another_namespace_is_an_admins_decision_not_a_remedy_to_paste(
    model_world: World,
) -> None:
    """ns-b/alpha's import of what ns-a released is Blocked AlreadyManaged. Its remedies hand
    nothing across namespaces: the one for the binding says a cluster admin decides and only
    reads it, so running it as printed changes nothing. The admin's own pre-binding
    (`kubectl takoform release NAME --to ns-b/alpha`, which asks to confirm a hand-off) lets
    exactly that CR bind the incarnation ns-a released, and nothing else changes hands."""
    machine = replay(
        model_world,
        [
            *RELEASED_THEN_IMPORTED_IN_B,
            step("reconcile_all"),
            step("follow_remedy", pick=0, which=1),
            step("reconcile", pick=0),
        ],
    )
    importer = cr_named(machine, "ns-b", "alpha")
    assert asserted(machine, importer, ConditionType.BLOCKED) is Reason.ALREADY_MANAGED
    assert not machine.prebound, "no remedy pre-binds another namespace's resource"
    machine.pre_bind(which=0, namespace="ns-b", name="alpha")
    machine.binding_watch_delivers(which=0)  # the admin's write reaches the process's cache
    machine.reconcile(pick=0)
    assert asserted(machine, importer, ConditionType.READY) is Reason.AVAILABLE
    (alpha,) = resources(machine)
    assert status_of(importer)["uid"] == alpha["metadata"]["uid"]
    assert creator_of(alpha) not in machine.cluster.crs, "made by ns-a/alpha, which is gone"


# -- the checker's own alarms on the TakoformBinding design -----------------------------------


def test_a_restore_that_imports_what_another_client_made_is_not_a_rebind(
    model_world: World,
) -> None:
    """Seed 1 of a long run on the binding design: ns-a/alpha's create fails (its status had the
    failed create's uid, which never existed on the host); its finalizer is removed; it is
    restored, another host client makes "alpha", and the restore is given that resource's import
    id. It re-binds the Lost binding and imports what it was told to: a new claim, which the
    checker took for a re-bind to another uid than the first."""
    machine = replay(
        model_world,
        [
            step("fail_next_operation"),
            CREATE_ALPHA,
            step("reconcile_all"),
            step("remove_finalizer", pick=0),
            step("restore_without_status", pick=0),
            step("out_of_band_create_new", name="alpha", version="1.0.0"),
            step("set_import_id", pick=0, which=0),
            step("reconcile_all"),
        ],
    )
    restored = cr_named(machine, "ns-a", "alpha")
    assert asserted(machine, restored, ConditionType.READY) is Reason.AVAILABLE
    (alpha,) = resources(machine)
    assert creator_of(alpha) is None, "made by another host client"
    assert status_of(restored)["uid"] == alpha["metadata"]["uid"]


def test_an_orphan_deletion_whose_writes_were_lost_releases_what_it_made(
    model_world: World,
) -> None:
    """Seed 3 of a long run on the binding design: the create is accepted and its status write
    lost; the CR is deleted with Orphan and the finalizer removal is lost too. The binding is
    Released (its lastOwner the CR) while the CR still exists: released on purpose, which the
    checker took for an orphan until it saw the CR go."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("reconcile_losing_status_write", pick=0),
            step("delete_cr", pick=0, policy="Orphan"),
            step("reconcile_losing_status_write", pick=0),
        ],
    )
    assert machine.cluster.crs == {}
    assert len(resources(machine)) == 1, "orphaned on purpose"


# -- found on the TakoformBinding design -------------------------------------------------------


@pytest.mark.parametrize("policy", ["Delete", "Orphan"])
def test_deleting_a_cr_claimed_only_in_its_binding_with_a_malformed_pin_ends(
    model_world: World, policy: str
) -> None:
    """Found by a long run on the binding design (seed 12, shrunk by hand to its four steps):
    the binding is written and the create accepted, the status write is lost, the CR is deleted
    and gets spec.formRef.definitionVersion "1.0". read_cr lets a CR with an
    unparseable spec go only when it holds no binding, and otherwise needs the status's
    recorded identity (status.requested), which the lost write never recorded: Degraded
    InvalidSpec with the deletionTimestamp for ever, whatever the deletionPolicy, although the
    binding records the identity (Binding.requested) a deletion needs. Fixed: read_cr
    restores the claim from the binding first."""
    machine = replay(
        model_world,
        [
            create_cr("alpha", policy=policy),
            step("reconcile_losing_status_write", pick=0),
            step("delete_cr", pick=0, policy=policy),
            step("edit_pin", pick=0, pin="1.0"),
        ],
    )
    assert machine.cluster.crs == {}
    assert len(resources(machine)) == (1 if policy == "Orphan" else 0)


def test_a_held_create_whose_record_expired_and_resource_was_replaced_blocks_on_the_uid(
    model_world: World,
) -> None:
    """Found by a long run once the pending write waits for the next look (seed 41): the create
    of alpha is accepted and its status held, the host's operation records expire, and the
    resource is deleted and made again out of band. The next look writes the held uid (learnt
    from our own create's 202) and finds another incarnation under the name: Blocked
    UidMismatch, as when the pending write had landed at once. The model's evidence for that
    uid is the 202, which a later consultation of the expired record must not erase."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("reconcile_all"),
            step("expire_operation_records"),
            step("out_of_band", verb="recreate", which=0),
        ],
    )
    (alpha,) = resources(machine)
    status = next(iter(machine.cluster.crs.values()))["status"]
    assert status["uid"] != alpha["metadata"]["uid"], "it recorded the incarnation it created"
    assert reason(machine, 0, ConditionType.BLOCKED) is Reason.UID_MISMATCH


# -- issue 37: the pending write held for one look ---------------------------------------------


@pytest.mark.parametrize("after", [1, 2], ids=["after-1st-request", "after-2nd-request"])
def test_a_create_committing_inside_the_deletions_look_is_deleted_not_orphaned(
    model_world: World, after: int
) -> None:
    """The create of alpha is accepted and held running, its pending write held; the CR is
    deleted (a write: the held patch is dropped), and the host commits the create between two
    requests of the deletion's look. Before, the deletion read (absent), then listed (the
    create succeeded: not counted, only running ones were) and let go: an orphan."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("hold_commits", stuck=True),
            step("reconcile", pick=0),
            step("delete_cr", pick=0, policy="Delete"),
            step("reconcile_committing_mid_look", pick=0, after=after),
        ],
    )
    assert machine.cluster.crs == {}
    assert resources(machine) == [], "deleted, not left to nobody"


def test_an_update_replayed_after_another_write_is_written_not_held_again(
    model_world: World,
) -> None:
    """The update's pending write is held; another write to the CR (an annotation) drops it,
    and the next look replays the update's key and gets the same operation back: that look
    writes it (the operator process fails the run on a second hold in a row)."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("reconcile_all"),
            step("reconcile_all"),
            step("hold_commits", stuck=True),
            step("edit_parameters", pick=0, size=20),
            step("reconcile", pick=0),
            step("accept_uid", pick=0),
            step("reconcile", pick=0),
        ],
    )
    updates = [s for s in machine.port.sent if isinstance(s.action, Update)]
    assert len(updates) >= 2 and updates[0].action.key == updates[1].action.key, "replayed"
    assert updates[0].operation_id == updates[1].operation_id


def test_an_orphan_deletion_inside_the_window_hands_over_the_incarnation_its_create_named(
    model_world: World,
) -> None:
    """The create of alpha commits with its pending write held; the resource is deleted out of
    band, the CR deleted with Orphan (dropping the held write): the deletion reads the host's
    operations, so the Released binding keeps the uid the create named. Another client makes
    alpha again, and a CR of the same namespace imports it: it takes the binding over with
    that uid, so it meets another incarnation (Blocked UidMismatch), never adopts it silently.
    The checker first took the handed-over uid for a bind without evidence."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("hold_commits", stuck=True),
            step("reconcile_all"),
            step("hold_commits", stuck=False),
            step("out_of_band", which=0, verb="delete"),
            step("delete_cr", pick=0, policy="Orphan"),
            step("reconcile_all"),
            step("out_of_band_create_new", name="alpha", version="1.1.0"),
            import_cr("beta"),
        ],
    )
    (alpha,) = resources(machine)
    (importer,) = machine.cluster.crs.values()
    assert status_of(importer)["uid"] != alpha["metadata"]["uid"], "the released uid kept"
    assert reason(machine, 0, ConditionType.BLOCKED) is Reason.UID_MISMATCH


def test_a_deletion_whose_finalizer_removal_was_lost_acts_no_more_and_leaves_the_name_free(
    model_world: World,
) -> None:
    """The create fails, the CR is deleted, and its deletion lets go (its binding deleted) but
    the finalizer's removal is lost: the CR stays, being deleted, holding nothing. Another
    namespace's CR of that name binds and creates; the first never acts again and goes at its
    next look."""
    machine = replay(
        model_world,
        [
            step("fail_next_operation"),
            CREATE_ALPHA_IN_B,
            step("reconcile", pick=0),
            step("delete_cr", pick=0, policy="Delete"),
            step("reconcile_losing_status_write", pick=0),
            CREATE_ALPHA,
            step("reconcile", pick=1),
            step("reconcile", pick=0),
        ],
    )
    (left,) = machine.cluster.live()
    assert left["metadata"]["namespace"] == "ns-a", "the first CR went at its next look"
    assert [creator_of(r) for r in resources(machine)] == [left["metadata"]["uid"]]


def test_a_vanished_binding_goes_back_to_its_owner_never_to_a_waiting_import(
    model_world: World,
) -> None:
    """Another namespace's import waits AlreadyManaged on a Bound binding; the binding goes (an
    admin's forced release, the binding CRD reinstalled). The import is looked at first: it
    must not bind what the owner's status records, nor send anything; the owner binds it again.
    Before, the import bound it and updated the owner's resource ([two-actors])."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA,
            step("reconcile", pick=0),
            step("reconcile", pick=0),
            step("import_from_other_namespace", name="beta", pick=0, policy="Delete"),
            step("reconcile", pick=1),
            step("binding_vanishes", which=0, every=True),
            step("reconcile", pick=1),
            step("reconcile", pick=1),
        ],
    )
    owner, importer = list(machine.cluster.crs)
    assert reason(machine, 1, ConditionType.BLOCKED) is Reason.ALREADY_MANAGED
    assert not any(s.cr_uid == importer for s in machine.port.sent), "it sent nothing"
    (binding,) = machine.ownership.all()
    assert binding.owned_by(owner), "the owner bound it again (the liveness rounds)"
    assert reason(machine, 0, ConditionType.READY) is Reason.AVAILABLE


def test_an_import_id_set_while_deleting_does_not_turn_a_create_into_an_import_that_lets_go(
    model_world: World,
) -> None:
    """ns-b/alpha's create is accepted (its status write held, the record then expired), and
    its Orphan deletion runs after spec.importId was set: it was claimed as a create, so its
    binding is Released to ns-b, not deleted as an import's that never bound anything. Before,
    ns-a's import then bound what ns-b released."""
    machine = replay(
        model_world,
        [
            CREATE_ALPHA_IN_B,
            step("reconcile", pick=0),
            step("delete_cr", pick=0, policy="Orphan"),
            step("set_import_id", pick=0, which=0),
            step("expire_operation_records"),
            import_cr("alpha"),
        ],
    )
    (importer,) = machine.cluster.live()
    assert importer["metadata"]["namespace"] == "ns-a"
    assert not status_of(importer).get("uid"), "the import bound nothing of ns-b's"
