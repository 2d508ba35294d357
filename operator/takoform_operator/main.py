"""The composition root: real adapters wired around the core, then kopf runs the handlers."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import functools
import gc
import logging
import os
import signal
import socket
import threading
from collections.abc import Mapping
from typing import Any, cast

from takoform_operator.core.host_budget import HostBudget
from takoform_operator.core.state import DEFAULT_HOST
from takoform_operator.core.tenancy import SecretKeyRef, implicit_host_refusal
from takoform_operator.health import Health
from takoform_operator.host_client.client import TokenSource
from takoform_operator.host_client.pool import Endpoint, HostPool, SecretReader, SecretToken
from takoform_operator.host_client.token_file import FileToken
from takoform_operator.kube.api import KubeApi
from takoform_operator.kube.binding_watch import BindingWatch
from takoform_operator.kube.bindings import LIST_PAGE, BindingBook
from takoform_operator.kube.client_config import load_connection
from takoform_operator.kube.connection_secrets import HttpSecretStore
from takoform_operator.kube.discovery import wait_until_served, watched_kinds
from takoform_operator.kube.echoes import OwnWrites
from takoform_operator.kube.handlers import Runtime, cr_trimmer, register, wake_contenders
from takoform_operator.kube.host_status import HostStatusWriter, refresh_forever
from takoform_operator.kube.index_readiness import install as install_index_readiness
from takoform_operator.kube.json_seam import WatchRestarts
from takoform_operator.kube.json_seam import install as install_json_seam
from takoform_operator.kube.kopf_alone import kopf
from takoform_operator.kube.kopf_memories import Memories
from takoform_operator.kube.leader import (
    LeaderElector,
    LeaseConfig,
    LeaseTiming,
    LostLease,
)
from takoform_operator.kube.metrics_access import ApiServerReviews
from takoform_operator.kube.secrets import ApiSecretReader
from takoform_operator.kube.shard_leases import ShardConfig, ShardLeases
from takoform_operator.kube.shards import ShardMembership
from takoform_operator.kube.status import CrWriter
from takoform_operator.kube.tenancy import TenancyBook
from takoform_operator.logs import configure as configure_logging
from takoform_operator.metrics import Metrics, MetricsServer
from takoform_operator.registry_data import load_registry
from takoform_operator.settings import Settings
from takoform_operator.version import build_info, describe

logger = logging.getLogger("takoform_operator")


#: How long kopf keeps an object's worker, and its last event, after the event was handled.
WORKER_IDLE_SECONDS = 0.1


class NoDiffBase(kopf.DiffBaseStorage):
    """kopf keeps no diff-base: it calls no change handlers here (the loops read the CR
    itself), yet builds one per watch event (a deep copy of the whole body) and compares it
    with the stored one. This one builds and finds the same empty essence, so nothing ever
    differs, and stores nothing; an annotation an earlier release left is ignored."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return cast(kopf.BodyEssence, {})

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        return cast(kopf.BodyEssence, {})

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        return None


#: Who signs the operator's Events (reportingComponent, source.component) and how they are named.
EVENT_COMPONENT = "takoform-operator"


def kopf_settings(namespace: str | None, instance: str) -> kopf.OperatorSettings:
    """kopf's settings; `instance` (this replica's identity: its pod name in the chart) signs
    the Events as their reportingInstance."""
    settings = kopf.OperatorSettings()
    if namespace is not None:
        # One exact namespace: nothing to discover, and a namespaced Role cannot list namespaces.
        settings.scanning.disabled = True
    # kopf only watches, indexes and posts events; the reconcile loops own FINALIZER. kopf
    # removes its own finalizer from objects whose handlers do not need one, so it gets a
    # name of its own (never ours), under our domain like its annotations.
    settings.persistence.finalizer = "kopf.takoform.io/unused"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="takoform.io")
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.WARNING  # our own Events say what matters
    # Signed as this operator, not kopf's defaults (kopf / dev / kopf-event-*): event exporters
    # and `kubectl events` tell them from any other kopf operator's.
    settings.posting.reporting_component = EVENT_COMPONENT
    settings.posting.reporting_instance = instance
    settings.posting.event_name_prefix = f"{EVENT_COMPONENT}-"
    # kopf starts a worker for each listed object without yielding to the event loop, so one
    # unpaged list of every CR (or binding) held the loop for seconds at start; a page is now
    # the most it holds at once.
    settings.watching.chunk_size = LIST_PAGE
    # kopf's worker for an object holds the object's last event until it has been idle this
    # long; at 5 s (kopf's default) a start's listing was every CR's body held at once. A CR's
    # events are rare here (the echoes of our own writes never reach kopf), so a worker per
    # event costs little.
    settings.queueing.idle_timeout = WORKER_IDLE_SECONDS
    return settings


