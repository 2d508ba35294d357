"""A simulated cluster for the model checker: CR bodies, status merge-patches, an operator process.

Nothing here is Kubernetes or kopf; everything the operator itself runs is real:
`CrSteps.look` (kube.cr_step: the look the kopf handlers run), its ownership (the
TakoformBindings, in the API server semantics of tests/support/memory_bindings.py), the
`HostClientPort` over the HTTP client, and the reference host as a process on loopback.

- `Cluster` holds what the API server would hold: CR bodies with metadata (uid, generation bumped
  on spec changes only, creationTimestamp from a fake clock, annotations, deletionTimestamp) and a
  status that changes only by RFC 7386 merge-patches. A CR carries the operator's finalizer from
  birth, so a deleted CR goes only when a reconcile with `deleting=True` finalizes it.
- `Operator` is one operator process, reconciling the CRs of its namespaces (one process for
  all, or two namespace shards) with the TakoformBindings of the simulated API server (`Ownership`:
  one `MemoryBindings` all processes share) through the handlers' own look: reconcile, then write
  the status it asks for (or remove the finalizer of a finalized deletion). `lose_write=True`
  drops that write (the status patch, or the finalizer removal): its host calls happened.
- `ModelTenancy` is the cluster admin's TakoformSpaceGrants, one per granted (namespace, space) on
  the one host, granted and revoked by the model's rules.
- `RecordingPort` wraps the real port: every request (reads too) is checked, at the moment it is
  sent, against the grants of the CR's namespace; every mutation against the persisted status of
  the CR it is sent for, and recorded; it can also lose the answer of the next mutation after the
  host accepted it (a dropped connection), and let the host commit what it holds between two
  requests of one look (`release_after`).
- `HostView` reads the host's own data over its API (resources per exact FormRef, the operation
  listing of a space) and drives its admin API (faults, out-of-band actions, record expiry).
"""

from __future__ import annotations

import copy
import datetime
import itertools
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from looks import WithoutSecrets
from memory_bindings import MemoryBindings

from takoform_operator.binding_port import BindingError
from takoform_operator.core.actions import Action, Target
from takoform_operator.core.binding import Binding, ClaimRef, Identity
from takoform_operator.core.outcome import Event, Outcome
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import DEFAULT_HOST, OperationView, OpState, ResourceView
from takoform_operator.core.tenancy import SpaceGrant
from takoform_operator.host_client.port import HostClientPort
from takoform_operator.host_port import HostPort, HostUnavailable
from takoform_operator.kube.cr_step import CrSteps
from takoform_operator.kube.crs import ACCEPT_UID_ANNOTATION
from takoform_operator.settings import Settings
from takoform_spec.identity import FormLine, FormRef

API_VERSION = "storage.takoform.io/v1"
KIND = "Bucket"
FINALIZER = "takoform.io/finalizer"

Body = dict[str, Any]
#: (space, apiVersion, kind, name): a host identity on the model's one host.
IdentityKey = tuple[str, str, str, str]


class ModelViolation(AssertionError):
    """An invariant of the ownership model does not hold."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 merge-patch: objects merge recursively, null deletes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


class FakeClock:
    """Whole seconds from a fixed instant; RFC 3339 with 'Z' like the API server writes."""

    def __init__(self) -> None:
        self._now = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)

    def tick(self, seconds: int = 1) -> None:
        self._now += datetime.timedelta(seconds=seconds)

    def stamp(self) -> str:
        return self._now.strftime("%Y-%m-%dT%H:%M:%SZ")


def status_of(body: Mapping[str, Any]) -> dict[str, Any]:
    return dict(body.get("status") or {})


def claimed_identity(body: Mapping[str, Any]) -> tuple[str, str, str, str] | None:
    """(space, apiVersion, kind, name) the CR's status records as its target, if any."""
    status = status_of(body)
    ref = status.get("formRef")
    if not ref or not status.get("space") or not status.get("name"):
        return None
    return (str(status["space"]), str(ref["apiVersion"]), str(ref["kind"]), str(status["name"]))


def ref_of(doc: Mapping[str, Any]) -> FormRef:
    return FormRef.from_json(dict(doc))


