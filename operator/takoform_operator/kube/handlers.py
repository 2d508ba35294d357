"""kopf handlers: registration-thin. Watch events feed the binding cache (kube.bindings) and
the reconcile loops (kube.loops), which reconcile, delete and manage our finalizer. kopf keeps
nothing of ours in the CR (no progress or diff-base annotations): what to do is read from the CR
itself.

One failure path: every reconcile ends in an Outcome, and `next_delay` alone turns it into the
time of the next look. A failure (an outcome asking for NextLook.BACKOFF, a status write that did
not land, an unexpected error) is retried with the CR's exponential back-off (core.backoff); the
count of failures in a row is kept per CR and reset by the first look that does not fail.
The status is written right after each reconcile, before anything else. One write may wait:
the one recording an operation the host holds under our key, which the next look writes with
what it finds (usually the operation settled); if the process dies first, the next reconcile
replays the same idempotency key (docs/crash-safety.md, "The pending write, held for one look").
"""

from __future__ import annotations

import datetime
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import kopf

from takoform_operator.binding_port import BindingError
from takoform_operator.core.backoff import backoff_delay, doubled
from takoform_operator.core.conditions import ConditionType, Reason, transitions
from takoform_operator.core.connection import (
    ConnectionSecret,
    has_connection_secret,
    secret_name,
)
from takoform_operator.core.limits import event_message
from takoform_operator.core.outcome import Event, NextLook, Outcome
from takoform_operator.core.policy import PAUSED_ANNOTATION
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import Remedy
from takoform_operator.core.shard_round import Verdict
from takoform_operator.core.state import DeletionPolicy
from takoform_operator.core.tenancy import (
    GRANT_PLURAL,
    GROUP,
    HOST_PLURAL,
    VERSION,
    InvalidPolicy,
    connection_secret_refusal,
    grant_from_body,
    grant_status,
)
from takoform_operator.core.trim import Kept, trimmed
from takoform_operator.kube.bindings import BindingBook, Contenders
from takoform_operator.kube.connection_secrets import (
    SecretForbidden,
    SecretNotOurs,
    SecretStore,
    SecretWriteFailed,
    secret_name_of,
)
from takoform_operator.kube.cr_locks import CrLocks
from takoform_operator.kube.cr_reconcile import HeldStatus, reconcile_and_persist
from takoform_operator.kube.crs import ACCEPT_UID_ANNOTATION, log_fields, merged_status
from takoform_operator.kube.loops import ReconcileLoops, host_named
from takoform_operator.kube.selector import parse_selector
from takoform_operator.kube.shards import Admission, BySelector, ShardMembership
from takoform_operator.kube.status import CrWriter, StatusWriteFailed
from takoform_operator.kube.tenancy import TenancyBook
from takoform_operator.logs import look
from takoform_operator.metrics import Metrics
from takoform_operator.settings import Settings
from takoform_spec.identity import FormLine, plural_of

FINALIZER = "takoform.io/finalizer"
#: The annotations of a CR a reconcile acts on (kube.crs): a change of one wakes its loop, and
#: they are the only annotations a process keeps (core.trim).
WATCHED_ANNOTATIONS = (ACCEPT_UID_ANNOTATION, PAUSED_ANNOTATION)
_MIN_DELAY = 0.2
#: The first look at a just-accepted operation: most settle within a fraction of a second.
_FIRST_LOOK = 0.25
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
    #: Serialise each CR's reconciles (its loop's and its delete handler's).
    locks: CrLocks = field(default_factory=CrLocks)
    loops: ReconcileLoops | None = None
    #: CR uid -> the status write its last look held (kube.cr_reconcile.HeldStatus).
    held: dict[str, HeldStatus] = field(default_factory=dict)
    #: CR uid -> how many reconciles in a row found it waiting on a pending operation.
    pending_looks: dict[str, int] = field(default_factory=dict)
    #: CR uid -> how many looks in a row failed (the back-off's exponent).
    failures: dict[str, int] = field(default_factory=dict)
    #: The back-off's jitter, in [0, 1).
    random: Callable[[], float] = field(default=random.random)
    #: Where sensitive outputs go (docs/tenancy.md, Connection Secrets); None: not written.
    secrets: SecretStore | None = None
    #: CRs whose last look found their identity bound to another CR, by the binding's name:
    #: woken by a change of that binding only.
    contending: Contenders = field(default_factory=Contenders)
    #: CR uid -> the values last written into its connection Secret: scrubbed from host words
    #: (core.scrub) even when the look that meets them could not read the resource. Memory only.
    written_secrets: dict[str, frozenset[str]] = field(default_factory=dict)

    def forget(self, uid: str) -> HeldStatus | None:
        """The CR is gone: drop everything this process remembers of it. Returns the status
        write its last look held, if any (the only one of them worth a last look)."""
        self.pending_looks.pop(uid, None)
        self.failures.pop(uid, None)
        self.contending.drop(uid)
        self.written_secrets.pop(uid, None)
        return self.held.pop(uid, None)


