"""Prometheus metrics, created on an injectable registry. Per-resource series go away with the
resource (`forget`), so a deleted CR never leaves a stale Blocked alert behind.

The reconcile queue is read when scraped (`watch_slots`: kube.slots knows no metrics); host
requests are told by the host clients (`host_request`, the pool's observer).

`MetricsServer` serves them on /metrics; with a `review` (kube.metrics_access) only to a caller
whose bearer token the API server vouches for (core.metrics_access)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
)
from prometheus_client.exposition import choose_encoder

from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.metrics_access import METRICS_PATH, Verdict
from takoform_operator.core.outcome import NextLook, Outcome
from takoform_operator.core.state import DEFAULT_HOST
from takoform_operator.version import build_info

_HOST_TROUBLE = {Reason.HOST_UNAVAILABLE, Reason.HOST_REJECTED}
#: The labels of a per-resource series, in the order of its key (namespace, name, kind).
_PER_RESOURCE = ("namespace", "name", "kind")


class Slots(Protocol):
    """What the reconcile queue metrics read of kube.slots.FairSlots."""

    capacity: int

    @property
    def free(self) -> int: ...

    def waiting(self) -> int: ...


#: Reviews the Authorization header of a scrape (None: no header).
Review = Callable[[str | None], Awaitable[Verdict]]


async def serve(
    routes: Mapping[str, Callable[[web.Request], Awaitable[web.StreamResponse]]],
    host: str,
    port: int,
) -> web.AppRunner:
    """Answer GET on each of `routes` at host:port, without an access log (the metrics and
    health endpoints); the runner's cleanup stops it."""
    app = web.Application()
    for path, handler in routes.items():
        app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


