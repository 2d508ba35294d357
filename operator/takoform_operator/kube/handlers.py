"""kopf handlers: registration only. Watch events feed the binding cache (kube.bindings) and
the reconcile loops (kube.loops); each turn of a CR's loop is one look (kube.cr_step), the life
of one CR in one function. kopf keeps nothing of ours in the CR (no progress or diff-base
annotations): what to do is read from the CR itself.

One failure path: a look that raises (a status write that did not land, a binding write
refused, an unexpected error) is logged here and retried with the CR's back-off
(kube.cr_step.CrSteps.next_look).
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from takoform_operator.binding_port import BindingError
from takoform_operator.core.policy import PAUSED_ANNOTATION
from takoform_operator.core.registry import Registry
from takoform_operator.core.shard_ring import SLOT_LABEL
from takoform_operator.core.shard_round import Verdict
from takoform_operator.core.tenancy import (
    GRANT_PLURAL,
    GROUP,
    HOST_PLURAL,
    VERSION,
    InvalidPolicy,
    grant_from_body,
    grant_status,
)
from takoform_operator.core.trim import Kept, trimmed
from takoform_operator.kube.bindings import BindingBook
from takoform_operator.kube.connection_secrets import SecretStore
from takoform_operator.kube.cr_api import ApiCr, fields
from takoform_operator.kube.cr_step import FINALIZER, CrSteps, HeldStatus
from takoform_operator.kube.crs import ACCEPT_UID_ANNOTATION, merged_status
from takoform_operator.kube.kopf_alone import kopf
from takoform_operator.kube.loops import ReconcileLoops
from takoform_operator.kube.selector import parse_selector
from takoform_operator.kube.shards import Admission, BySelector, ShardMembership
from takoform_operator.kube.status import CrWriter, StatusWriteFailed
from takoform_operator.kube.tenancy import TenancyBook
from takoform_operator.logs import look
from takoform_operator.metrics import Metrics
from takoform_operator.settings import Settings

#: The annotations of a CR a reconcile acts on (kube.crs): a change of one wakes its loop, and
#: they are the only annotations a process keeps (core.trim).
WATCHED_ANNOTATIONS = (ACCEPT_UID_ANNOTATION, PAUSED_ANNOTATION)
logger = logging.getLogger("takoform_operator")


@dataclass
class Runtime:
    """What every handler shares: the composition root fills it at start-up."""

    registry: Registry
    settings: Settings
    #: Hosts and grants (docs/tenancy.md): every request goes to the host they resolve.
    tenancy: TenancyBook
    writer: CrWriter
    metrics: Metrics
    #: Who owns which host resource (docs/tenancy.md, Bindings): the API server decides.
    bindings: BindingBook
    clock: Callable[[], datetime.datetime] = field(
        default=lambda: datetime.datetime.now(datetime.UTC)
    )
    #: Where sensitive outputs go (docs/tenancy.md, Connection Secrets); None: not written.
    secrets: SecretStore | None = None
    loops: ReconcileLoops | None = None
    #: The looks of this process's CRs and its memory of each (register makes it).
    steps: CrSteps | None = None


def _now(runtime: Runtime) -> str:
    return runtime.clock().strftime("%Y-%m-%dT%H:%M:%SZ")


async def _loop_step(runtime: Runtime, steps: CrSteps, body: Mapping[str, Any]) -> float | None:
    """One turn of a CR's loop (kube.loops): one look, whose every log line carries its id.
    The one failure path of the kopf layer."""
    uid = str(body["metadata"]["uid"])
    with look():
        # Who owns what is decided from the complete binding cache (kube.binding_watch).
        await runtime.bindings.listed.wait()
        started = runtime.clock()
        try:
            looked = await steps.look(body)
        except (StatusWriteFailed, BindingError) as exc:
            delay = steps.next_look(uid, None)
            logger.warning("%s; retrying in %.1f s", exc, delay, extra=fields(body))
            return delay
        except Exception:
            where = f"{body['metadata'].get('namespace')}/{body['metadata'].get('name')}"
            delay = steps.next_look(uid, None)
            logger.exception(
                "reconcile of %s failed; retrying in %.1f s", where, delay, extra=fields(body)
            )
            return delay
        if looked.outcome is not None:
            seconds = (runtime.clock() - started).total_seconds()
            runtime.metrics.reconciled(looked.body, looked.outcome, seconds)
            if looked.outcome.finalized:
                runtime.metrics.forget(looked.body)
        return looked.delay


def kept_of(settings: Settings) -> Kept:
    """The annotations and labels of a CR this process keeps: those it acts on, and those its
    shard selector reads (with sharding `hash`, the slot label too)."""
    selector = parse_selector(settings.shard_selector)
    labels = {r.key for r in selector.requirements}
    if settings.sharding == "hash":
        labels.add(SLOT_LABEL)
    return Kept(frozenset(WATCHED_ANNOTATIONS), frozenset(labels))


def cr_trimmer(registry: Registry, settings: Settings) -> Callable[[Any], Any]:
    """What this process keeps of a decoded object (kube.json_seam, kube.loops): a Form CR of
    the registry only what the operator reads (core.trim), any other object all of it."""
    lines = {(line.api_version, line.kind) for line in registry.lines()}
    kept = kept_of(settings)

    def trim(found: Any) -> Any:
        if isinstance(found, Mapping) and (found.get("apiVersion"), found.get("kind")) in lines:
            return trimmed(found, kept)
        return found

    return trim


def register(
    runtime: Runtime, kopf_registry: kopf.OperatorRegistry, shards: ShardMembership | None = None
) -> None:
    """One set of handlers per Form line of the build's registry. A CR the selector matches is
    reconciled here; with `shards` (sharding `hash`) only while the ring gives it to this
    replica (kube.shards)."""

    async def step(body: Mapping[str, Any]) -> float | None:
        return await _loop_step(runtime, steps, body)

    runtime.loops = ReconcileLoops(
        step,
        concurrency=runtime.settings.max_concurrent_reconciles,
        per_host=runtime.settings.host_slots(),
        fair=runtime.settings.reconcile_scheduling == "fair",
        default_host=runtime.tenancy.default_host,
        hosts=lambda: len(runtime.tenancy.hosts()),
        watched_annotations=WATCHED_ANNOTATIONS,
        keep=cr_trimmer(runtime.registry, runtime.settings),
        going_on=lambda uid: steps.going_on(uid),
        finalizer=FINALIZER,
        start_spread=runtime.settings.start_spread_seconds,
        start_rate=runtime.settings.host_requests_per_second,
    )
    loops = runtime.loops
    api = ApiCr(runtime.registry, runtime.settings, runtime.writer, loops, runtime.secrets)
    steps = runtime.steps = CrSteps(
        runtime.registry,
        runtime.tenancy,
        runtime.bindings,
        api,
        runtime.settings,
        lambda: _now(runtime),
        changed=loops.take_change,
    )
    runtime.metrics.watch_slots(loops.slots)

    def forget(body: Mapping[str, Any]) -> HeldStatus | None:
        """The CR is no longer this process's to look at: its metrics and memory go."""
        runtime.metrics.forget(body)
        return steps.leave(str(body["metadata"]["uid"]))

    def leave(body: Mapping[str, Any]) -> HeldStatus | None:
        """Every way out but a finished deletion: gone, relabelled away, another replica's."""
        loops.stop(str(body["metadata"]["uid"]))
        return forget(body)

    selector = BySelector(parse_selector(runtime.settings.shard_selector))
    # A replica stops (and drains) the loops it gives away itself, then forgets each CR.
    admission: Admission = (
        selector if shards is None else shards.attach(selector, loops, forget, api.set_slot_label)
    )

    async def watch(type: str | None, body: kopf.Body, **_: Any) -> None:
        uid = str(body.metadata.uid)
        # A CR that left this replica's watch (its slot label written) is not gone: admitted
        # as it now is. Only the replica serving a CR that is gone notes its binding Lost.
        if type == "DELETED" and not admission.left(body):
            ours = admission.gone(uid)
            held = leave(body)  # gone without our finalize (removed by hand)
            if ours:
                await _note_vanished(runtime, body, held)
            return
        match admission.admit(uid, body):
            case Verdict.SERVE:
                loops.seen(uid, body)
            case Verdict.STOP:
                pass  # another replica's share of the ring: admit stopped its loop, if any
            case Verdict.DROP:
                leave(body)  # another shard's CR (or one relabelled away from ours)

    async def cleanup(**_: Any) -> None:
        await loops.close()

    _register_tenancy(runtime.tenancy, loops, kopf_registry)
    _register_grant_status(runtime, kopf_registry)

    for line in runtime.registry.lines():
        group, version, plural = line.group, line.version, line.plural
        kopf.on.event(group, version, plural, id="watch", registry=kopf_registry)(watch)
    kopf.on.cleanup(registry=kopf_registry)(cleanup)