async def run(settings: Settings, stop: threading.Event | None = None) -> None:
    registry = load_registry()
    metrics = Metrics()
    echoes = OwnWrites()
    # A Form CR is cut to what the operator reads as soon as it is decoded (core.trim): the
    # watch's events and list pages (kube.json_seam) and the answers to the writes.
    trim = cr_trimmer(registry, settings)
    # One connection per reconcile slot, and one for the TakoformBinding watch.
    writer = CrWriter(
        max_connections=settings.max_concurrent_reconciles + 1, echoes=echoes, keep=trim
    )
    writer.connect(load_connection())  # at once: an unusable configuration is said before all

    # Secrets, reviews, discovery and host status on a pool of their own, and the Leases on
    # another: a Lease is renewed on time however busy the reconciles or the hosts keep the rest.
    def kube_api() -> KubeApi:
        return KubeApi(lambda: writer.connection, log_in=lambda: writer.connect(load_connection()))

    api, leases = kube_api(), kube_api()
    reviews = (
        ApiServerReviews(api)
        if settings.metrics_port and settings.metrics_auth == "kubernetes"
        else None
    )
    metrics_server = MetricsServer(metrics.registry, reviews)
    if settings.metrics_port:
        await metrics_server.start(settings.bind_address, settings.metrics_port)
        logger.info(
            "metrics on %s:%d/metrics, %s",
            settings.bind_address,
            settings.metrics_port,
            "to callers the API server allows (TokenReview, SubjectAccessReview)"
            if reviews
            else "to anyone who reaches the port (TAKOFORM_METRICS_AUTH=none)",
        )
    health = Health(watch_failure_seconds=settings.watch_failure_seconds)
    shards = _membership(settings, metrics, leases) if settings.sharding == "hash" else None
    restarts = (
        WatchRestarts((line.group, line.version, line.plural) for line in registry.lines())
        if shards is not None
        else None
    )
    lines = {(line.api_version, line.kind) for line in registry.lines()}

    def form_cr(body: Any) -> bool:
        return isinstance(body, Mapping) and (body.get("apiVersion"), body.get("kind")) in lines

    def another_replicas(membership: ShardMembership, type: str, body: Any) -> bool:
        return form_cr(body) and membership.passes_over(type, body)

    install_json_seam(
        functools.partial(_unreadable, metrics),
        health.requested,
        echoes.echo,
        trim,
        restarts,
        None if shards is None else functools.partial(another_replicas, shards),
    )
    install_index_readiness()
    if settings.health_port:
        await health.start(settings.bind_address, settings.health_port)
        logger.info("health on %s:%d/healthz,/readyz", settings.bind_address, settings.health_port)
    secrets_namespace = settings.secrets_namespace()
    reader = ApiSecretReader(secrets_namespace, api)
    pool = HostPool(
        reader,
        refresh_seconds=settings.token_refresh_seconds,
        read_retries=settings.host_read_retries,
        max_connections=settings.host_max_connections,
        implicit=implicit_endpoint(settings, reader) if settings.implicit_host else None,
        implicit_refusal=implicit_host_refusal(settings.host_url, settings.host_insecure),
        observe=metrics.host_request,
        budget=HostBudget(settings.host_requests_per_second, settings.host_request_burst)
        if settings.host_requests_per_second is not None
        else None,
    )
    book = TenancyBook(pool)
    runtime = Runtime(
        registry=registry,
        settings=settings,
        writer=writer,
        metrics=metrics,
        bindings=BindingBook(writer.client, slots=shards),
        tenancy=book,
        secrets=HttpSecretStore(writer.client),
    )
    kopf_registry = kopf.OperatorRegistry()
    kopf.on.login(registry=kopf_registry)(functools.partial(_login, writer))
    register(runtime, kopf_registry, shards)
    refresher = asyncio.create_task(
        refresh_forever(
            pool,
            lambda: book.host_generations,
            registry,
            HostStatusWriter(api),
            settings.host_status_seconds,
        ),
        name="host status",
    )
    implicit = f"; implicit host 'default' at {settings.host_url}" if settings.implicit_host else ""
    logger.info(
        "managing %d Form lines; host token Secrets in namespace %s%s",
        len(registry.lines()),
        secrets_namespace,
        implicit,
    )

    binding_watch = BindingWatch(
        runtime.bindings,
        writer.client,
        lambda: wake_contenders(runtime),
        requested=health.requested,
        unreadable=functools.partial(_unreadable_binding, metrics),
        page=LIST_PAGE,
    )
    metrics.bindings_known.set_function(lambda: len(runtime.bindings))
    if shards is not None:
        # The bindings are listed and watched by the slots this replica watches, as its CRs.
        shards.steer_bindings = binding_watch.steer

    async def watch_bindings() -> None:
        await runtime.bindings.introduce()  # before any binding is written: its guardian
        guarding = asyncio.create_task(runtime.bindings.at_start(), name="bindings at start")
        try:
            await binding_watch.run()
        finally:
            guarding.cancel()

    async def lead(stop_flag: asyncio.Event | threading.Event | None) -> None:
        # kopf resolves the watched kinds once: none may be missing for a moment (kube.discovery).
        await wait_until_served(api, watched_kinds(registry))
        operator_settings = kopf_settings(settings.namespace, _identity(settings)[1])
        if shards is not None and restarts is not None:
            # The Form CRs are listed and watched by the slots this replica may serve, and so
            # are the bindings: neither is listed whole first.
            forms = [(line.group, line.plural) for line in registry.lines()]
            await shards.steer(operator_settings.watching.label_selectors, forms, restarts)
        bindings = asyncio.create_task(watch_bindings(), name="binding watch")
        try:
            await kopf.operator(
                registry=kopf_registry,
                settings=operator_settings,
                standalone=True,
                clusterwide=settings.namespace is None,
                namespaces=[settings.namespace] if settings.namespace else (),
                stop_flag=stop_flag,
                memories=Memories(form_cr),
            )
        finally:
            bindings.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await bindings

    # What exists now (modules, classes, settings) lives as long as the process: keep it out of
    # every full collection, whose pause grows with the objects it scans (docs/performance.md).
    gc.collect()
    gc.freeze()
    health.ready = True
    lag_watch = asyncio.create_task(watch_loop_lag(metrics))
    releasing = asyncio.create_task(release_free_memory(), name="release free memory")
    try:
        if shards is not None:
            metrics.leader.set(1)
            await _shard_and_lead(shards, lead, stop)
            return
        if not settings.leader_election:
            metrics.leader.set(1)
            await lead(stop)
            return
        await _elect_and_lead(settings, lead, health, metrics, leases)
    finally:
        lag_watch.cancel()
        releasing.cancel()
        refresher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await refresher
        await writer.close()
        await api.close()
        await leases.close()
        await pool.aclose()
        await health.stop()
        await metrics_server.stop()
        logger.info(
            "watch events: %d, of which %d echoes of our own writes, dropped unread",
            echoes.lines,
            echoes.dropped,
        )
        if shards is not None:
            logger.info("watch events of other replicas' CRs passed over: %d", shards.passed_over)