class Cluster:
    """CR bodies as the API server holds them. Listeners see every change (the watch)."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.crs: dict[str, Body] = {}
        self._changed: list[Callable[[Body], None]] = []
        self._removed: list[Callable[[str], None]] = []
        #: Called with (uid, status before, status after) before a status patch is applied.
        self.status_hooks: list[Callable[[str, dict[str, Any], dict[str, Any]], None]] = []
        self._versions = itertools.count(1)

    def on_change(self, changed: Callable[[Body], None], removed: Callable[[str], None]) -> None:
        self._changed.append(changed)
        self._removed.append(removed)

    def _notify(self, uid: str) -> None:
        """Every change: a new resourceVersion, then the listeners."""
        self.crs[uid]["metadata"]["resourceVersion"] = str(next(self._versions))
        body = copy.deepcopy(self.crs[uid])
        for listener in self._changed:
            listener(body)

    def live(self) -> list[Body]:
        return list(self.crs.values())

    def create(
        self, namespace: str, name: str, spec: Mapping[str, Any], *, same_instant: bool = False
    ) -> str:
        """A new CR. `same_instant`: the same creationTimestamp as the newest CR (the clock
        has whole seconds, so two CRs created in one second tie)."""
        if not (same_instant and self.crs):
            self.clock.tick()
        uid = str(uuid.uuid4())
        self.crs[uid] = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {
                "namespace": namespace,
                "name": name,
                "uid": uid,
                "generation": 1,
                "creationTimestamp": self.clock.stamp(),
                "annotations": {},
                "finalizers": [FINALIZER],
            },
            "spec": copy.deepcopy(dict(spec)),
        }
        self._notify(uid)
        return uid

    def edit_spec(self, uid: str, edit: Callable[[dict[str, Any]], None]) -> bool:
        """Apply `edit` to the spec; the generation moves only when the spec changed."""
        body = self.crs[uid]
        spec = copy.deepcopy(body["spec"])
        edit(spec)
        if spec == body["spec"]:
            return False
        body["spec"] = spec
        body["metadata"]["generation"] += 1
        self._notify(uid)
        return True

    def annotate(self, uid: str, key: str, value: str | None) -> None:
        annotations = self.crs[uid]["metadata"]["annotations"]
        if value is None:
            annotations.pop(key, None)
        else:
            annotations[key] = value
        self._notify(uid)

    def delete(self, uid: str) -> None:
        metadata = self.crs[uid]["metadata"]
        if metadata.get("deletionTimestamp") is None:
            metadata["deletionTimestamp"] = self.clock.stamp()
            self._notify(uid)

    def patch_status(self, uid: str, patch: Mapping[str, Any]) -> None:
        body = self.crs[uid]
        before = status_of(body)
        after = merge_patch(before, patch)
        for hook in self.status_hooks:
            hook(uid, before, after)
        body["status"] = after
        self._notify(uid)

    def remove_finalizer(self, uid: str) -> Body:
        """The finalizer goes; the CR has a deletionTimestamp, so it is gone."""
        body = self.crs.pop(uid)
        for listener in self._removed:
            listener(uid)
        return body

    def vanish(self, uid: str) -> Body:
        """`kubectl delete` and a `kubectl patch` removing the finalizers: the CR is gone and no
        reconcile ever ran for its deletion."""
        self.delete(uid)
        return self.remove_finalizer(uid)

    def restore(self, body: Mapping[str, Any]) -> str:
        """The CR made again from a backup: the same namespace, name, spec and annotations, a
        new uid and creationTimestamp, no status (a backup restore, or a re-apply)."""
        metadata = body["metadata"]
        uid = self.create(metadata["namespace"], metadata["name"], body["spec"])
        self.crs[uid]["metadata"]["annotations"] = dict(metadata.get("annotations") or {})
        self._notify(uid)
        return uid


@dataclass
class Sent:
    """One mutation the operator sent, with what the CR had persisted when it was sent."""

    cr_uid: str
    action: Action
    operation_id: str | None = None
    operation: OperationView | None = None


class RecordingPort:
    """The real port, with every request checked at send time (`access`: the CR's namespace
    may address that space now; None: the space its status records) and every mutation checked
    (`check`) and recorded, and `accepted` told of each one the host accepted."""

    def __init__(
        self,
        port: HostClientPort,
        check: Callable[[str, Action, ResourceView | None], None],
        access: Callable[[str, str | None, str], None] = lambda cr, space, what: None,
        accepted: Callable[[str, Action, OperationView], None] = lambda cr, a, op: None,
    ) -> None:
        self._port = port
        self._check = check
        self._access = access
        self._accepted = accepted
        self.current: str | None = None
        self.sent: list[Sent] = []
        self.lose_next_answer = False
        self.last_read: ResourceView | None = None
        #: Requests answered in the current look; and after how many of them the host commits
        #: what it holds (`release` lifts stuckOperations: the host's next request settles it).
        self.answered = 0
        self.release_after: int | None = None
        self.release: Callable[[], None] = lambda: None
        #: Everything the host served to the operator, by resource uid and by operation id:
        #: evidence for a binding even after the resource is gone or the record expired.
        self.served: dict[str, ResourceView] = {}
        self.operations: dict[str, OperationView] = {}

    def _asks(self, space: str | None, what: str) -> None:
        assert self.current is not None, f"a host request ({what}) outside a reconcile"
        self._access(self.current, space, what)

    def _answered(self) -> None:
        """One request of the look answered: the host may commit before the next one."""
        self.answered += 1
        if self.answered == self.release_after:
            self.release_after = None
            self.release()

    async def get_operation(self, operation_id: str) -> OperationView:
        self._asks(None, f"get_operation {operation_id}")
        operation = await self._port.get_operation(operation_id)
        if operation.state is not OpState.NOT_FOUND or operation_id not in self.operations:
            # An expired record says nothing: what the host said of it before stays evidence
            # (a held status write can record a create's uid after its record expired).
            self.operations[operation_id] = operation
        self._answered()
        return operation

    async def read(self, target: Target) -> ResourceView | None:
        self._asks(target.space, f"read {target.name}")
        self.last_read = await self._port.read(target)
        if self.last_read is not None:
            self.served[self.last_read.uid] = self.last_read
        self._answered()
        return self.last_read

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        self._asks(target.space, f"list_operations {target.name}")
        listed = await self._port.list_operations(target)
        self.operations.update(listed)
        self._answered()
        return listed

    async def execute(self, action: Action) -> tuple[str, OperationView]:
        assert self.current is not None
        self._asks(action.target.space, f"{action.verb} {action.target.name}")
        self._check(self.current, action, self.last_read)
        record = Sent(self.current, action)
        self.sent.append(record)
        operation_id, operation = await self._port.execute(action)
        record.operation_id, record.operation = operation_id, operation
        self.operations[operation_id] = operation
        self._accepted(self.current, action, operation)
        self._answered()
        if self.lose_next_answer:
            self.lose_next_answer = False
            raise HostUnavailable("the answer was lost after the host accepted it (injected)")
        return operation_id, operation


class ModelTenancy:
    """The cluster admin's policy as the model writes it: the one host (`default`, the default
    host) and one TakoformSpaceGrant per granted (namespace, space). The `service.Tenancy` the
    operator reads (kube.tenancy holds the same for the real objects); every process shares it."""

    def __init__(self, port: HostPort) -> None:
        self._port = port
        self.granted: set[tuple[str, str]] = set()
        #: namespace -> how many times it was deleted and created again (its uid changes).
        self.incarnation: dict[str, int] = {}

    def allows(self, namespace: str, space: str) -> bool:
        return (namespace, space) in self.granted

    def default_host(self) -> str | None:
        return DEFAULT_HOST

    def marked_default(self) -> Collection[str]:
        return ()

    def hosts(self) -> Collection[str]:
        return (DEFAULT_HOST,)

    def grants(self) -> Iterable[SpaceGrant]:
        return tuple(
            SpaceGrant(name=f"{ns}-{space}", host=DEFAULT_HOST, spaces=(space,), namespaces=(ns,))
            for ns, space in sorted(self.granted)
        )

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return {}

    def namespace_uid(self, namespace: str) -> str:
        return f"{namespace}-uid-{self.incarnation.get(namespace, 0)}"

    def port(self, host: str, namespace: str = "") -> HostPort:
        assert host == DEFAULT_HOST, f"a request for host {host!r}, which the model has not"
        return self._port


def binding_key(identity: Identity) -> IdentityKey:
    return (identity.space, identity.line.api_version, identity.line.kind, identity.name)


def binding_identity(key: IdentityKey) -> Identity:
    space, api_version, kind, name = key
    return Identity(space, FormLine(api_version, kind), name, DEFAULT_HOST)


class Ownership:
    """Who owns what: the TakoformBindings of the simulated API server, one `MemoryBindings` every
    process shares (it survives restarts). `exists` answers the bindings' question whether a
    claimed CR (namespace, name, uid) still exists, from the simulated cluster."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.bindings = MemoryBindings(exists=self._exists, recorded=self._recorded)

    def _recorded(self, identity: Identity, cr_uid: str, creator: str | None) -> bool:
        """Another live CR records the identity in its status, or is its creator."""
        key = binding_key(identity)
        return any(
            b["metadata"]["uid"] != cr_uid
            and (claimed_identity(b) == key or b["metadata"]["uid"] == creator)
            for b in self.cluster.live()
        )

    def _exists(self, identity: Identity, claim: ClaimRef) -> bool:
        return any(
            b["metadata"]["namespace"] == claim.namespace
            and b["metadata"]["name"] == claim.name
            and (not claim.uid or b["metadata"]["uid"] == claim.uid)
            and b["apiVersion"] == identity.line.api_version
            and b["kind"] == identity.line.kind
            for b in self.cluster.live()
        )

    def binding(self, key: IdentityKey) -> Binding | None:
        found: Binding | None = self.bindings.objects.get(binding_identity(key).binding_name())
        return found

    def all(self) -> list[Binding]:
        return list(self.bindings.objects.values())