async def _note_vanished(
    runtime: Runtime, body: Mapping[str, Any], held: HeldStatus | None = None
) -> None:
    """A CR went while its binding still named it (its finalizer was removed by hand, or its
    namespace was force-deleted): the binding is Lost, remembering the host uid the CR's last
    status recorded (or the status write its last look held), and is handed to nobody
    automatically (core.ownership)."""
    uid = str(body["metadata"]["uid"])
    await runtime.bindings.listed.wait()
    binding = runtime.bindings.held_by(uid)
    if binding is None:
        return
    status = body.get("status") or {}
    if held is not None:
        status = merged_status(status, held.patch)
    try:
        await runtime.bindings.replace(binding.lost(status.get("uid")))
    except BindingError as exc:
        # Found again by the next CR that asks for the identity (its owner is proven gone).
        logger.warning(
            "TakoformBinding %s could not be marked Lost: %s",
            binding.name,
            exc,
            extra=fields(body),
        )
        return
    where = f"{body['metadata'].get('namespace')}/{body['metadata'].get('name')}"
    logger.warning(
        "%s went without releasing its host resource; TakoformBinding %s is Lost",
        where,
        binding.name,
        extra=fields(body),
    )


def wake_contenders(runtime: Runtime) -> None:
    """Bindings changed: wake the CRs contending for one of them, and those whose own binding
    somebody else changed or deleted (kube.binding_watch): an owner rebuilds a binding that
    vanished at once, not at its next poll. Nobody else: a change costs what it concerns."""
    owners, names = runtime.bindings.woken()
    if runtime.loops is not None and runtime.steps is not None:
        for uid in {*owners, *runtime.steps.contending.of(names)}:
            runtime.loops.wake(uid)