def _unreadable(metrics: Metrics, found: dict[str, str], why: str) -> None:
    """A watch line kopf cannot be given (kube.json_seam): one log line and the metric name the
    object as far as it could be recovered; every other object is reconciled as before."""
    labels = {key: found.get(key, "") for key in ("kind", "namespace", "name")}
    logger.error(
        "a watch event could not be decoded and was skipped (%s %s/%s): %s; the object is "
        "not reconciled until it can be read",
        labels["kind"] or "?",
        labels["namespace"],
        labels["name"] or "?",
        why,
        extra={"cr": labels},
    )
    metrics.unreadable.labels(**labels).inc()


def _unreadable_binding(metrics: Metrics, why: str) -> None:
    _unreadable(metrics, {"kind": "TakoformBinding"}, why)


async def watch_loop_lag(metrics: Metrics, interval: float = 0.1) -> None:
    """Measure how late the event loop runs a short timer (a busy loop answers nobody)."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(interval)
        metrics.loop_lagged(max(0.0, loop.time() - started - interval))


#: How often the C allocator's free memory is given back (release_free_memory).
RELEASE_SECONDS = 10.0
#: glibc's defaults, made fixed (tune_c_heap): a buffer this large or larger that the heap has
#: no room for gets a mapping of its own, and free memory above twice that at the heap's top
#: goes back at once. mallopt's parameters M_MMAP_THRESHOLD and M_TRIM_THRESHOLD (malloc.h).
MMAP_THRESHOLD, TRIM_THRESHOLD = 64 * 1024, 128 * 1024
M_MMAP_THRESHOLD, M_TRIM_THRESHOLD = -3, -1


def tune_c_heap() -> None:
    """Keep glibc's thresholds where its defaults start. By itself glibc raises them to the
    largest buffer freed so far (up to 32 MiB, and twice that kept free at the heap's top), so
    after the first large list page every later page and large watch line comes from the heap,
    where what is freed stays resident between the small objects kept beside it: 10,000 CRs
    with 100 KB of labels each peaked at 177 MiB, against 134 with the thresholds fixed
    (docs/performance.md). Nothing to do where the C library has no mallopt (musl)."""
    tune = getattr(ctypes.CDLL(None), "mallopt", None)  # the C library Python runs on
    if tune is not None:
        tune(M_MMAP_THRESHOLD, MMAP_THRESHOLD)
        tune(M_TRIM_THRESHOLD, TRIM_THRESHOLD)


async def release_free_memory(interval: float = RELEASE_SECONDS) -> None:
    """Give the C allocator's free memory back to the system every `interval` seconds. A
    start's burst (every CR listed, decoded, trimmed and reconciled at once) leaves glibc's heap
    with megabytes freed but still resident: glibc returns only the top of its heap by itself,
    malloc_trim every free page within it. Nothing to do where the C library has no malloc_trim
    (musl)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return
    while True:
        await asyncio.sleep(interval)
        await asyncio.to_thread(trim, 0)


def _identity(settings: Settings) -> tuple[str, str]:
    """(namespace of the Lease, this replica's identity)."""
    namespace = settings.lease_namespace or os.environ.get("POD_NAMESPACE") or "default"
    return namespace, settings.pod_name or f"{socket.gethostname()}-{os.getpid()}"


def _timing(settings: Settings) -> LeaseTiming:
    return LeaseTiming(
        settings.lease_seconds, settings.lease_renew_deadline_seconds, settings.lease_retry_seconds
    )


def _membership(settings: Settings, metrics: Metrics, api: KubeApi) -> ShardMembership:
    namespace, identity = _identity(settings)

    def observe(membership: ShardMembership) -> None:
        member = membership.member
        metrics.shard_members.set(len(member.members))
        metrics.shard_unclaimed.set(member.unclaimed())
        metrics.shard_serving.set(len(member.serving))
        metrics.shard_watched.set(len(membership.bodies))

    config = ShardConfig(
        namespace=namespace,
        ring=settings.lease_name,
        identity=identity,
        key=settings.shard_key,
        timing=_timing(settings),
    )
    return ShardMembership(ShardLeases(config, api), observe=observe)


async def _shard_and_lead(shards: ShardMembership, lead: Any, stop: threading.Event | None) -> None:
    """Every replica runs kopf; the membership loop decides which CRs it reconciles. A
    membership that lost its Lease ends the process (LostLease); a clean stop deletes the
    Lease after every reconcile has ended, so the others take over at their next round."""
    membership = asyncio.create_task(shards.run(), name="shard membership")
    operator = asyncio.create_task(lead(stop), name="kopf")
    try:
        done, _ = await asyncio.wait({membership, operator}, return_when=asyncio.FIRST_COMPLETED)
        if membership in done:
            operator.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await operator
            membership.result()  # raises LostLease
        else:
            operator.result()
    finally:
        for task in (membership, operator):
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if not shards.lost:
            await shards.leases.delete()


async def _elect_and_lead(
    settings: Settings, lead: Any, health: Health, metrics: Metrics, api: KubeApi
) -> None:
    """Reconcile only while holding the Lease; SIGTERM while waiting for it just ends."""
    namespace, identity = _identity(settings)
    elector = LeaderElector(
        LeaseConfig(namespace, settings.lease_name, identity, _timing(settings)), api
    )

    def changed(leader: bool) -> None:
        health.leader = leader
        metrics.leader.set(1 if leader else 0)

    # Until kopf runs (it installs its own handlers), SIGTERM/SIGINT end the wait.
    main_task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        if main_task is not None and threading.current_thread() is threading.main_thread():
            loop.add_signal_handler(sig, main_task.cancel)
    try:
        await elector.run(lead, changed)
    except asyncio.CancelledError:
        logger.info("stopped while waiting for the lease")
    finally:
        await elector.release()


def implicit_endpoint(settings: Settings, reader: SecretReader | None = None) -> Endpoint:
    """Host `default` as the settings configure it (the client itself knows no settings). A
    token Secret (TAKOFORM_HOST_TOKEN_SECRET) is read like a TakoformHost's: by name, re-read on
    the refresh interval and after a 401, used only when opted in for host `default` at
    TAKOFORM_HOST_URL."""
    verify, cert = settings.host_tls()
    token: TokenSource | str | None
    if settings.host_token_secret is not None and reader is not None:
        ref = SecretKeyRef(settings.host_token_secret, settings.host_token_secret_key)
        token = SecretToken(
            reader, ref, DEFAULT_HOST, settings.host_url, settings.token_refresh_seconds
        )
    elif settings.host_token_file is not None:
        # Re-read on change: a mounted Secret is updated in place.
        token = FileToken(settings.host_token_file)
    else:
        token = settings.token()
    return Endpoint(settings.host_url, token, settings.host_timeout_seconds, verify, cert)


async def _login(writer: CrWriter, **_: Any) -> kopf.ConnectionInfo:
    """kopf's login, at its start and after a 401: the configuration read again (a rotated
    token), for kopf's watches and the operator's own requests alike."""
    connection = load_connection()
    writer.connect(connection)
    return kopf.ConnectionInfo(
        server=connection.server,
        ca_path=connection.ca_path,
        ca_data=connection.ca_data,
        insecure=connection.insecure,
        token=connection.token,
        certificate_path=connection.certificate_path,
        certificate_data=connection.certificate_data,
        private_key_path=connection.private_key_path,
        private_key_data=connection.private_key_data,
    )


def main(settings: Settings) -> int:
    configure_logging(settings.log_format, settings.log_level)
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per host request is noise
    logging.getLogger("kopf.objects").setLevel(logging.WARNING)  # one line per watch event
    logger.info("%s starting", describe(), extra=build_info())
    tune_c_heap()
    try:
        asyncio.run(run(settings))
    except LostLease:
        return 1  # restarted by the kubelet; another replica leads meanwhile
    return 0
