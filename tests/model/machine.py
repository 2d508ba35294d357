"""The ownership model checker (issue 8): random sequences against the real reconcile and host.

`OwnershipModel` is a hypothesis `RuleBasedStateMachine` over a simulated cluster (tests/model/
cluster.py) and one real reference host process. Its rules are what users, the operator's
process and the host can do to each other; its invariants are checked after every step from the
host's own data and the CRs' statuses — never from the outcomes the operator reports:

- never more than one live host resource created on behalf of one CR;
- no orphan: a resource created with a CR's key is bound or claimed by that CR, or was released
  by an Orphan deletion (resources without a creation key only come from out-of-band actions);
- every mutation is sent to the exact target (space, FormRef, name) the CR's status records, to
  the uid it is bound to (or explicitly accepted, or proven ours by our creation key), and never
  to an identity or uid another CR claims or is bound to (checked when it is sent);
- never a silent rebind: status.uid changes only by a first binding to a resource we created or
  imported, an accept-uid naming exactly the new uid, or clearing after the bound incarnation
  vanished from the host (checked on every status write);
- never two CRs claiming one host identity in their status;
- a pending operation in a status is one of this CR's own, for its recorded target; an accepted
  create whose record the host no longer keeps left nothing unaccounted for;
- liveness (teardown): with every fault off, within `LIVENESS_ROUNDS` reconciles of each CR the
  cluster reaches a fixpoint where every CR is Ready, Blocked with a remedy, Degraded by its own
  spec, or gone, and a further round has no mutation accepted and changes no condition.

Commits are under the model's control: the host runs with commit delay 0 (an accepted operation
commits before the host serves its next request) and the `stuck` rules hold every operation
`running` until released, so no step waits on wall-clock time and a sequence replays exactly.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import json
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from takoform_operator.core.actions import Action, Create
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.outcome import Outcome
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import ResourceView, Verb
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
    ModelViolation,
    Operator,
    RecordingPort,
    accept_uid_of,
    claimed_identity,
    creator_of,
    resource_identity,
    status_of,
)

T = TypeVar("T")

NAMESPACES = ("ns-a", "ns-b")
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
KNOWN_DEFECTS: frozenset[str] = frozenset()
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
        self.port = RecordingPort(HostClientPort(world.client), self._check_send)
        self.operator = Operator(self.cluster, self.port)
        self.cluster.status_hooks.append(self._check_status_write)
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
        self.known_defect = "malformed-pin-deletion" in KNOWN_DEFECTS

    @classmethod
    def bind(cls, world: World) -> type[OwnershipModel]:
        return type("OwnershipModelIn", (cls,), {"world": world})

    # -- helpers -----------------------------------------------------------------------------

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

    def _reconcile(self, uid: str, *, lose_write: bool = False) -> Outcome:
        body = copy.deepcopy(self.cluster.crs[uid])
        self.broken = True  # until the reconcile and its checks returned
        self._touched()
        outcome = self.world.run(self.operator.reconcile(uid, self.registry, lose_write=lose_write))
        self.broken = False
        self._touched()
        if uid not in self.cluster.crs:
            self._released(body)
        self.last_outcomes[uid] = outcome
        return outcome

    def _released(self, body: dict[str, Any]) -> None:
        """The CR went: with Orphan, what it created or was bound to is released on purpose."""
        if (body.get("spec") or {}).get("deletionPolicy") == "Orphan":
            self.released_creators.add(body["metadata"]["uid"])
            uid = status_of(body).get("uid")
            if uid:
                self.released_uids.add(uid)

    def _faults(self, **faults: Any) -> None:
        self._touched()
        self.faults.update(faults)
        self.world.view.set_faults(**faults)

    def _violation(self, message: str, **facts: Any) -> ModelViolation:
        detail = "\n".join(
            f"  {k}: {json.dumps(v, default=str, indent=None)}" for k, v in facts.items()
        )
        return ModelViolation(f"{message}\n{detail}")

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

    # -- rules: the operator ---------------------------------------------------------------------

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2))
    def reconcile(self, pick: int) -> None:
        self._reconcile(self._pick(pick))

    @precondition(lambda self: self.cluster.crs)
    @rule(pick=st.integers(0, 2))
    def reconcile_losing_status_write(self, pick: int) -> None:
        """The reconcile's host calls happen; its last write (status, or finalizer) is lost."""
        self._reconcile(self._pick(pick), lose_write=True)

    @rule()
    def restart_operator(self) -> None:
        self.operator.restart()

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
            self.world.view.out_of_band(verb, resources[which % len(resources)])
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

    # -- checks when something is sent or written ----------------------------------------------

    def _check_send(self, cr_uid: str, action: Action, read: ResourceView | None) -> None:
        body = self.cluster.crs[cr_uid]
        status = status_of(body)
        target = action.target
        self.used_refs.add(target.form_ref)
        self.used_spaces.add(target.space)
        self._touched()
        recorded = (status.get("space"), status.get("formRef"), status.get("name"))
        if recorded != (target.space, target.form_ref.to_json(), target.name):
            raise self._violation(
                f"{action.verb} sent to a target the CR's status does not record",
                cr=cr_uid,
                sent=[target.space, target.form_ref.to_json(), target.name],
                recorded=recorded,
            )
        identity = (target.space, target.form_ref.api_version, target.form_ref.kind, target.name)
        for other in self.cluster.live():
            other_uid = other["metadata"]["uid"]
            if other_uid != cr_uid and claimed_identity(other) == identity:
                raise self._violation(
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
            and (read.creation_key or "").startswith(f"{cr_uid}:create:")
        )
        if not (expected == bound or expected == accept_uid_of(body) or proven):
            raise self._violation(
                f"{action.verb} sent to uid {expected}, not the bound one",
                cr=cr_uid,
                bound=bound,
                accept_uid=accept_uid_of(body),
            )
        for other in self.cluster.live():
            other_uid = other["metadata"]["uid"]
            if other_uid != cr_uid and status_of(other).get("uid") == expected:
                raise self._violation(
                    f"{action.verb} sent to uid {expected}, which another CR is bound to",
                    cr=cr_uid,
                    other=other_uid,
                )

    def _check_status_write(
        self, cr_uid: str, before: dict[str, Any], after: dict[str, Any]
    ) -> None:
        old, new = before.get("uid"), after.get("uid")
        if old == new:
            return
        body = self.cluster.crs[cr_uid]
        data = self.host()
        if new is None:
            if data.resource_by_uid(old) is not None:
                raise self._violation(
                    "status.uid cleared while the bound incarnation still exists",
                    cr=cr_uid,
                    uid=old,
                )
            return
        if accept_uid_of(body) == new:
            return  # remedy 1: the user imported exactly this incarnation
        if old is not None:
            raise self._violation(
                f"silent rebind: status.uid {old} -> {new}", cr=cr_uid, accept=accept_uid_of(body)
            )
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
            if str(key or "").startswith(f"{cr_uid}:create:"):
                return
            import_id = (after.get("requested") or {}).get("importId")
            if import_id and _names(import_id, identity, ref):
                return
            raise self._violation(
                f"bound to {new}, which it neither created nor imported", cr=cr_uid, key=key
            )
        created = [
            o
            for o in data.operations
            if o["verb"] == "create"
            and o["resourceUid"] == new
            and str(o.get("idempotencyKey") or "").startswith(f"{cr_uid}:create:")
        ] + [
            o
            for o in self.port.operations.values()
            if o.verb is Verb.CREATE
            and o.resource_uid == new
            and (o.idempotency_key or "").startswith(f"{cr_uid}:create:")
        ]
        if not created:
            raise self._violation(
                f"bound to {new}: no resource and no create of ours carries it", cr=cr_uid
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
                raise self._violation(
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
        identity = resource_identity(resource)
        for body in live:
            if claimed_identity(body) != identity:
                continue
            bound = status_of(body).get("uid")
            if bound == uid or (bound is None and body["metadata"]["uid"] == creator):
                return True
        return False

    # -- liveness ----------------------------------------------------------------------------------

    def converge(self) -> None:
        """Faults off; reconcile every CR round by round until a full round is a fixpoint."""
        self._faults(**CLEAN_FAULTS)
        self.port.lose_next_answer = False
        previous: dict[str, dict[ConditionType, Reason]] = {}
        for _ in range(LIVENESS_ROUNDS):
            accepted_before = self._accepted()
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
            return self.known_defect and _malformed_pin_deletion(body, asserted)
        return asserted.get(ConditionType.DEGRADED) in SPEC_CAUSED

    def teardown(self) -> None:
        try:
            if not self.broken:
                self.converge()
        finally:
            self.world.view.set_faults(**CLEAN_FAULTS)


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


def _malformed_pin_deletion(body: dict[str, Any], asserted: dict[ConditionType, Reason]) -> bool:
    """The known defect "malformed-pin-deletion": deleting, claimed, spec.formRef malformed."""
    pin = body["spec"].get("formRef") or {}
    malformed = pin.get("definitionVersion") not in (None, "1.0.0", "1.1.0", "1.2.0")
    claimed = claimed_identity(body) is not None
    return malformed and claimed and asserted.get(ConditionType.DEGRADED) is Reason.INVALID_SPEC