def _now(runtime: Runtime) -> str:
    return runtime.clock().strftime("%Y-%m-%dT%H:%M:%SZ")


def next_delay(
    outcome: Outcome | None,
    settings: Settings,
    pending_looks: int = 0,
    failures: int = 0,
    jitter: Callable[[], float] = random.random,
) -> float:
    """Seconds until the next look, from what the outcome asked for (core.outcome.NextLook) and
    the settings. NOW: at once (0.2 s, never a busy loop). PENDING: fast first, then slower:
    0.25, 0.5, 1, 2, 4 s ... up to poll_pending_max_seconds (`pending_looks` is how many times
    in a row this CR was found waiting on one). POLL (and NEVER, should a finished CR still be
    around): poll_ready_seconds. A failure -- BACKOFF, or None: the look ended before an outcome
    was written -- waits the exponential back-off of the `failures` that came right before it,
    honouring the host's Retry-After, within [0.2 s, backoff_cap_seconds]."""
    if outcome is None or failed(outcome):
        delay = backoff_delay(
            failures,
            base=settings.backoff_base_seconds,
            cap=settings.backoff_cap_seconds,
            random=jitter,
            retry_after=outcome.retry_after if outcome is not None else None,
        )
        return max(delay, _MIN_DELAY)
    if outcome.next_look is NextLook.NOW:
        return _MIN_DELAY
    if outcome.next_look is NextLook.PENDING:
        pending = doubled(_FIRST_LOOK, pending_looks, settings.poll_pending_max_seconds)
        return min(pending, settings.poll_ready_seconds)
    return settings.poll_ready_seconds


def failed(outcome: Outcome) -> bool:
    """The look failed and is retried with back-off."""
    return outcome.next_look is NextLook.BACKOFF and not outcome.finalized


async def reconcile_cr(
    runtime: Runtime, body: Mapping[str, Any], *, deleting: bool = False
) -> tuple[Outcome, Mapping[str, Any]]:
    """Reconcile one CR and write its status; serialised per CR. Returns the outcome and the
    body as written. Raises StatusWriteFailed (and BindingError)."""
    uid = str(body["metadata"]["uid"])
    # Who owns what is decided from the complete binding cache (kube.binding_watch).
    await runtime.bindings.listed.wait()
    async with runtime.locks.held(uid):
        started = runtime.clock()
        persisted = await reconcile_and_persist(
            body,
            runtime.registry,
            runtime.tenancy,
            runtime.bindings,
            lambda cr, patch: _persist(runtime, cr, patch),
            now=_now(runtime),
            deleting=deleting,
            secrets=runtime.written_secrets.get(uid, frozenset()),
            write_connection=lambda cr, secret: write_connection_secret(runtime, cr, secret),
            held=runtime.held.pop(uid, None),
        )
        if persisted.held is not None:
            runtime.held[uid] = persisted.held
        result, body = persisted.result, persisted.body
        outcome = result.outcome
        runtime.metrics.reconciled(body, outcome, (runtime.clock() - started).total_seconds())
        if result.status is not None and runtime.loops is not None:
            runtime.loops.wrote(uid, body, persisted.expected)
        for event in _events_to_post(outcome, wrote=result.status is not None):
            _post(body, event.type, str(event.reason), event.message)
        runtime.contending.hold(uid, outcome.contends_for)
        return outcome, body


