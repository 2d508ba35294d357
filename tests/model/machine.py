"""The ownership model checker (issue 8): random sequences against the real reconcile and host.

`OwnershipModel` is a hypothesis `RuleBasedStateMachine` over a simulated cluster (tests/model/
cluster.py) and one real reference host process. Its rules are what users, the operator's
process and the host can do to each other; its invariants are checked after every step from the
host's own data and the CRs' statuses — never from the outcomes the operator reports:

- never more than one live host resource created on behalf of one CR;
- no orphan: a resource created with a CR's key is bound or claimed by that CR (or held in the
  binding it holds), or was released by an Orphan deletion, or its CR vanished (Lost);
- deny by default: no request at all, not even a read, for a CR whose namespace has no grant
  for the space at the moment it is sent (`ModelTenancy`, checked in the port);
- every mutation is sent to the exact target (space, FormRef, name) the CR has recorded (its
  status, or its binding), to the uid it is bound to (or explicitly accepted, or proven ours by
  our creation key), and never to an identity or uid another CR claims or is bound to;
- at most one CR acts (an accepted mutation, or a binding) on an identity; a Released
  incarnation goes only to the last owner's namespace, a Lost one only to a restore of its
  owner (same namespace and name), unless an admin pre-bound the CR;
- never a silent rebind: status.uid changes only by a first binding to a resource we (or the CR
  we were restored from) created or imported or were pre-bound to, an accept-uid naming exactly
  the new uid, or clearing after the bound incarnation vanished; and never to another uid than
  the first one bound for that identity (an import's included) without accept-uid, unless our
  own creation key made it (checked on every status write);
- a remedy we printed that deletes a Delete-policy CR leaves what it created deleted or owned;
- never two CRs claiming one host identity in their status;
- a pending operation in a status is one of this CR's own, for its recorded target; an accepted
  create whose record the host no longer keeps left nothing unaccounted for;
- liveness (teardown): with every fault off, within `LIVENESS_ROUNDS` reconciles of each CR the
  cluster reaches a fixpoint where every CR is Ready, Blocked with a remedy, Degraded by its own
  spec, or gone, and a further round has no mutation accepted and changes no condition; there,
  a CR Blocked AlreadyManaged is kept off by something that holds the identity, never by a
  squatter (a CR without a grant, which can never send anything).

Commits are under the model's control: the host runs with commit delay 0 (an accepted operation
commits before the host serves its next request) and the `stuck` rules hold every operation
`running` until released, between two steps or between any two requests of one look
(`reconcile_committing_mid_look`), so no step waits on wall-clock time and a sequence replays
exactly. The operator process also checks that a look never holds the pending write of the
operation the previous look held (at most once per operation, kube.cr_step).
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import os
import shlex
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from takoform_operator.core.actions import Action, Create
from takoform_operator.core.binding import Phase
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.outcome import Outcome
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import Remedy
from takoform_operator.core.state import OperationView, ResourceView, Verb
from takoform_operator.host_client.client import HostClient
from takoform_operator.host_client.port import HostClientPort
from takoform_operator.kube.crs import ACCEPT_UID_ANNOTATION
from takoform_spec.identity import FormRef

from .cluster import (
    API_VERSION,
    KIND,
    Cluster,
    FakeClock,
    HostData,
    HostView,
    IdentityKey,
    ModelTenancy,
    ModelViolation,
    Operator,
    Ownership,
    RecordingPort,
    accept_uid_of,
    binding_key,
    claimed_identity,
    creator_of,
    merge_patch,
    resource_identity,
    status_of,
)

T = TypeVar("T")

#: Namespaces a cluster admin may grant spaces to (both granted both spaces at the start)...
NAMESPACES = ("ns-a", "ns-b")
#: ... and one that is never granted anything.
UNGRANTED = "ns-c"
#: Two operator processes: namespace shards, each reconciling and indexing only its own CRs.
SHARDS = (("ns-a",), ("ns-b", "ns-c"))
CR_NAMES = ("alpha", "beta")
RESOURCE_NAMES = (None, "alpha", "beta")
SIZES = (10, 20, 30)
POLICIES = ("Delete", "Orphan")
#: Pins a user may write: valid ones of the line, and a malformed definitionVersion.
PINS = (None, "1.0.0", "1.1.0", "1.2.0", "1.0")
MAX_CRS = 4
MAX_LIVE = 3
LIVENESS_ROUNDS = 20
CLEAN_FAULTS: dict[str, Any] = {
    "errorRate": 0.0,
    "dropRate": 0.0,
    "stuckOperations": False,
    "failNextOperations": 0,
    "commitDelayMs": 0,
    "latencyMs": 0,
}
#: Degraded conditions a CR's own spec causes: stable until the user edits it (not for a CR being
#: deleted: a deletion ends finalized, or Blocked with a remedy).
SPEC_CAUSED = {
    Reason.INVALID_SPEC,
    Reason.INVALID_IMPORT_ID,
    Reason.SPACE_MISMATCH,
    Reason.NAME_MISMATCH,
    Reason.IMPORT_TARGET_NOT_FOUND,
}
#: Defects of the current code the checker found, each kept as an xfail(strict) regression in
#: test_regressions.py. Long runs step around them (so they explore everything else) until the
#: main line fixes them; then the xfail passes, fails strictly, and the entry goes. Known so far:
#: - "malformed-pin-deletion": a claimed CR whose spec.formRef is malformed never finished
#:   deleting (it stayed Degraded InvalidSpec). Fixed: deletion reads the recorded identity.
#: - "malformed-pin-deletion-binding": the same, for a CR whose claim is only in the binding it
#:   holds (its status write was lost after the binding and the create): the deletion read
#:   the identity recorded in the status (none), not the binding's, and stayed Degraded
#:   InvalidSpec with its deletionTimestamp. Fixed: the claim is restored from the binding.
KNOWN_DEFECTS: frozenset[str] = frozenset()
#: Kinds of invariant `_fail` raises that a run steps around (comma-separated names in
#: TAKOFORM_MODEL_STEP_AROUND): no-grant, two-actors, released-to-another-namespace,
#: lost-to-another-cr, silent-rebind, remedy-unmanaged, squatting, two-claims; and "sharding"
#: keeps the processes one (the rule that shards them is off).
STEP_AROUND: frozenset[str] = frozenset(
    k for k in os.environ.get("TAKOFORM_MODEL_STEP_AROUND", "").split(",") if k
)
#: Blocked reasons whose message lists the FormRefs this build knows instead of remedies.
FAIL_CLOSED = {Reason.PIN_UNSUPPORTED, Reason.FORM_REF_UNSUPPORTED, Reason.IMPORT_REFUSED}


@dataclass
class World:
    """What one test session shares: the host process, an event loop, the client, registries."""

    runner: asyncio.Runner
    #: Starts a reference host with a fresh database: (stop it, client, view).
    start_host: Callable[[], tuple[Callable[[], None], HostClient, HostView]]
    #: definitionVersion -> exact FormRef of the Bucket line (1.2.0 is a synthetic additive minor).
    refs: dict[str, FormRef]
    #: The production registry, and the one that also supports 1.2.0 (DefaultCreates movable).
    production: Registry
    upgraded: Registry
    run_id: str
    counter: itertools.count[int]
    #: A fresh host (fresh database) every this many examples, so long runs do not slow down
    #: as the host's tables grow.
    rotate_every: int = 500
    client: HostClient = field(init=False)
    view: HostView = field(init=False)
    _stop: Callable[[], None] | None = field(init=False, default=None)

    def __post_init__(self) -> None:
        self._fresh_host()

    def _fresh_host(self) -> None:
        self.close()
        self._stop, self.client, self.view = self.start_host()

    def next_example(self) -> int:
        n = next(self.counter)
        if n and n % 1000 == 0:
            print(f"model checker: {n} sequences", file=sys.stderr, flush=True)
        if n and n % self.rotate_every == 0:
            self._fresh_host()
        return n

    def close(self) -> None:
        if self._stop is not None:
            self._stop()
            self._stop = None

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return self.runner.run(coro)


class OwnershipModel(RuleBasedStateMachine):
    """One example: a fresh pair of spaces on the shared host, a fresh cluster and operator."""

    world: World  # set by `bind` before hypothesis runs the machine

    def __init__(self) -> None:
        super().__init__()
        world = self.world
        n = world.next_example()
        self.spaces = (f"model-{world.run_id}-{n}-a", f"model-{world.run_id}-{n}-b")
        for space in self.spaces:
            world.view.ensure_space(space)
        world.view.set_faults(**CLEAN_FAULTS)
        self.faults: dict[str, Any] = dict(CLEAN_FAULTS)
        self.clock = FakeClock()
        self.cluster = Cluster(self.clock)
        self.port = RecordingPort(
            HostClientPort(world.client), self._check_send, self._check_access, self._acted
        )
        self.port.release = lambda: self._faults(stuckOperations=False)
        self.tenancy = ModelTenancy(self.port)
        self.tenancy.granted = {(ns, space) for ns in NAMESPACES for space in self.spaces}
        self.ownership = Ownership(self.cluster)
        self.operators = [self._process(None)]
        self.cluster.status_hooks.append(self._check_status_write)
        #: Every CR ever made: uid -> (namespace, name); and its lineage (a CR restored without
        #: status continues the one it was restored from): uid -> the first uid of the line.
        self.names: dict[str, tuple[str, str]] = {}
        self.lineage: dict[str, str] = {}
        #: (lineage, identity, import id) -> the host uid it was first bound to (or last
        #: accepted with accept-uid). A create's own key may make a new incarnation (drift
        #: repair); an import, or a create turned import, starts from what it first bound.
        self.first_bound: dict[tuple[str, IdentityKey, str | None], str] = {}
        #: (namespace, name) of a CR that vanished -> its lineage.
        self.vanished_roots: dict[tuple[str, str], str] = {}
        #: Identity -> the CR that last acted on it (an accepted mutation, or a binding).
        self.actor: dict[IdentityKey, str] = {}
        #: How a CR went: uid -> "Delete", "Orphan" (finalized under that policy) or "vanished"
        #: (its finalizer removed, no reconcile).
        self.gone: dict[str, str] = {}
        #: Host uids whose owner let go with Orphan: uid -> the owner's namespace (Released);
        #: and whose owner vanished: uid -> the owner's (namespace, name) (Lost).
        self.released: dict[str, str] = {}
        self.lost: dict[str, tuple[str, str]] = {}
        #: An admin's pre-binding (`kubectl takoform release NAME --to NS/NAME`): identity -> CR.
        self.prebound: dict[IdentityKey, tuple[str, str]] = {}
        #: CRs that vanished, by (namespace, name): what a restore makes again.
        self.vanished: dict[tuple[str, str], dict[str, Any]] = {}
        #: Resources deleted out of band, for another client to create again.
        self.deleted_out_of_band: list[dict[str, Any]] = []
        #: CRs deleted by following a remedy the operator printed: uid -> that remedy.
        self.remedy_deletions: dict[str, Remedy] = {}
        self.cluster.on_change(self._named, lambda uid: None)
        self.registry = world.production
        self.created = 0
        #: CRs deleted with deletionPolicy Orphan: what they created or were bound to is released.
        self.released_creators: set[str] = set()
        self.released_uids: set[str] = set()
        #: Where resources can be: every (space, exact FormRef) a create was sent to.
        self.used_spaces: set[str] = set()
        self.used_refs: set[FormRef] = set()
        self._snapshot: HostData | None = None
        self.last_outcomes: dict[str, Outcome] = {}
        self.broken = False
        #: Step around the known defects (the regression tests switch this off).
        self.known_defect = bool(
            KNOWN_DEFECTS & {"malformed-pin-deletion", "malformed-pin-deletion-binding"}
        )
        #: Invariants a run steps around, by kind: a defect already found and kept as a
        #: regression test, so a long run looks for the next one (`_fail`).
        self.step_around = STEP_AROUND

    @classmethod
    def bind(cls, world: World) -> type[OwnershipModel]:
        return type("OwnershipModelIn", (cls,), {"world": world})

    # -- helpers -----------------------------------------------------------------------------

    def _process(self, namespaces: tuple[str, ...] | None) -> Operator:
        return Operator(self.cluster, self.port, self.tenancy, self.ownership, namespaces)

    def _operator_for(self, uid: str) -> Operator:
        namespace = self.cluster.crs[uid]["metadata"]["namespace"]
        return next(p for p in self.operators if p.covers(namespace))

    @property
    def operator(self) -> Operator:
        """The process of the first shard (the only one unless sharded)."""
        return self.operators[0]

    def _named(self, body: dict[str, Any]) -> None:
        """A CR of the namespace and name of one that vanished continues its lineage (a
        restore; the API server cannot tell it from a CR made anew under that name)."""
        metadata = body["metadata"]
        uid, named = metadata["uid"], (metadata["namespace"], metadata["name"])
        self.names.setdefault(uid, named)
        self.lineage.setdefault(uid, self.vanished_roots.get(named, uid))

    def first_bound_of(self, cr_uid: str) -> dict[IdentityKey, str]:
        """The host uid this CR's lineage was first bound to (or accepted), by identity."""
        root = self.lineage.get(cr_uid, cr_uid)
        return {identity: uid for (r, identity, _), uid in self.first_bound.items() if r == root}

    def _line(self, cr_uid: str) -> set[str]:
        """Every CR uid of this CR's lineage (itself, what it was restored from, and so on)."""
        root = self.lineage.get(cr_uid, cr_uid)
        return {uid for uid, r in self.lineage.items() if r == root} | {cr_uid}

    def _ours(self, cr_uid: str, key: str | None) -> bool:
        """`key` is a creation key of this CR's lineage."""
        return any(str(key or "").startswith(f"{uid}:create:") for uid in self._line(cr_uid))

    def _live(self) -> list[str]:
        return list(self.cluster.crs)

    def _pick(self, i: int) -> str:
        live = self._live()
        return live[i % len(live)]

    def host(self) -> HostData:
        """The host's own data. Faults that refuse requests are lifted for the observer only
        (they change nothing on the host), then put back."""
        if self._snapshot is not None:
            return self._snapshot
        outage = {k: self.faults[k] for k in ("errorRate", "dropRate") if self.faults[k]}
        if outage:
            self.world.view.set_faults(errorRate=0.0, dropRate=0.0)
        try:
            self._snapshot = self.world.view.snapshot(self.used_spaces, self.used_refs)
        finally:
            if outage:
                self.world.view.set_faults(**outage)
        return self._snapshot

    def _touched(self) -> None:
        """The host may have changed: the next observation reads it again. (Between two
        observations only reconciles, admin actions and faults change it: with commit delay 0
        everything due is settled by the observation itself.)"""
        self._snapshot = None

    def _spec(
        self,
        *,
        space: str,
        resource_name: str | None,
        size: int,
        policy: str,
        import_id: str | None = None,
    ) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "space": space,
            "deletionPolicy": policy,
            "parameters": {"region": "eu-west-1", "sizeGiB": size},
        }
        if resource_name is not None:
            spec["resourceName"] = resource_name
        if import_id is not None:
            spec["importId"] = import_id
        return spec

    def _ready(self, uid: str) -> bool:
        outcome = self.last_outcomes.get(uid)
        return outcome is not None and outcome.asserted().get(ConditionType.READY) is (
            Reason.AVAILABLE
        )

    def _reconcile(self, uid: str, *, lose_write: bool = False) -> Outcome:
        body = copy.deepcopy(self.cluster.crs[uid])
        self.broken = True  # until the reconcile and its checks returned
        self._touched()
        process = self._operator_for(uid)
        outcome = self.world.run(process.reconcile(uid, self.registry, lose_write=lose_write))
        self.broken = False
        self._touched()
        if uid not in self.cluster.crs:
            self._finalized(body)
        self.last_outcomes[uid] = outcome
        return outcome

    def _finalized(self, body: dict[str, Any]) -> None:
        """The CR went by its reconcile: with Orphan, what it created or was bound to is
        released on purpose (to its namespace only)."""
        uid = body["metadata"]["uid"]
        policy = (body.get("spec") or {}).get("deletionPolicy")
        self.gone[uid] = "Orphan" if policy == "Orphan" else "Delete"
        if policy == "Orphan":
            self.released_creators.add(uid)
            bound = status_of(body).get("uid")
            mine = [r["metadata"]["uid"] for r in self.host().resources if creator_of(r) == uid]
            # The uid its binding was Released with: a create the status never recorded may
            # have named it (its resource gone since), read from the host's operations.
            kept = [
                b.uid
                for b in self.ownership.all()
                if b.phase is Phase.RELEASED and b.last_owner is not None
                if b.last_owner.uid == uid
            ]
            for resource_uid in [bound, *mine, *kept]:
                if resource_uid:
                    self.released_uids.add(resource_uid)
                    self.released[resource_uid] = body["metadata"]["namespace"]
        elif uid in self.remedy_deletions:
            self._check_remedy_left_nothing_unmanaged(body)

    def _faults(self, **faults: Any) -> None:
        self._touched()
        self.faults.update(faults)
        self.world.view.set_faults(**faults)

    def _fail(self, kind: str, summary: str, /, **facts: Any) -> None:
        """A violation of the invariant `kind`, raised unless this run steps around it
        (`TAKOFORM_MODEL_STEP_AROUND`, for a long run to look past a defect already found)."""
        if kind not in self.step_around:
            raise self._violation(f"[{kind}] {summary}", **facts)

    def _violation(self, summary: str, /, **facts: Any) -> ModelViolation:
        detail = "\n".join(
            f"  {k}: {json.dumps(v, default=str, indent=None)}" for k, v in facts.items()
        )
        return ModelViolation(f"{summary}\n{detail}")

    # -- rules: users --------------------------------------------------------------------------

    @precondition(lambda self: self.created < MAX_CRS and len(self.cluster.crs) < MAX_LIVE)
    @rule(
        namespace=st.sampled_from(NAMESPACES),
        name=st.sampled_from(CR_NAMES),
        resource_name=st.sampled_from(RESOURCE_NAMES),
        size=st.sampled_from(SIZES),
        policy=st.sampled_from(POLICIES),
        same_instant=st.booleans(),
    )
    def create_cr(
        self,
        namespace: str,
        name: str,
        resource_name: str | None,
        size: int,
        policy: str,
        same_instant: bool,
    ) -> None:
        """A new CR (possibly naming the identity of another, possibly in the same second)."""
        if any(
            b["metadata"]["namespace"] == namespace and b["metadata"]["name"] == name
            for b in self.cluster.live()
        ):
            return  # the API server refuses a second object of that name
        spec = self._spec(
            space=self.spaces[0], resource_name=resource_name, size=size, policy=policy
        )
        self.cluster.create(namespace, name, spec, same_instant=same_instant)
        self.created += 1

    @precondition(lambda self: self.created < MAX_CRS and len(self.cluster.crs) < MAX_LIVE)
    @rule(
        namespace=st.sampled_from(NAMESPACES),
        name=st.sampled_from(CR_NAMES),
        pick=st.integers(0, 3),
        size=st.sampled_from(SIZES),
        policy=st.sampled_from(POLICIES),
    )
    def create_importing_cr(
        self, namespace: str, name: str, pick: int, size: int, policy: str
    ) -> None:
        """A new CR whose spec.importId is the canonical import id of a host resource."""
        resources = self.host().resources
        if not resources or any(
            b["metadata"]["namespace"] == namespace and b["metadata"]["name"] == name
            for b in self.cluster.live()
        ):
            return
        resource = resources[pick % len(resources)]
        space, _, _, rname = resource_identity(resource)
        import_id = canonical_import_id(space, rname, FormRef.from_json(resource["formRef"]))
        spec = self._spec(
            space=space, resource_name=rname, size=size, policy=policy, import_id=import_id
        )
        self.cluster.create(namespace, name, spec)
        self.created += 1

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2), size=st.sampled_from(SIZES))
    def edit_parameters(self, pick: int, size: int) -> None:
        def edit(spec: dict[str, Any]) -> None:
            spec["parameters"]["sizeGiB"] = size

        self.cluster.edit_spec(self._pick(pick), edit)

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2), resource_name=st.sampled_from(RESOURCE_NAMES))
    def edit_resource_name(self, pick: int, resource_name: str | None) -> None:
        """spec.resourceName added, changed or removed."""

        def edit(spec: dict[str, Any]) -> None:
            if resource_name is None:
                spec.pop("resourceName", None)
            else:
                spec["resourceName"] = resource_name

        self.cluster.edit_spec(self._pick(pick), edit)

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2), pin=st.sampled_from(PINS))
    def edit_pin(self, pick: int, pin: str | None) -> None:
        """spec.formRef set (a valid pin of the line, or a malformed version), changed, removed."""
        refs = self.world.refs

        def edit(spec: dict[str, Any]) -> None:
            if pin is None:
                spec.pop("formRef", None)
                return
            digest = refs[pin].schema_digest if pin in refs else refs["1.0.0"].schema_digest
            spec["formRef"] = {"definitionVersion": pin, "schemaDigest": digest}

        self.cluster.edit_spec(self._pick(pick), edit)

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2))
    def edit_space(self, pick: int) -> None:
        """spec.space moves to the example's other space."""

        def edit(spec: dict[str, Any]) -> None:
            spec["space"] = self.spaces[1] if spec["space"] == self.spaces[0] else self.spaces[0]

        self.cluster.edit_spec(self._pick(pick), edit)

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2), which=st.integers(0, 3))
    def set_import_id(self, pick: int, which: int) -> None:
        """spec.importId (with the space and name it names) set to an existing host resource."""
        resources = self.host().resources
        if not resources:
            return
        resource = resources[which % len(resources)]
        space, _, _, rname = resource_identity(resource)
        import_id = canonical_import_id(space, rname, FormRef.from_json(resource["formRef"]))

        def edit(spec: dict[str, Any]) -> None:
            spec.update(space=space, resourceName=rname, importId=import_id)

        self.cluster.edit_spec(self._pick(pick), edit)

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2))
    def accept_uid(self, pick: int) -> None:
        """takoform.io/accept-uid set to the uid the host currently serves for the CR's name."""
        uid = self._pick(pick)
        body = self.cluster.crs[uid]
        wanted = claimed_identity(body)
        if wanted is None:
            spec = body["spec"]
            name = spec.get("resourceName") or body["metadata"]["name"]
            wanted = (spec["space"], API_VERSION, KIND, name)
        served = [r for r in self.host().resources if resource_identity(r) == wanted]
        if served:
            self.cluster.annotate(uid, ACCEPT_UID_ANNOTATION, served[0]["metadata"]["uid"])

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2), policy=st.sampled_from(POLICIES))
    def delete_cr(self, pick: int, policy: str) -> None:
        """kubectl delete, with the deletion policy set first (a spec edit when it changes)."""
        uid = self._pick(pick)

        def edit(spec: dict[str, Any]) -> None:
            spec["deletionPolicy"] = policy

        if self.cluster.crs[uid]["metadata"].get("deletionTimestamp") is None:
            self.cluster.edit_spec(uid, edit)
        self.cluster.delete(uid)

    @precondition(lambda self: self.created < MAX_CRS and len(self.cluster.crs) < MAX_LIVE)
    @rule(
        name=st.sampled_from(CR_NAMES),
        resource_name=st.sampled_from(RESOURCE_NAMES),
        policy=st.sampled_from(POLICIES),
        same_instant=st.booleans(),
    )
    def create_cr_ungranted(
        self, name: str, resource_name: str | None, policy: str, same_instant: bool
    ) -> None:
        """A CR in the namespace no grant ever covers (it must never send anything, nor keep
        a CR of a granted namespace from the identity it names)."""
        self.create_cr(UNGRANTED, name, resource_name, 10, policy, same_instant)

    @precondition(lambda self: self.created < MAX_CRS and len(self.cluster.crs) < MAX_LIVE)
    @rule(name=st.sampled_from(CR_NAMES), pick=st.integers(0, 3), policy=st.sampled_from(POLICIES))
    def import_from_other_namespace(self, name: str, pick: int, policy: str) -> None:
        """A CR of the other granted namespace imports (canonical JSON import id) a resource
        that a CR created: another team's resource."""
        made = [r for r in self.host().resources if creator_of(r) in self.names]
        if not made:
            return
        resource = made[pick % len(made)]
        creator_namespace = self.names[str(creator_of(resource))][0]
        others = [ns for ns in NAMESPACES if ns != creator_namespace]
        namespace = others[pick % len(others)]
        if any(
            b["metadata"]["namespace"] == namespace and b["metadata"]["name"] == name
            for b in self.cluster.live()
        ):
            return
        space, _, _, rname = resource_identity(resource)
        import_id = canonical_import_id(space, rname, FormRef.from_json(resource["formRef"]))
        spec = self._spec(
            space=space, resource_name=rname, size=10, policy=policy, import_id=import_id
        )
        self.cluster.create(namespace, name, spec)
        self.created += 1

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2))
    def remove_finalizer(self, pick: int) -> None:
        """`kubectl delete` then `kubectl patch` removing the finalizers: the CR vanishes
        without any reconcile. What it owned is Lost: only a CR of its namespace and name (a
        restore) may take it back, or one an admin pre-binds."""
        self._vanish(self._pick(pick))

    @precondition(lambda self: self.cluster.crs)
    @rule(namespace=st.sampled_from(NAMESPACES))
    def recycle_namespace(self, namespace: str) -> None:
        """The namespace is force-deleted (its CRs' finalizers removed by hand, no reconcile
        of theirs) and created again under its name, for another tenant maybe: a new namespace
        uid. What its CRs held is Lost to the old namespace; the new one inherits nothing (a
        restore there is another namespace's CR: the invariants hold it to that)."""
        for uid in [u for u in self._live() if self.names[u][0] == namespace]:
            self._vanish(uid)
        for key in [k for k in self.vanished if k[0] == namespace]:
            del self.vanished[key]  # no backup of the old namespace is restored into the new
        self.tenancy.incarnation[namespace] = self.tenancy.incarnation.get(namespace, 0) + 1

    def _vanish(self, uid: str) -> None:
        body = self.cluster.crs[uid]
        owned = [status_of(body).get("uid")] + [
            r["metadata"]["uid"] for r in self.host().resources if creator_of(r) == uid
        ]
        # Lost only what a binding on the API server holds for it: one an admin took away by
        # force (binding_vanishes) is free once its owner is gone too, as the release says.
        held = self.ownership.bindings.held_by(uid) is not None
        body = self.cluster.vanish(uid)
        metadata = body["metadata"]
        self.gone[uid] = "vanished"
        self.vanished[(metadata["namespace"], metadata["name"])] = body
        self.vanished_roots[(metadata["namespace"], metadata["name"])] = self.lineage[uid]
        for resource_uid in owned if held else ():
            if resource_uid and resource_uid not in self.released:
                self.lost[resource_uid] = (metadata["namespace"], metadata["name"])

    @precondition(lambda self: self.vanished and len(self.cluster.crs) < MAX_LIVE)
    @rule(pick=st.integers(0, 2))
    def restore_without_status(self, pick: int) -> None:
        """A CR that vanished is made again from a backup: the same namespace, name, spec and
        annotations, a new uid, an empty status."""
        candidates = [
            key
            for key in sorted(self.vanished)
            if not any(
                (b["metadata"]["namespace"], b["metadata"]["name"]) == key
                for b in self.cluster.live()
            )
        ]
        if not candidates:
            return
        self.cluster.restore(self.vanished.pop(candidates[pick % len(candidates)]))

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2), which=st.integers(0, 2))
    def follow_remedy(self, pick: int, which: int) -> None:
        """A user (or admin) runs a remedy command the CR's last outcome printed, as is."""
        uid = self._pick(pick)
        outcome = self.last_outcomes.get(uid)
        remedies = [r for r in (outcome.remedies if outcome else ()) if r.command]
        if remedies:
            self._run_remedy(uid, remedies[which % len(remedies)])

    @rule(namespace=st.sampled_from(NAMESPACES), space=st.integers(0, 1), granted=st.booleans())
    def grant(self, namespace: str, space: int, granted: bool) -> None:
        """A cluster admin creates (or deletes) the TakoformSpaceGrant of (namespace, space)."""
        entry = (namespace, self.spaces[space])
        if granted:
            self.tenancy.granted.add(entry)
        else:
            self.tenancy.granted.discard(entry)

    @precondition(lambda self: self.ownership.all())
    @rule(which=st.integers(0, 3), every=st.booleans())
    def binding_vanishes(self, which: int, every: bool) -> None:
        """A binding Bound to a Ready CR whose status records its target goes from under it:
        an admin's `release --force` (one), or the binding CRD reinstalled (every one at once).
        The owner writes it again from its status at its next look; no import may take the
        resource meanwhile (it waits while a live CR records it: kube.bindings.
        recorded_elsewhere), nor a create where its process saw the binding go (BindingPort.
        went). Owners here are Ready: one Blocked may never write its binding again."""
        recorded = {
            b.name
            for b in self.ownership.all()
            if b.phase is Phase.BOUND
            and b.claim is not None
            and b.claim.uid in self.cluster.crs
            and claimed_identity(self.cluster.crs[b.claim.uid]) == binding_key(b.identity)
            and self._ready(b.claim.uid)
        }
        names = sorted(recorded)
        if names:
            for name in names if every else [names[which % len(names)]]:
                del self.ownership.bindings.objects[name]

    @rule(
        which=st.integers(0, 3),
        namespace=st.sampled_from(NAMESPACES),
        name=st.sampled_from(CR_NAMES),
    )
    def pre_bind(self, which: int, namespace: str, name: str) -> None:
        """`kubectl takoform release NAME --to NS/NAME`: an admin hands a Released or Lost
        binding to one CR (by namespace and name)."""
        free = [b for b in self.ownership.all() if b.phase is not Phase.BOUND]
        if not free:
            return
        binding = free[which % len(free)]
        self.ownership.bindings.pre_bind(binding.name, namespace, name)
        self.prebound[binding_key(binding.identity)] = (namespace, name)

    # -- rules: the operator ---------------------------------------------------------------------

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2))
    def reconcile(self, pick: int) -> None:
        self._reconcile(self._pick(pick))

    @precondition(lambda self: self.cluster.crs)
    @rule()
    def reconcile_all(self) -> None:
        """The operator catches up: every CR reconciled once, oldest first (a resync)."""
        for uid in self._live():
            if uid in self.cluster.crs:
                self._reconcile(uid)

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2))
    def reconcile_losing_status_write(self, pick: int) -> None:
        """The reconcile's host calls happen; its last write (status, or finalizer) is lost."""
        self._reconcile(self._pick(pick), lose_write=True)

    @precondition(lambda self: self.cluster.crs and self.faults["stuckOperations"])
    @rule(pick=st.integers(0, 2), after=st.integers(1, 3))
    def reconcile_committing_mid_look(self, pick: int, after: int) -> None:
        """The host commits what it holds between two requests of one look: right after the
        look's request number `after` is answered (a read, a listing, a mutation), operations
        stop being held and settle before the host serves the next one."""
        self.port.release_after = after
        try:
            self._reconcile(self._pick(pick))
        finally:
            self.port.release_after = None

    @precondition(lambda self: "sharding" not in self.step_around)
    @rule(two=st.booleans())
    def shard_operators(self, two: bool) -> None:
        """A new deployment: one process for every namespace, or two namespace shards (ns-a;
        ns-b and ns-c), each reconciling only the CRs of its own namespaces."""
        for process in self.operators:
            process.stop()
        self.operators = [self._process(s) for s in SHARDS] if two else [self._process(None)]

    @rule(which=st.integers(0, 1))
    def binding_watch_delivers(self, which: int) -> None:
        """One process's binding watch catches up with the API server (until then its cache
        lags every other process's writes: a shard handover, a slow watch)."""
        self.operators[which % len(self.operators)].bindings.catch_up()

    @rule(version=st.sampled_from(("1.0.0", "1.1.0", "1.2.0")))
    def upgrade_registry(self, version: str) -> None:
        """A new build: 1.2.0 supported, DefaultCreates of the line moved to `version`."""
        self.registry = self.world.upgraded.with_default_create(self.world.refs[version])

    @rule()
    def roll_back_registry(self) -> None:
        """Back to the production build, which cannot decode 1.2.0 (fail closed, rule 4)."""
        self.registry = self.world.production

    # -- rules: the host ---------------------------------------------------------------------------

    @rule(which=st.integers(0, 3), verb=st.sampled_from(("delete", "recreate")))
    def out_of_band(self, which: int, verb: str) -> None:
        """Someone deletes, or deletes and recreates (new uid, no creation key), a resource."""
        resources = self.host().resources
        if resources:
            resource = resources[which % len(resources)]
            self.world.view.out_of_band(verb, resource)
            if verb == "delete":
                self.deleted_out_of_band.append(resource)
            self._touched()

    @rule(
        name=st.sampled_from(("alpha", "beta")),
        version=st.sampled_from(("1.0.0", "1.1.0")),
    )
    def out_of_band_create_new(self, name: str, version: str) -> None:
        """Another client of the host creates a resource no CR made (what imports are for), in
        the example's first space; refused when the name is taken."""
        ref = self.world.refs[version]
        self.used_spaces.add(self.spaces[0])
        self.used_refs.add(ref)
        resource = {
            "formRef": ref.to_json(),
            "metadata": {"space": self.spaces[0], "name": name},
            "spec": {"region": "eu-west-1", "sizeGiB": 10},
        }
        self.world.view.create(resource)
        self._touched()

    @precondition(lambda self: self.cluster.crs)
    @rule(which=st.integers(0, 3))
    def out_of_band_delete_seen_then_create(self, which: int) -> None:
        """A resource is deleted out of band for longer than the operator's poll (every CR is
        reconciled while it is gone), then another client creates it again: the same identity,
        FormRef and spec, a new uid and no creation key."""
        resources = self.host().resources
        if not resources:
            return
        resource = resources[which % len(resources)]
        self.world.view.out_of_band("delete", resource)
        self._touched()
        self.reconcile_all()
        self.world.view.create(resource)
        self._touched()

    @precondition(lambda self: self.deleted_out_of_band)
    @rule(which=st.integers(0, 3))
    def out_of_band_create(self, which: int) -> None:
        """Another client of the host creates a resource that was deleted out of band again:
        the same identity, FormRef and spec, a new uid (refused while the name is taken)."""
        resource = self.deleted_out_of_band[which % len(self.deleted_out_of_band)]
        self.world.view.create(resource)
        self._touched()

    @rule(which=st.integers(0, 3), size=st.sampled_from(SIZES))
    def out_of_band_update(self, which: int, size: int) -> None:
        """Another client of the host changes a resource's spec (an ordinary fenced update)."""
        resources = self.host().resources
        if resources:
            resource = resources[which % len(resources)]
            self.world.view.update(resource, {**resource["spec"], "sizeGiB": size})
            self._touched()

    @rule()
    def expire_operation_records(self) -> None:
        """Every settled record of the example's spaces expires (running ones never do)."""
        ids = [o["id"] for o in self.host().operations if o["state"] != "running"]
        if ids:
            self.world.view.expire(ids)
            self._touched()

    @rule(kind=st.sampled_from(("errorRate", "dropRate")))
    def host_unavailable(self, kind: str) -> None:
        """Every host API request answers 503, or its connection is dropped, doing nothing."""
        self._faults(**{kind: 1.0})

    @rule()
    def host_available(self) -> None:
        self._faults(errorRate=0.0, dropRate=0.0)

    @rule(stuck=st.booleans())
    def hold_commits(self, stuck: bool) -> None:
        """stuck: accepted operations stay running; released: they commit at the next request."""
        self._faults(stuckOperations=stuck)

    @rule()
    def fail_next_operation(self) -> None:
        self._faults(failNextOperations=1)

    @rule()
    def lose_next_mutation_answer(self) -> None:
        """The next mutation is accepted by the host but its answer never arrives."""
        self.port.lose_next_answer = True

    # -- remedies, run as printed --------------------------------------------------------------

    def _run_remedy(self, cr_uid: str, remedy: Remedy) -> None:
        """Run a remedy's command as a user pastes it (`a && b` runs a, then b)."""
        assert remedy.command is not None
        for command in remedy.command.split(" && "):
            self._run_command(remedy, command)

    def _find_cr(self, words: list[str]) -> str | None:
        """The live CR a kubectl command names (`<plural>.<group>/<name> -n <namespace>`)."""
        obj = next(w for w in words[2:] if "/" in w and not w.startswith("-"))
        namespace = words[words.index("-n") + 1] if "-n" in words else "default"
        name = obj.split("/", 1)[1]
        return next(
            (
                b["metadata"]["uid"]
                for b in self.cluster.live()
                if (b["metadata"]["namespace"], b["metadata"]["name"]) == (namespace, name)
            ),
            None,
        )

    def _run_command(self, remedy: Remedy, command: str) -> None:
        if command.startswith("echo ") and "| kubectl " in command:  # create or apply -f -
            grant = json.loads(shlex.split(command)[1])
            for namespace in grant["spec"]["namespaces"].get("names", []):
                if namespace in NAMESPACES:  # the admin never grants the ungranted namespace
                    for space in grant["spec"]["spaces"]:
                        self.tenancy.granted.add((namespace, space))
            return
        words = shlex.split(command)
        assert words[0] == "kubectl", f"a remedy command the model cannot run: {command}"
        if words[1] == "get":
            return  # a read: what an admin looks at before acting
        if words[1:3] == ["takoform", "release"]:
            namespace, name = words[words.index("--to") + 1].split("/", 1)
            found = [b for b in self.ownership.all() if b.name == words[3]]
            if not found or (found[0].phase is Phase.BOUND and found[0].claim is not None):
                return  # gone since it was printed, or bound to a CR again: the plugin refuses
            self.ownership.bindings.pre_bind(found[0].name, namespace, name)
            self.prebound[binding_key(found[0].identity)] = (namespace, name)
            return
        target = self._find_cr(words)
        if target is None:
            return  # kubectl: NotFound
        if words[1] == "delete":
            self.remedy_deletions[target] = remedy
            self.cluster.delete(target)
        elif words[1] == "patch":
            patch = json.loads(words[words.index("-p") + 1])

            def edit(spec: dict[str, Any]) -> None:
                merged = merge_patch(spec, patch["spec"])
                spec.clear()
                spec.update(merged)

            self.cluster.edit_spec(target, edit)
        elif words[1] == "annotate":
            key, value = next(w for w in words[3:] if "=" in w and not w.startswith("-")).split(
                "=", 1
            )
            self.cluster.annotate(target, key, value)
        else:
            raise AssertionError(f"a remedy command the model cannot run: {command}")

    # -- checks when something is sent or written ----------------------------------------------

    def _check_access(self, cr_uid: str, space: str | None, what: str) -> None:
        """Deny by default: nothing, not even a read, without a grant for the CR's namespace and
        the space the request goes to, at the moment it is sent."""
        body = self.cluster.crs[cr_uid]
        namespace = body["metadata"]["namespace"]
        if space is None:
            space = status_of(body).get("space") or body["spec"].get("space")
        if not self.tenancy.allows(namespace, str(space)):
            self._fail(
                "no-grant",
                f"{what} sent for a CR whose namespace has no grant for the space",
                cr=cr_uid,
                namespace=namespace,
                space=space,
                granted=sorted(self.tenancy.granted),
            )

    def _recorded(self, cr_uid: str) -> list[tuple[Any, Any, Any]]:
        """The targets recorded for the CR before anything is sent: its status, and (with
        bindings) the binding it holds."""
        status = status_of(self.cluster.crs[cr_uid])
        recorded = [(status.get("space"), status.get("formRef"), status.get("name"))]
        held = self.ownership.bindings.held_by(cr_uid)
        if held is not None and held.form_ref is not None:
            identity = held.identity
            recorded.append((identity.space, held.form_ref.to_json(), identity.name))
        return recorded

    def _check_send(self, cr_uid: str, action: Action, read: ResourceView | None) -> None:
        body = self.cluster.crs[cr_uid]
        status = status_of(body)
        target = action.target
        self.used_refs.add(target.form_ref)
        self.used_spaces.add(target.space)
        self._touched()
        recorded = self._recorded(cr_uid)
        if (target.space, target.form_ref.to_json(), target.name) not in recorded:
            raise self._violation(
                f"{action.verb} sent to a target the CR has not recorded",
                cr=cr_uid,
                sent=[target.space, target.form_ref.to_json(), target.name],
                recorded=recorded,
            )
        identity = (target.space, target.form_ref.api_version, target.form_ref.kind, target.name)
        for other in self.cluster.live():
            other_uid = other["metadata"]["uid"]
            if other_uid != cr_uid and claimed_identity(other) == identity:
                self._fail(
                    "two-claims",
                    f"{action.verb} sent for an identity another CR claims",
                    cr=cr_uid,
                    other=other_uid,
                    identity=identity,
                )
        if isinstance(action, Create):
            if status.get("uid"):
                raise self._violation("create sent by a bound CR", cr=cr_uid, status=status)
            return
        expected, bound = action.expected_uid, status.get("uid")
        proven = (
            bound is None
            and read is not None
            and read.uid == expected
            and self._ours(cr_uid, read.creation_key)
        )
        held = self.ownership.bindings.held_by(cr_uid)
        if not (
            expected == bound
            or expected == accept_uid_of(body)
            or proven
            or (held is not None and held.uid == expected)
        ):
            raise self._violation(
                f"{action.verb} sent to uid {expected}, not the bound one",
                cr=cr_uid,
                bound=bound,
                accept_uid=accept_uid_of(body),
            )
        for other in self.cluster.live():
            other_uid = other["metadata"]["uid"]
            if other_uid != cr_uid and status_of(other).get("uid") == expected:
                self._fail(
                    "two-claims",
                    f"{action.verb} sent to uid {expected}, which another CR is bound to",
                    cr=cr_uid,
                    other=other_uid,
                )

    def _acted(self, cr_uid: str, action: Action, operation: OperationView) -> None:
        """The host accepted a mutation of this CR: it acts on the identity (and the uid)."""
        target = action.target
        identity = (target.space, target.form_ref.api_version, target.form_ref.kind, target.name)
        uid = operation.resource_uid if isinstance(action, Create) else action.expected_uid
        self._act(cr_uid, identity, uid, f"{action.verb} accepted")

    def _let_go(self, cr_uid: str) -> bool:
        """Being deleted and holding no binding: its deletion let go (only the finalizer's
        removal may still be missing, its write lost), and it never acts again: its next look
        finds the identity unbound or another CR's and lets go without a host call."""
        deleting = self.cluster.crs[cr_uid]["metadata"].get("deletionTimestamp") is not None
        return deleting and not any(b.owned_by(cr_uid) for b in self.ownership.all())

    def _act(self, cr_uid: str, identity: IdentityKey, uid: str | None, what: str) -> None:
        """At most one CR acts on an identity (an accepted mutation, or a binding): another
        that did must be gone. A Released incarnation goes only to the last owner's namespace,
        a Lost one only to a CR of the vanished owner's namespace and name (a restore), unless
        an admin pre-bound the CR."""
        previous = self.actor.get(identity)
        if (
            previous is not None
            and previous != cr_uid
            and previous in self.cluster.crs
            and not self._let_go(previous)
        ):
            self._fail(
                "two-actors",
                f"two CRs act on one identity ({what})",
                cr=cr_uid,
                other=previous,
                identity=identity,
                crs={b["metadata"]["uid"]: status_of(b) for b in self.cluster.live()},
            )
        me = self.names[cr_uid]
        pre = self.prebound.get(identity) == me
        if uid is not None and uid in self.released:
            if self.released[uid] != me[0] and not pre:
                self._fail(
                    "released-to-another-namespace",
                    f"a Released resource went to a CR of another namespace ({what})",
                    cr=cr_uid,
                    namespace=me[0],
                    released_by=self.released[uid],
                    uid=uid,
                )
            self.released.pop(uid)
        if uid is not None and uid in self.lost:
            if self.lost[uid] != me and not pre:
                self._fail(
                    "lost-to-another-cr",
                    f"a Lost resource (its owner vanished) went to another CR ({what})",
                    cr=cr_uid,
                    me=me,
                    lost_by=self.lost[uid],
                    uid=uid,
                )
            self.lost.pop(uid)
        self.actor[identity] = cr_uid

    def _check_status_write(
        self, cr_uid: str, before: dict[str, Any], after: dict[str, Any]
    ) -> None:
        old, new = before.get("uid"), after.get("uid")
        if old == new:
            return
        body = self.cluster.crs[cr_uid]
        data = self.host()
        if new is None:
            if data.resource_by_uid(str(old)) is not None:
                raise self._violation(
                    "status.uid cleared while the bound incarnation still exists",
                    cr=cr_uid,
                    uid=old,
                )
            return
        ref = after.get("formRef") or {}
        identity = (
            str(after.get("space")),
            str(ref.get("apiVersion")),
            str(ref.get("kind")),
            str(after.get("name")),
        )
        import_id = (after.get("requested") or {}).get("importId")
        line = (self.lineage.get(cr_uid, cr_uid), identity, import_id)
        first = self.first_bound.get(line)
        if accept_uid_of(body) != new:  # accepted: remedy 1, the user imported exactly this
            if old is not None:
                raise self._violation(
                    f"silent rebind: status.uid {old} -> {new}",
                    cr=cr_uid,
                    accept=accept_uid_of(body),
                )
            evidence = (
                "pre-bound"
                if self.prebound.get(identity) == self.names[cr_uid]
                else self._binding_evidence(cr_uid, new, after, data)
            )
            if first is not None and first != new and evidence != "created":
                self._fail(
                    "silent-rebind",
                    f"silent re-bind: first bound to {first}, now to {new} ({evidence}) "
                    "without accept-uid naming it",
                    cr=cr_uid,
                    accept=accept_uid_of(body),
                )
        self.first_bound[line] = new
        self._act(cr_uid, identity, new, "bound")

    def _binding_evidence(
        self, cr_uid: str, new: str, after: dict[str, Any], data: HostData
    ) -> str:
        """Why the CR may bind `new` at all: "created" (a create of its lineage made it) or
        "imported" (its recorded import id names it); a violation otherwise."""
        # Evidence: what the host serves now, or served to the operator before (the resource
        # may be gone by now, e.g. deleted in the same reconcile, and records expire).
        resource = data.resource_by_uid(new)
        served = self.port.served.get(new)
        if resource is not None or served is not None:
            if resource is not None:
                key = resource["metadata"].get("creationIdempotencyKey")
                identity, ref = resource_identity(resource), resource["formRef"]
            else:
                assert served is not None
                key, ref = served.creation_key, served.form_ref.to_json()
                identity = (served.space, ref["apiVersion"], ref["kind"], served.name)
            if self._ours(cr_uid, key):
                return "created"
            import_id = (after.get("requested") or {}).get("importId")
            if import_id and _names(import_id, identity, ref):
                return "imported"
            raise self._violation(
                f"bound to {new}, which it neither created nor imported", cr=cr_uid, key=key
            )
        created = [
            o
            for o in data.operations
            if o["verb"] == "create"
            and o["resourceUid"] == new
            and self._ours(cr_uid, o.get("idempotencyKey"))
        ] + [
            o
            for o in self.port.operations.values()
            if o.verb is Verb.CREATE
            and o.resource_uid == new
            and self._ours(cr_uid, o.idempotency_key)
        ]
        if created:
            return "created"
        held = self.ownership.bindings.held_by(cr_uid)
        if held is not None and held.uid == new and (new in self.released or new in self.lost):
            # The incarnation a Released or Lost binding kept, taken over with it (`_act`
            # checks who may take it): checked against what the host serves, never adopted.
            return "handed over"
        raise self._violation(
            f"bound to {new}: no resource and no create of ours carries it", cr=cr_uid
        )

    def _held_by_a_cr(self, resource: dict[str, Any], live: list[dict[str, Any]]) -> bool:
        """One of the `live` CRs claims this incarnation: bound to its uid, or not bound yet
        and the creator of it (our creation key on it)."""
        identity, uid = resource_identity(resource), resource["metadata"]["uid"]
        key = resource["metadata"].get("creationIdempotencyKey")
        for body in live:
            if claimed_identity(body) != identity:
                continue
            bound = status_of(body).get("uid")
            if bound == uid or (bound is None and self._ours(body["metadata"]["uid"], key)):
                return True
        return False

    def _owned(self, resource: dict[str, Any]) -> bool:
        """Some live CR (or, with bindings, a TakoformBinding) holds this incarnation."""
        if self._held_by_a_cr(resource, self.cluster.live()):
            return True
        binding = self.ownership.binding(resource_identity(resource))
        uid = resource["metadata"]["uid"]
        return binding is not None and (binding.uid == uid or binding.phase is Phase.BOUND)

    def _check_remedy_left_nothing_unmanaged(self, body: dict[str, Any]) -> None:
        """A Delete-policy CR deleted by a remedy we printed: what its lineage created is
        deleted, or still owned, never left to nobody."""
        uid = body["metadata"]["uid"]
        for resource in self.host().resources:
            creator = creator_of(resource)
            if creator in self._line(uid) and not self._owned(resource):
                self._fail(
                    "remedy-unmanaged",
                    "a remedy we printed (delete this CR) left the CR's resource unmanaged",
                    cr=uid,
                    resource=resource["metadata"],
                    remedy=self.remedy_deletions[uid].to_json(),
                )

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def ownership_holds(self) -> None:
        self.broken = True
        self.check()
        self.broken = False

    def check(self) -> None:
        data = self.host()
        live = self.cluster.live()
        by_creator: dict[str, list[str]] = {}
        for resource in data.resources:
            creator = creator_of(resource)
            if creator is not None:
                by_creator.setdefault(creator, []).append(resource["metadata"]["uid"])
        for creator, uids in by_creator.items():
            if len(uids) > 1:
                raise self._violation(
                    "more than one host resource created on behalf of one CR",
                    cr=creator,
                    resources=uids,
                )
        for resource in data.resources:
            if not self._accounted(resource, live):
                raise self._violation(
                    "orphan: a resource created by a CR that neither binds nor claims it",
                    resource=resource["metadata"],
                    formRef=resource["formRef"],
                    crs={b["metadata"]["uid"]: status_of(b) for b in live},
                )
        claims: dict[tuple[str, str, str, str], str] = {}
        for body in live:
            uid = body["metadata"]["uid"]
            identity = claimed_identity(body)
            if identity is None:
                continue
            if identity in claims:
                self._fail(
                    "two-claims",
                    "two CRs claim one host identity",
                    identity=identity,
                    crs=[claims[identity], uid],
                )
            claims[identity] = uid
            pending = status_of(body).get("pendingOperationId")
            record = data.operation(pending) if pending else None
            if record is not None:
                mine = str(record.get("idempotencyKey") or "").startswith(f"{uid}:")
                target = (
                    record["space"],
                    record["formRef"]["apiVersion"],
                    record["formRef"]["kind"],
                    record["name"],
                )
                if not mine or target != identity:
                    raise self._violation(
                        "a pending operation that is not this CR's own for its target",
                        cr=uid,
                        operation=record,
                    )
        retained = {o["id"] for o in data.operations}
        for sent in self.port.sent:
            if sent.operation_id is None or sent.operation_id in retained:
                continue
            if isinstance(sent.action, Create) and sent.operation is not None:
                made = data.resource_by_uid(sent.operation.resource_uid or "")
                if made is not None and not self._accounted(made, live):
                    raise self._violation(
                        "an accepted create whose record expired left a resource no CR holds",
                        operation=sent.operation_id,
                    )

    def _accounted(self, resource: dict[str, Any], live: list[dict[str, Any]]) -> bool:
        creator = creator_of(resource)
        uid = resource["metadata"]["uid"]
        if creator is None or creator in self.released_creators or uid in self.released_uids:
            return True  # out of band, or released by an Orphan deletion
        if any(self.gone.get(c) == "vanished" for c in self._line(creator)):
            return True  # Lost: its CR vanished without a reconcile (finalizer removed)
        if self._held_by_a_cr(resource, live):
            return True
        identity = resource_identity(resource)
        held = self.ownership.bindings.held_by(creator)
        # The binding is the write-ahead record of the claim: a status write lost after the
        # create leaves the creator holding the binding of that identity, and its Orphan
        # deletion Released it (lastOwner the creator) before the finalizer removal was lost.
        if held is not None and binding_key(held.identity) == identity:
            return True
        binding = self.ownership.binding(identity)
        return binding is not None and (
            binding.uid == uid
            or (binding.last_owner is not None and binding.last_owner.uid in self._line(creator))
        )

    # -- liveness ----------------------------------------------------------------------------------

    def converge(self) -> None:
        """Faults off; reconcile every CR round by round until a full round is a fixpoint."""
        self._faults(**CLEAN_FAULTS)
        self.port.lose_next_answer = False
        previous: dict[str, dict[ConditionType, Reason]] = {}
        for _ in range(LIVENESS_ROUNDS):
            accepted_before = self._accepted()
            for process in self.operators:
                process.bindings.catch_up()  # every watch delivers, in the end
            now: dict[str, dict[ConditionType, Reason]] = {}
            settled = True
            for uid in self._live():
                outcome = self._reconcile(uid)
                self.check()
                if uid not in self.cluster.crs:
                    settled = False  # something changed: another round
                    continue
                now[uid] = outcome.asserted()
                settled = settled and self._terminal(uid, outcome)
            if settled and now == previous and self._accepted() == accepted_before:
                self._check_blocked_by_a_holder()
                return
            previous = now
        raise self._violation(
            f"no fixpoint within {LIVENESS_ROUNDS} reconciles of each CR once faults stopped",
            outcomes={
                uid: [(str(c.type), c.status, str(c.reason), c.message) for c in o.conditions]
                for uid, o in self.last_outcomes.items()
                if uid in self.cluster.crs
            },
        )

    def _check_blocked_by_a_holder(self) -> None:
        """At the fixpoint, a CR Blocked AlreadyManaged is kept off by something that holds the
        identity: another live CR that claimed it (recorded it in its status, which needs a
        grant) or acted on it, or a TakoformBinding not its own. Never by a squatter: a CR that
        names the identity but can never send anything (no grant for the space)."""
        for uid in self._live():
            outcome = self.last_outcomes.get(uid)
            if outcome is None:
                continue
            if outcome.asserted().get(ConditionType.BLOCKED) is not Reason.ALREADY_MANAGED:
                continue
            body = self.cluster.crs[uid]
            identity = claimed_identity(body) or _spec_identity(body)
            others = [b for b in self.cluster.live() if b["metadata"]["uid"] != uid]
            actor = self.actor.get(identity)
            binding = self.ownership.binding(identity)
            held = (
                any(claimed_identity(b) == identity for b in others)
                or (actor is not None and actor != uid and actor in self.cluster.crs)
                or (binding is not None and not binding.owned_by(uid))
            )
            if not held:
                message = next(
                    c.message for c in outcome.conditions if c.type is ConditionType.BLOCKED
                )
                self._fail(
                    "squatting",
                    "Blocked AlreadyManaged by a CR that holds nothing (a squatter)",
                    cr=uid,
                    namespace=body["metadata"]["namespace"],
                    identity=identity,
                    message=message,
                    others={
                        b["metadata"]["uid"]: [
                            b["metadata"]["namespace"],
                            b["metadata"]["name"],
                            status_of(b).get("space"),
                        ]
                        for b in others
                    },
                    granted=sorted(self.tenancy.granted),
                )

    def _accepted(self) -> int:
        """Mutations the host accepted. A refused one changes nothing (a Blocked NameTaken CR
        re-sends its fenced create each time it looks, which is how it sees the name freed)."""
        return sum(1 for sent in self.port.sent if sent.operation_id is not None)

    def _terminal(self, uid: str, outcome: Outcome) -> bool:
        asserted = outcome.asserted()
        if asserted.get(ConditionType.READY) is Reason.AVAILABLE:
            return True
        blocked = asserted.get(ConditionType.BLOCKED)
        if blocked is not None:
            message = next(c.message for c in outcome.conditions if c.type is ConditionType.BLOCKED)
            if "Remed" not in message and blocked not in FAIL_CLOSED:
                raise self._violation("Blocked without a remedy", cr=uid, message=message)
            return True
        body = self.cluster.crs[uid]
        if body["metadata"].get("deletionTimestamp") is not None:
            # kubectl delete must end: finalized, or Blocked naming what the user has to do.
            held = self.ownership.bindings.held_by(uid)
            return self.known_defect and _malformed_pin_deletion(body, asserted, held is not None)
        return asserted.get(ConditionType.DEGRADED) in SPEC_CAUSED

    def teardown(self) -> None:
        try:
            if not self.broken:
                self.converge()
        finally:
            self.world.view.set_faults(**CLEAN_FAULTS)