def _register_grant_status(runtime: Runtime, kopf_registry: kopf.OperatorRegistry) -> None:
    """Each TakoformSpaceGrant's status says whether its selector matches namespaces nobody
    named (core.tenancy.grant_status), written when what it says changes. An unreadable grant
    grants nothing (the index logs it) and gets no status."""

    async def event(body: kopf.Body, type: str | None, **_: Any) -> None:
        if type == "DELETED":
            return
        try:
            grant = grant_from_body(body)
        except InvalidPolicy:
            return
        metadata = body.get("metadata") or {}
        generation = int(metadata.get("generation") or 0)
        status = grant_status(grant, generation, body.get("status"), _now(runtime))
        if status is None:
            return
        name = str(metadata.get("name"))
        condition = status["conditions"][0]
        if condition["status"] == "True":
            logger.warning("TakoformSpaceGrant %s: %s", name, condition["message"])
        try:
            await runtime.writer.write(GROUP, VERSION, GRANT_PLURAL, "", name, status)
        except StatusWriteFailed as exc:
            logger.warning("status of TakoformSpaceGrant %s not written: %s", name, exc)

    kopf.on.event(GROUP, VERSION, GRANT_PLURAL, id="grant-status", registry=kopf_registry)(event)


def _register_tenancy(
    book: TenancyBook, loops: ReconcileLoops, kopf_registry: kopf.OperatorRegistry
) -> None:
    """Hosts, grants and namespace labels: indexed (complete before any CR is reconciled);
    a change that may decide a reconcile differently wakes the loops it may concern: a host
    or grant every CR's, a namespace's labels only its own CRs' (each wake of a Ready CR is a
    host read)."""

    def feed(
        observe: Callable[[Any], bool], wake: Callable[[str], None]
    ) -> Callable[..., Awaitable[dict[Any, Any]]]:
        # Async: kopf runs a sync handler in a worker thread, where waking a loop (which starts
        # a task on the event loop) fails with "no running event loop".
        async def index(body: kopf.Body, **_: Any) -> dict[Any, Any]:
            if observe(body):
                wake(str(body["metadata"]["name"]))
            return {}

        return index

    def gone(forget: Callable[[str], bool], wake: Callable[[str], None]) -> Callable[..., Any]:
        async def event(type: str | None, name: str, **_: Any) -> None:
            if type == "DELETED" and forget(name):
                wake(name)

        return event

    def everyone(_name: str) -> None:
        loops.wake_all()

    for group, version, plural, observe, forget, wake in (
        (GROUP, VERSION, HOST_PLURAL, book.observe_host, book.forget_host, everyone),
        (GROUP, VERSION, GRANT_PLURAL, book.observe_grant, book.forget_grant, everyone),
        ("", "v1", "namespaces", book.observe_namespace, book.forget_namespace,
         loops.wake_namespace),
    ):  # fmt: skip
        kopf.index(group, version, plural, id=f"policy-{plural}", registry=kopf_registry)(
            feed(observe, wake)
        )
        kopf.on.event(group, version, plural, id=f"gone-{plural}", registry=kopf_registry)(
            gone(forget, wake)
        )