_WARNING_CONDITIONS = {"Blocked", "Degraded", "Drifted"}
#: Normal events of the core that only say an operation was accepted: the status says it too,
#: and one Event per CR per step would be most of the operator's API writes.
_QUIET_REASONS = {"CreatePending", "UpdatePending", "DeletePending"}


def _events_to_post(outcome: Outcome, *, wrote: bool) -> list[Event]:
    """The core's events worth an Event, each posted once. A Warning that states a condition
    this outcome sets is posted as that condition's transition (_post_transitions), so a
    repeated outcome -- every reconcile of a host outage -- posts nothing again. Any other
    Warning goes with the status write that records what it reports: an outcome that changes
    nothing writes nothing and posts nothing."""
    stated = {(str(c.reason), c.message) for c in outcome.conditions if c.status}
    chosen = []
    for event in outcome.events:
        if event.type == "Normal":
            if event.reason not in _QUIET_REASONS:
                chosen.append(event)
        elif wrote and (str(event.reason), event.message) not in stated:
            chosen.append(event)
    return chosen


def _post(body: Mapping[str, Any], level: str, reason: str, message: str) -> None:
    """Every Event of a Form CR goes out here, its message cut to the Event cap (saying so)."""
    raw = cast(kopf.RawBody, dict(body))
    kopf.event(kopf.Body(raw), type=level, reason=reason, message=event_message(message))


def _post_transitions(
    body: Mapping[str, Any], before: list[dict[str, Any]] | None, after: list[dict[str, Any]]
) -> None:
    """Events for the transitions a human acts on: a Warning when trouble starts, a Normal
    Event when it clears, one Normal Event when a pause starts or ends. Becoming Ready is in
    the status and needs no Event."""
    was_paused, now_paused = _pause_of(before), _pause_of(after)
    if now_paused is not None and was_paused is None:
        _post(body, "Normal", str(Reason.PAUSED), now_paused)
    elif was_paused is not None and now_paused is None:
        _post(body, "Normal", str(Reason.RESUMED), "reconciliation resumed: the pause is over")
    for condition in transitions(before, after):
        kind, true = condition["type"], condition["status"] == "True"
        if kind in _WARNING_CONDITIONS:
            if true:
                _post(body, "Warning", str(condition["reason"]), condition["message"])
            else:
                _post(body, "Normal", str(condition["reason"]), f"{kind} cleared")


def _pause_of(conditions: list[dict[str, Any]] | None) -> str | None:
    """The message of the condition reporting a pause (core.policy), or None."""
    for condition in conditions or ():
        if condition.get("type") == ConditionType.RECONCILING and (
            condition.get("reason") == Reason.PAUSED
        ):
            return str(condition.get("message") or "")
    return None