class ProcessBook:
    """One process's binding cache (kube.bindings.BindingBook) over the API server's bindings:
    `get` and `held_by` answer from what its watch delivered so far, which may lag the API
    server (`catch_up` delivers the rest); `read` and every write go to the API server, and a
    write, or a write refused, refreshes the one binding it named."""

    def __init__(self, server: MemoryBindings) -> None:
        self.server = server
        self.cache: dict[str, Binding] = {}
        #: The bindings this process saw go (its tombstones).
        self.gone: set[str] = set()
        self.catch_up()

    def went(self, identity: Identity) -> bool:
        name = identity.binding_name()
        return name in self.gone and name not in self.cache

    def catch_up(self) -> None:
        self.gone |= set(self.cache) - set(self.server.objects)
        self.cache = dict(self.server.objects)

    def _refresh(self, name: str) -> None:
        found = self.server.objects.get(name)
        if found is None:
            if self.cache.pop(name, None) is not None:
                self.gone.add(name)
        else:
            self.cache[name] = found

    async def get(self, identity: Identity) -> Binding | None:
        return self.cache.get(identity.binding_name())

    async def read(self, identity: Identity) -> Binding | None:
        self._refresh(identity.binding_name())
        return await self.server.read(identity)

    def held_by(self, cr_uid: str) -> Binding | None:
        return next((b for b in self.cache.values() if b.owned_by(cr_uid)), None)

    async def create(self, binding: Binding) -> Binding:
        try:
            return await self.server.create(binding)
        finally:
            self._refresh(binding.name)

    async def replace(self, binding: Binding) -> Binding:
        try:
            return await self.server.replace(binding)
        finally:
            self._refresh(binding.name)

    async def delete(self, binding: Binding) -> None:
        try:
            await self.server.delete(binding)
        finally:
            self._refresh(binding.name)

    async def claim_exists(self, identity: Identity, claim: ClaimRef) -> bool:
        return await self.server.claim_exists(identity, claim)

    async def recorded_elsewhere(
        self, identity: Identity, cr_uid: str, creator: str | None
    ) -> bool:
        return await self.server.recorded_elsewhere(identity, cr_uid, creator)