def _spec_identity(body: dict[str, Any]) -> IdentityKey:
    """The identity an unclaimed CR's spec asks for."""
    spec = body["spec"]
    return (
        str(spec.get("space")),
        str(body["apiVersion"]),
        str(body["kind"]),
        str(spec.get("resourceName") or body["metadata"]["name"]),
    )


def _names(import_id: str, identity: tuple[str, str, str, str], ref: dict[str, Any]) -> bool:
    """The canonical import id names exactly this identity under exactly this FormRef."""
    doc = json.loads(import_id)
    space, _, _, name = identity
    return (
        doc.get("name") == name
        and doc.get("space", space) == space
        and all(
            doc.get(k) == ref[k]
            for k in ("apiVersion", "kind", "definitionVersion", "schemaDigest")
        )
    )


def _malformed_pin_deletion(
    body: dict[str, Any], asserted: dict[ConditionType, Reason], holds_binding: bool = False
) -> bool:
    """The known defects "malformed-pin-deletion" (claimed in the status) and
    "malformed-pin-deletion-binding" (claimed only in the binding it holds): deleting, claimed,
    spec.formRef malformed."""
    pin = body["spec"].get("formRef") or {}
    malformed = pin.get("definitionVersion") not in (None, "1.0.0", "1.1.0", "1.2.0")
    claimed = claimed_identity(body) is not None or holds_binding
    return malformed and claimed and asserted.get(ConditionType.DEGRADED) is Reason.INVALID_SPEC