def _where(body: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    """(group, version, plural, namespace, name) of a CR body."""
    group, version = str(body["apiVersion"]).split("/", 1)
    metadata = body["metadata"]
    plural = plural_of(str(body["kind"]))
    return group, version, plural, str(metadata["namespace"]), str(metadata["name"])


async def _persist(
    runtime: Runtime, body: Mapping[str, Any], patch: dict[str, Any]
) -> Mapping[str, Any]:
    written = await runtime.writer.write(*_where(body), patch)
    # Events only for what landed: a lost write is retried and posts them then.
    if "conditions" in patch:
        _post_transitions(body, (body.get("status") or {}).get("conditions"), patch["conditions"])
    return written


async def _loop_step(runtime: Runtime, body: Mapping[str, Any]) -> float | None:
    """One turn of a CR's loop (kube.loops): one look, whose every log line carries its id."""
    with look():
        return await _look(runtime, body)


async def _look(runtime: Runtime, body: Mapping[str, Any]) -> float | None:
    """The one failure path of the kopf layer."""
    metadata = body.get("metadata") or {}
    try:
        if metadata.get("deletionTimestamp") is not None:
            return await _delete_step(runtime, body)
        if FINALIZER not in (metadata.get("finalizers") or ()):
            # On before anything is sent: a deletion can never miss a create of ours.
            body = await _set_finalizer(runtime, body, present=True)
        outcome, _ = await reconcile_cr(runtime, body)
    except (StatusWriteFailed, BindingError) as exc:
        delay = _delay(runtime, str(metadata.get("uid")), None)
        logger.warning("%s; retrying in %.1f s", exc, delay, extra=_fields(body))
        return delay
    except Exception:
        where = f"{metadata.get('namespace')}/{metadata.get('name')}"
        delay = _delay(runtime, str(metadata.get("uid")), None)
        logger.exception(
            "reconcile of %s failed; retrying in %.1f s", where, delay, extra=_fields(body)
        )
        return delay
    return _delay(runtime, str(metadata.get("uid")), outcome)


def _fields(body: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The CR fields of a log line about `body` (takoform_operator.logs)."""
    return log_fields(body, host_named(body))


def _delay(runtime: Runtime, uid: str, outcome: Outcome | None) -> float:
    """The next look of CR `uid` after `outcome` (None: the look failed before one was
    written); counts pending looks and failures in a row, each reset by any other look."""
    looks = runtime.pending_looks.pop(uid, 0)
    failures = runtime.failures.pop(uid, 0)
    if outcome is not None and outcome.next_look is NextLook.PENDING:
        runtime.pending_looks[uid] = looks + 1
    if outcome is None or failed(outcome):
        runtime.failures[uid] = failures + 1
    return next_delay(outcome, runtime.settings, looks, failures, runtime.random)


async def _delete_step(runtime: Runtime, body: Mapping[str, Any]) -> float | None:
    finalizers = list(body["metadata"].get("finalizers") or ())
    if FINALIZER not in finalizers:
        return None  # released already (or never ours to hold)
    outcome, body = await reconcile_cr(runtime, body, deleting=True)
    if not outcome.finalized:
        return _delay(runtime, str(body["metadata"]["uid"]), outcome)
    for event in outcome.events:
        _post(body, event.type, str(event.reason), event.message)
    await let_go_of_connection_secret(runtime, body)
    await _set_finalizer(runtime, body, present=False)
    uid = str(body["metadata"]["uid"])
    runtime.metrics.forget(body)
    runtime.forget(uid)
    return None


async def _set_finalizer(
    runtime: Runtime, body: Mapping[str, Any], present: bool
) -> Mapping[str, Any]:
    """Put our finalizer on (`present`) or take it off; returns the body as the API server
    answered the write."""
    metadata = body["metadata"]
    seen = list(metadata.get("finalizers") or ())
    resource_version = str(metadata.get("resourceVersion", ""))
    written = await runtime.writer.set_finalizer(
        _where(body), FINALIZER, present, seen, resource_version
    )
    finalizers = [f for f in seen if f != FINALIZER] + ([FINALIZER] if present else [])
    version = (written.get("metadata") or {}).get("resourceVersion")
    expected = {
        **body,
        "metadata": {**metadata, "finalizers": finalizers, "resourceVersion": version},
    }
    if runtime.loops is not None:
        runtime.loops.wrote(str(metadata["uid"]), written, expected)
    return written


async def write_connection_secret(
    runtime: Runtime, body: Mapping[str, Any], secret: ConnectionSecret
) -> tuple[str, tuple[Remedy, ...]] | None:
    """The CR's connection Secret holds what the host reported (a write only when it
    differs). A Secret the operator may not reach (403: its Secret rights are not bound in that
    namespace) returns the message and remedies of the CR's condition. A Secret that is not
    ours is left alone, with a Warning Event; any other write that did not land is a Warning
    too, and is tried again at the next look, not at once: the resource itself is fine."""
    if runtime.secrets is None:
        return None
    uid = str(body["metadata"]["uid"])
    runtime.written_secrets[uid] = frozenset(secret.data.values())
    try:
        if await runtime.secrets.apply(body, secret):
            logger.info(
                "connection Secret %s/%s written",
                secret.namespace,
                secret.name,
                extra=_fields(body),
            )
    except SecretForbidden as exc:
        logger.warning("%s", exc, extra=_fields(body))
        return connection_secret_refusal(
            secret.namespace,
            secret.name,
            exc.answer,
            runtime.settings.connection_secret_role,
            runtime.settings.service_account,
        )
    except SecretNotOurs as exc:
        logger.warning("%s", exc, extra=_fields(body))
        _post(body, "Warning", "ConnectionSecretNotOurs", str(exc))
    except SecretWriteFailed as exc:
        logger.warning("%s; tried again at the next look", exc, extra=_fields(body))
        _post(body, "Warning", "ConnectionSecretNotWritten", str(exc))
    return None


async def let_go_of_connection_secret(runtime: Runtime, body: Mapping[str, Any]) -> None:
    """Before the finalizer goes: with deletionPolicy Orphan the Secret loses its
    ownerReference and stays (the host resource and its credentials live on). Otherwise the
    garbage collector deletes it with the CR (the operator has no delete right on Secrets)."""
    metadata = body["metadata"]
    if runtime.secrets is None or not has_connection_secret(
        runtime.registry, FormLine(str(body["apiVersion"]), str(body["kind"]))
    ):
        return
    name = secret_name_of(body, secret_name(str(metadata["name"]), None))
    namespace = str(metadata["namespace"])
    if (body.get("spec") or {}).get("deletionPolicy") == DeletionPolicy.ORPHAN:
        await runtime.secrets.release(body, namespace, name)


def kept_of(settings: Settings) -> Kept:
    """The annotations and labels of a CR this process keeps: those it acts on, and those its
    shard selector reads."""
    selector = parse_selector(settings.shard_selector)
    return Kept(frozenset(WATCHED_ANNOTATIONS), frozenset(r.key for r in selector.requirements))


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
        return await _loop_step(runtime, body)

    runtime.loops = ReconcileLoops(
        step,
        concurrency=runtime.settings.max_concurrent_reconciles,
        per_host=runtime.settings.host_slots(),
        fair=runtime.settings.reconcile_scheduling == "fair",
        default_host=runtime.tenancy.default_host,
        hosts=lambda: len(runtime.tenancy.hosts()),
        watched_annotations=WATCHED_ANNOTATIONS,
        keep=cr_trimmer(runtime.registry, runtime.settings),
        finalizer=FINALIZER,
    )
    loops = runtime.loops
    runtime.metrics.watch_slots(loops.slots)
    selector = BySelector(parse_selector(runtime.settings.shard_selector))
    admission: Admission = (
        selector if shards is None else shards.attach(selector, loops, runtime.metrics.forget)
    )

    async def watch(type: str | None, body: kopf.Body, **_: Any) -> None:
        uid = str(body.metadata.uid)
        if type == "DELETED":
            # Only the replica serving the CR notes its binding Lost.
            ours = admission.gone(uid)
            loops.stop(uid)
            held = runtime.forget(uid)
            runtime.metrics.forget(body)  # gone without our finalize (removed by hand)
            if ours:
                await _note_vanished(runtime, body, held)
            return
        match admission.admit(uid, body):
            case Verdict.SERVE:
                loops.seen(uid, body)
            case Verdict.STOP:
                # Another replica's share of the ring (its loop here, if any, was stopped).
                runtime.held.pop(uid, None)
            case Verdict.DROP:
                # Another shard's CR (or one relabelled away from ours): no loop here.
                loops.stop(uid)
                runtime.held.pop(uid, None)
                runtime.metrics.forget(body)

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
            extra=_fields(body),
        )
        return
    where = f"{body['metadata'].get('namespace')}/{body['metadata'].get('name')}"
    logger.warning(
        "%s went without releasing its host resource; TakoformBinding %s is Lost",
        where,
        binding.name,
        extra=_fields(body),
    )


def wake_contenders(runtime: Runtime) -> None:
    """Bindings changed: wake the CRs contending for one of them, and those whose own binding
    somebody else changed or deleted (kube.binding_watch): an owner rebuilds a binding that
    vanished at once, not at its next poll. Nobody else: a change costs what it concerns."""
    owners, names = runtime.bindings.woken()
    if runtime.loops is not None:
        for uid in {*owners, *runtime.contending.of(names)}:
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