class ModelCr(WithoutSecrets):
    """What a look does to its CR (kube.cr_step.CrApi), in the simulated cluster. Events and
    connection Secrets are not modelled; `lose_write` drops the look's writes."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.lose_write = False

    async def write_status(
        self, body: Mapping[str, Any], patch: dict[str, Any]
    ) -> Mapping[str, Any]:
        uid = str(body["metadata"]["uid"])
        if not self.lose_write:
            self.cluster.patch_status(uid, patch)
        return copy.deepcopy(self.cluster.crs[uid])

    async def set_finalizer(self, body: Mapping[str, Any], present: bool) -> Mapping[str, Any]:
        assert not present, "a CR carries the operator's finalizer from birth"
        if not self.lose_write:
            self.cluster.remove_finalizer(str(body["metadata"]["uid"]))
        return body

    def post(self, body: Mapping[str, Any], event: Event) -> None:
        pass


class Operator:
    """One operator process: the CRs of `namespaces` (None: all) and the look of one CR
    (kube.cr_step.CrSteps, the handlers' own). Ownership is the shared bindings; of its own it
    keeps its memory of each CR (the status writes its looks held), which a restart loses as a
    dying process would. A look that holds the write of the operation the previous look held
    is a violation: at most once."""

    def __init__(
        self,
        cluster: Cluster,
        port: RecordingPort,
        tenancy: ModelTenancy,
        ownership: Ownership,
        namespaces: Collection[str] | None = None,
    ) -> None:
        self.cluster = cluster
        self.port = port
        self.tenancy = tenancy
        self.ownership = ownership
        self.namespaces = None if namespaces is None else frozenset(namespaces)
        self.stopped = False
        #: Its own binding cache: listed at start, then as far as its watch got.
        self.bindings = ProcessBook(ownership.bindings)
        self.api = ModelCr(cluster)
        #: Its looks and its memory of each CR (the registry is the build's of each look).
        self.steps = CrSteps(
            Registry(), tenancy, self.bindings, self.api, Settings(), cluster.clock.stamp
        )

    def covers(self, namespace: str) -> bool:
        return self.namespaces is None or namespace in self.namespaces

    def stop(self) -> None:
        """The process is gone (a new deployment replaces it)."""
        self.stopped = True

    async def reconcile(self, uid: str, registry: Registry, *, lose_write: bool = False) -> Outcome:
        """One look at the CR as the handlers run it; `lose_write` drops its writes. A binding
        write the API server refused (this process's cache lagged) fails the look, and the
        handlers retry it: here at once, once, with the binding the refusal refreshed."""
        self.steps.registry = registry
        try:
            return await self._look(uid, lose_write=lose_write)
        except BindingError:
            return await self._look(uid, lose_write=lose_write)

    async def _look(self, uid: str, *, lose_write: bool) -> Outcome:
        assert self.covers(self.cluster.crs[uid]["metadata"]["namespace"])
        body = copy.deepcopy(self.cluster.crs[uid])
        deleting = body["metadata"].get("deletionTimestamp") is not None
        memory = self.steps.memory.get(uid)
        held = memory.held if memory is not None else None
        self.port.current, self.port.last_read, self.port.answered = uid, None, 0
        self.api.lose_write = lose_write
        try:
            looked = await self.steps.look(body)
        finally:
            self.port.current = None
        memory = self.steps.memory.get(uid)
        now_held = memory.held if memory is not None else None
        if held is not None and now_held is not None and now_held.operation_id == held.operation_id:
            raise ModelViolation(f"the pending write of {held.operation_id} held twice in a row")
        outcome = looked.outcome
        assert outcome is not None, "a CR of the model carries the finalizer until it goes"
        if outcome.finalized and not deleting:
            raise ModelViolation(f"finalized a CR that is not being deleted: {outcome}")
        return outcome


# -- the host's own data ---------------------------------------------------------------------------


@dataclass
class HostData:
    """What the host serves for some spaces: resources (every exact FormRef asked) and records."""

    resources: list[dict[str, Any]] = field(default_factory=list)
    operations: list[dict[str, Any]] = field(default_factory=list)

    def resource_by_uid(self, uid: str) -> dict[str, Any] | None:
        return next((r for r in self.resources if r["metadata"]["uid"] == uid), None)

    def operation(self, operation_id: str) -> dict[str, Any] | None:
        return next((o for o in self.operations if o["id"] == operation_id), None)


def resource_identity(resource: Mapping[str, Any]) -> tuple[str, str, str, str]:
    ref, meta = resource["formRef"], resource["metadata"]
    return (meta["space"], ref["apiVersion"], ref["kind"], meta["name"])


def creator_of(resource: Mapping[str, Any]) -> str | None:
    """The CR uid of the creation key recorded on a resource (None: not created by a CR)."""
    key = resource["metadata"].get("creationIdempotencyKey")
    if not key or ":create:" not in key:
        return None
    return str(key).split(":create:", 1)[0]


class HostView:
    """The reference host's API (reads) and admin API (faults, out-of-band actions, expiry)."""

    def __init__(self, url: str, token: str, admin_token: str) -> None:
        self._api = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=10.0
        )
        self._admin = httpx.Client(
            base_url=url, headers={"Authorization": f"Bearer {admin_token}"}, timeout=10.0
        )

    def close(self) -> None:
        self._api.close()
        self._admin.close()

    def _get(self, path: str, params: Mapping[str, str]) -> Any:
        response = self._api.get(path, params=dict(params))
        if response.status_code != 200:
            raise RuntimeError(f"GET {path} {params} -> {response.status_code}: {response.text}")
        return response.json()

    def admin(self, method: str, path: str, body: Any) -> Any:
        response = self._admin.request(method, "/admin/v1" + path, json=body)
        if not response.is_success:
            raise RuntimeError(f"admin {method} {path} -> {response.status_code}: {response.text}")
        return response.json()

    def ensure_space(self, space: str) -> None:
        response = self._api.put(f"/v1alpha3/spaces/{space}")
        response.raise_for_status()

    def snapshot(self, spaces: Iterable[str], refs: Iterable[FormRef]) -> HostData:
        """Every resource of `spaces` under each of `refs`, and every retained record of
        `spaces`. Every host API request settles what is due first, so this is current."""
        data = HostData()
        refs = sorted(set(refs))
        for space in sorted(set(spaces)):
            data.operations += self._get("/v1alpha3/operations", {"space": space})["items"]
            for ref in refs:
                group, version = ref.api_version.split("/", 1)
                path = f"/v1alpha3/spaces/{space}/forms/{group}/{version}/{ref.kind}/resources"
                query = {
                    "definitionVersion": ref.definition_version,
                    "schemaDigest": ref.schema_digest,
                }
                data.resources += self._get(path, query)["items"]
        return data

    def update(self, resource: Mapping[str, Any], spec: Mapping[str, Any]) -> int:
        """Another client of the host updates the resource's spec (fenced on its generation,
        no idempotency key). Returns the HTTP status (202 accepted, or a refusal), 0 when the
        host's faults dropped the connection (that client's update did not happen)."""
        space, api_version, kind, name = resource_identity(resource)
        group, version = api_version.split("/", 1)
        ref = resource["formRef"]
        path = f"/v1alpha3/spaces/{space}/forms/{group}/{version}/{kind}/resources/{name}"
        query = {k: ref[k] for k in ("definitionVersion", "schemaDigest")}
        fence = {"Takoform-Expected-Generation": resource["metadata"]["generation"]}
        try:
            response = self._api.put(path, params=query, headers=fence, json={"spec": dict(spec)})
        except httpx.TransportError:
            return 0
        return response.status_code

    def create(self, resource: Mapping[str, Any]) -> int:
        """Another client of the host creates a resource like `resource` (its identity, exact
        FormRef and spec) where none exists: a new uid, no idempotency key, so no creation key.
        Returns the HTTP status (202 accepted, or a refusal), 0 when the connection dropped."""
        space, api_version, kind, name = resource_identity(resource)
        group, version = api_version.split("/", 1)
        ref = resource["formRef"]
        path = f"/v1alpha3/spaces/{space}/forms/{group}/{version}/{kind}/resources/{name}"
        query = {k: ref[k] for k in ("definitionVersion", "schemaDigest")}
        body = {"spec": dict(resource["spec"])}
        try:
            response = self._api.put(path, params=query, headers={"If-None-Match": "*"}, json=body)
        except httpx.TransportError:
            return 0
        return response.status_code

    def set_faults(self, **faults: Any) -> None:
        self.admin("PUT", "/faults", faults)

    def expire(self, ids: list[str]) -> Any:
        return self.admin("POST", "/operations/expire", {"ids": ids})

    def out_of_band(self, verb: str, resource: Mapping[str, Any]) -> Any:
        space, api_version, kind, name = resource_identity(resource)
        body = {"space": space, "apiVersion": api_version, "kind": kind, "name": name}
        return self.admin("POST", f"/resources/{verb}", body)


def accept_uid_of(body: Mapping[str, Any]) -> str | None:
    return (body["metadata"].get("annotations") or {}).get(ACCEPT_UID_ANNOTATION)