class MetricsServer:
    """`registry` on GET /metrics; with `review`, only when it answers ALLOWED (otherwise its
    status, 401 with a WWW-Authenticate challenge). The exposition is built in a thread, as
    prometheus_client's own server does, so a large registry never holds the event loop."""

    def __init__(self, registry: CollectorRegistry, review: Review | None) -> None:
        self.registry = registry
        self._review = review
        self._runner: web.AppRunner | None = None

    async def _metrics(self, request: web.Request) -> web.Response:
        if self._review is not None:
            verdict = await self._review(request.headers.get("Authorization"))
            if verdict is not Verdict.ALLOWED:
                challenge = {"WWW-Authenticate": 'Bearer realm="metrics"'}
                return web.Response(
                    status=verdict.value,
                    text=verdict.text,
                    headers=challenge if verdict is Verdict.UNAUTHENTICATED else None,
                )
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = await asyncio.to_thread(encoder, self.registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def start(self, host: str, port: int) -> None:
        self._runner = await serve({METRICS_PATH: self._metrics}, host, port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


def _labels(body: Any) -> dict[str, str]:
    """A CR's per-resource labels; its namespace and kind interned: the series and the Ready
    counts keep them for as long as the CR is managed, one copy for all CRs of a namespace."""
    metadata = body["metadata"]
    return {
        "namespace": sys.intern(str(metadata.get("namespace", ""))),
        "name": str(metadata.get("name", "")),
        "kind": sys.intern(str(body.get("kind", ""))),
    }


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        if registry is None:
            registry = CollectorRegistry()
            # The standard process_*, python_gc_* and python_info series (memory, CPU, open
            # files, start time), as on the default registry.
            for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
                registry.register(collector)
        self.registry = registry

        # Every collector is created on `registry`.
        def gauge(name: str, documentation: str, labels: tuple[str, ...] = ()) -> Gauge:
            return Gauge(name, documentation, labels, registry=registry)

        def counter(name: str, documentation: str, labels: tuple[str, ...]) -> Counter:
            return Counter(name, documentation, labels, registry=registry)

        def histogram(
            name: str,
            documentation: str,
            labels: tuple[str, ...] = (),
            buckets: Sequence[float] = Histogram.DEFAULT_BUCKETS,
        ) -> Histogram:
            return Histogram(name, documentation, labels, registry=registry, buckets=buckets)

        self.build_info = gauge(
            "takoform_build_info",
            "Always 1: the operator's version and the Python and kopf it runs on, as labels.",
            ("version", "python", "kopf"),
        )
        self.build_info.labels(**build_info()).set(1)
        self.reconciles = counter(
            "takoform_reconciles",
            "Reconciles run, by kind and result (ready, pending, blocked, degraded, paused, "
            "put_off: the host budget's share spent, nothing sent; finalized).",
            ("kind", "result"),
        )
        self.duration = histogram(
            "takoform_reconcile_duration_seconds",
            "Wall time of one reconcile, host calls and the status write included.",
            ("kind",),
        )
        self.blocked = gauge(
            "takoform_resource_blocked",
            "1 while the resource is Blocked (uid mismatch, unsupported FormRef, name taken...).",
            (*_PER_RESOURCE, "reason"),
        )
        self.pending = gauge(
            "takoform_resource_pending_operation",
            "1 while the resource has a host operation accepted and not yet seen settled (no "
            "series otherwise).",
            _PER_RESOURCE,
        )
        self.degraded = gauge(
            "takoform_resource_degraded",
            "1 while the resource is Degraded (host unavailable or refusing), by reason.",
            (*_PER_RESOURCE, "reason"),
        )
        self.host_errors = counter(
            "takoform_host_errors",
            "Reconciles that ended on a host error, by reason and host (the TakoformHost's name).",
            ("kind", "reason", "host"),
        )
        self.unreadable = counter(
            "takoform_unreadable_objects",
            "Watch events the operator could not decode and skipped (kube.json_seam), by the "
            "kind, namespace and name recovered from the raw text (empty where none could be).",
            ("kind", "namespace", "name"),
        )
        self.leader = gauge(
            "takoform_leader",
            "1 while this replica holds the leader Lease and reconciles (always 1 without "
            "leader election).",
        )
        self.shard_members = gauge(
            "takoform_shard_members",
            "With sharding `hash`: the live members of the ring on this replica's last read of "
            "the shard Leases, itself included (0 without sharding).",
        )
        self.shard_unclaimed = gauge(
            "takoform_shard_unclaimed_crs",
            "With sharding `hash`: CRs of the selector no live member may reconcile on this "
            "replica's last read (none claims them, or two do during a handover).",
        )
        self.shard_serving = gauge(
            "takoform_shard_serving_crs",
            "With sharding `hash`: CRs this replica reconciles (its share of the ring).",
        )
        self.shard_watched = gauge(
            "takoform_shard_watched_crs",
            "With sharding `hash`: CRs this replica's watch delivers and it keeps, served or "
            "not (its share, and CRs about to be labelled or handed over).",
        )
        self.bindings_known = gauge(
            "takoform_bindings_known",
            "TakoformBindings this process keeps in its cache: every binding of the cluster, or "
            "with sharding `hash` those Bound to a CR of the slots it watches and those not Bound.",
        )
        self.loop_lag = histogram(
            "takoform_event_loop_lag_seconds",
            "How late the event loop woke a 0.1 s timer: time the process could not respond.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )
        self.loop_lag_max = gauge(
            "takoform_event_loop_lag_max_seconds",
            "The largest event-loop lag seen since the process started.",
        )
        self.queue_depth = gauge(
            "takoform_reconcile_queue_depth",
            "CRs due for a reconcile and waiting for a slot (the backlog).",
        )
        self.workers_active = gauge(
            "takoform_reconcile_workers_active",
            "Reconcile slots in use: reconciles running now.",
        )
        self.workers_max = gauge(
            "takoform_reconcile_workers_max",
            "Reconcile slots in all (TAKOFORM_MAX_CONCURRENT_RECONCILES).",
        )
        self.host_requests = counter(
            "takoform_host_requests",
            "Requests sent to hosts, retries included, by host, verb (read, operation, forms, "
            "space, create, update, delete) and code (the HTTP status, or error: no answer).",
            ("host", "verb", "code"),
        )
        self.host_request_duration = histogram(
            "takoform_host_request_duration_seconds",
            "Time from sending a host request to its answer read whole (or its failure).",
            ("host", "verb"),
        )
        self.resources = gauge(
            "takoform_resources",
            "Resources this replica manages, by kind and their Ready condition's status (True, "
            "False or Unknown: none yet), as of each one's last reconcile.",
            ("kind", "ready"),
        )
        self._ready: dict[tuple[str, str, str], str] = {}
        self._blocked_reasons: dict[tuple[str, str, str], str] = {}
        self._lag_max = 0.0
        self._degraded_reasons: dict[tuple[str, str, str], str] = {}

    def reconciled(self, body: Any, outcome: Outcome, seconds: float) -> None:
        labels = _labels(body)
        key = (labels["namespace"], labels["name"], labels["kind"])
        true = outcome.asserted()
        result = _result(outcome, true)
        self.reconciles.labels(kind=labels["kind"], result=result).inc()
        self.duration.labels(kind=labels["kind"]).observe(seconds)
        self._count_ready(key, _ready(body))
        if outcome.holds_conditions:
            return  # paused: nothing was observed, the series keep their last value
        for reason in _HOST_TROUBLE & set(true.values()):
            self.host_errors.labels(
                kind=labels["kind"], reason=str(reason), host=_host(body, outcome)
            ).inc()
        # An outage keeps the last known conditions, Blocked included (core.outcome.unavailable).
        if not outcome.keeps_last_known:
            self._mark(self.blocked, self._blocked_reasons, key, true.get(ConditionType.BLOCKED))
        self._mark(self.degraded, self._degraded_reasons, key, true.get(ConditionType.DEGRADED))
        if outcome.state.pending:
            self.pending.labels(*key).set(1)
        else:
            # No series while nothing is pending: a zero per settled resource is only load.
            with contextlib.suppress(KeyError):
                self.pending.remove(*key)

    def _mark(
        self,
        gauge: Gauge,
        reasons: dict[tuple[str, str, str], str],
        key: tuple[str, str, str],
        reason: Reason | None,
    ) -> None:
        """Make `reason` the one series of the resource `key` in `gauge` (None: no series);
        `reasons` holds the reason of every series `gauge` has."""
        previous = reasons.pop(key, None)
        if previous is not None:
            gauge.remove(*key, previous)
        if reason is not None:
            gauge.labels(*key, str(reason)).set(1)
            reasons[key] = str(reason)

    def _count_ready(self, key: tuple[str, str, str], ready: str | None) -> None:
        """Move the resource from its last Ready count to `ready` (None: out of every count)."""
        previous = self._ready.pop(key, None)
        if previous == ready:
            if ready is not None:
                self._ready[key] = ready
            return
        if previous is not None:
            self.resources.labels(kind=key[2], ready=previous).dec()
        if ready is not None:
            self.resources.labels(kind=key[2], ready=ready).inc()
            self._ready[key] = ready

    def watch_slots(self, slots: Slots) -> None:
        """Read the reconcile queue and slots from `slots` at every scrape."""
        self.queue_depth.set_function(slots.waiting)
        self.workers_active.set_function(lambda: slots.capacity - slots.free)
        self.workers_max.set(slots.capacity)

    def host_request(self, host: str, verb: str, code: str, seconds: float) -> None:
        """One request to `host` (host_client.pool.HostObserver)."""
        self.host_requests.labels(host=host, verb=verb, code=code).inc()
        self.host_request_duration.labels(host=host, verb=verb).observe(seconds)

    def loop_lagged(self, seconds: float) -> None:
        self.loop_lag.observe(seconds)
        if seconds > self._lag_max:
            self._lag_max = seconds
            self.loop_lag_max.set(seconds)

    def forget(self, body: Any) -> None:
        labels = _labels(body)
        key = (labels["namespace"], labels["name"], labels["kind"])
        self._count_ready(key, None)
        self._mark(self.blocked, self._blocked_reasons, key, None)
        self._mark(self.degraded, self._degraded_reasons, key, None)
        with contextlib.suppress(KeyError):
            self.pending.remove(*key)


def _ready(body: Any) -> str:
    """The status of the Ready condition the CR's status holds: True, False, else Unknown."""
    status = body.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and condition.get("type") == str(ConditionType.READY):
            value = condition.get("status")
            return value if value in ("True", "False") else "Unknown"
    return "Unknown"


def _host(body: Any, outcome: Outcome) -> str:
    """The host the reconcile talked to: the recorded one once claimed (core.plan.host_of), else
    the spec's hostRef, else the implicit host."""
    state = outcome.state
    if state.form_ref is not None:
        return state.host or DEFAULT_HOST
    spec = body.get("spec") or {}
    return str(spec.get("hostRef") or DEFAULT_HOST) if isinstance(spec, dict) else DEFAULT_HOST


def _result(outcome: Outcome, true: dict[ConditionType, Reason]) -> str:
    if outcome.finalized:
        return "finalized"
    if outcome.next_look is NextLook.LATER:
        return "put_off"
    if outcome.holds_conditions:
        return "paused"
    if ConditionType.BLOCKED in true:
        return "blocked"
    if ConditionType.DEGRADED in true:
        return "degraded"
    if ConditionType.READY in true:
        return "ready"
    return "pending"
