"""Active-active shards (TAKOFORM_SHARDING=hash): the membership loop around core.shard_ring.

Every replica keeps a Lease of its own, `<ring>-shard-<identity>` in the operator's namespace,
labelled `takoform.io/shard-ring=<ring>` so that the members find each other. Every retry
period it writes its Lease (a renewal carrying its published view in the annotation
`takoform.io/shard-view`), then lists the ring's Leases with a quorum read (never a cache),
and from that read decides which CRs it may act on (core.shard_ring, the claim rule). When the
live members differ from its published view it first stops and drains the CRs the new view
takes away from it, then publishes the new view. CRs that became its own get a loop at once,
from the last body the watch delivered (kept here for every CR of the selector, served or
not), without waiting for their next watch event.

A replica whose Lease writes have failed for its renew deadline raises LostLease: the process
stops acting on everything at once and exits (the kubelet restarts it), before any other
replica may take its CRs. A replica that stops cleanly deletes its Lease, so the others take
its CRs at their next round. The Lease of a replica that died is deleted by the others once it
has been expired for another lease duration (conditioned on its resourceVersion).
"""

from __future__ import annotations

import asyncio
import contextvars
import datetime as dt
import json
import logging
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from takoform_operator.core.shard_ring import (
    NOBODY,
    Claims,
    Liveness,
    ShardKey,
    shard_key,
    view_of,
)
from takoform_operator.kube.crs import log_fields
from takoform_operator.kube.freshness import older, resource_version
from takoform_operator.kube.leader import LostLease

logger = logging.getLogger("takoform_operator.shards")

RING_LABEL = "takoform.io/shard-ring"
VIEW_ANNOTATION = "takoform.io/shard-view"


@dataclass(frozen=True)
class ShardConfig:
    namespace: str
    ring: str
    identity: str
    key: ShardKey = "name"
    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    @property
    def lease_name(self) -> str:
        return lease_name(self.ring, self.identity)


def lease_name(ring: str, identity: str) -> str:
    """A DNS subdomain name for a member's Lease."""
    safe = re.sub(r"[^a-z0-9.-]+", "-", f"{ring}-shard-{identity}".lower()).strip("-.")
    return safe[:253].rstrip("-.")


class Loops(Protocol):
    """What the membership needs of kube.loops.ReconcileLoops."""

    def seen(self, uid: str, body: Mapping[str, Any]) -> None: ...

    def stop_many(self, uids: list[str]) -> list[asyncio.Task[None]]: ...

    def body_of(self, uid: str) -> Mapping[str, Any] | None: ...


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


@dataclass
class _Cr:
    key: str
    body: Mapping[str, Any]


@dataclass
class ShardMembership:
    config: ShardConfig
    api: k8s.CoordinationV1Api
    clock: Callable[[], float] = time.monotonic
    #: CRs of the selector this replica knows of (uid -> key and last body), served or not.
    crs: dict[str, _Cr] = field(default_factory=dict)
    #: CRs this replica has a loop for.
    serving: set[str] = field(default_factory=set)
    claims: Claims = NOBODY
    #: The live members on our last read, ourselves included: the view we publish next.
    members: tuple[str, ...] = ()
    #: The view our Lease holds (None: not written yet).
    published: tuple[str, ...] | None = None
    #: Views we may have published or are draining towards: each restricts what we act on
    #: until a later write of ours lands.
    pending: list[tuple[str, ...]] = field(default_factory=list)
    liveness: Liveness = field(default_factory=Liveness)
    loops: Loops | None = None
    #: Called with the body of each CR whose loop stopped here (its metrics go).
    forget: Callable[[Mapping[str, Any]], object] = lambda body: None
    #: Called after each round (metrics).
    observe: Callable[[ShardMembership], None] = lambda membership: None
    _version: str | None = None
    _acquired: dt.datetime | None = None
    _stopped: bool = False
    #: Our Lease could not be renewed in time: we stopped acting (and leave the Lease alone).
    lost: bool = False
    #: Reconciles in flight of CRs whose loop we stopped: a view is published only after the
    #: ones that were running when it was chosen have ended.
    _in_flight: set[asyncio.Task[None]] = field(default_factory=set)
    _drain: asyncio.Task[None] | None = None
    _context: contextvars.Context | None = None
    #: The claims the loops were last brought in line with (None: not yet, or changed since).
    _applied: Claims | None = None
    #: Bumped when a CR comes or goes: with the claims, what the unclaimed count depends on.
    _crs_version: int = 0
    _unclaimed: tuple[Claims, int, int] | None = None

    # -- what the watch asks -------------------------------------------------------------------

    def key_of(self, body: Mapping[str, Any]) -> str:
        metadata = body.get("metadata") or {}
        return shard_key(
            str(metadata.get("namespace") or ""), str(metadata.get("name") or ""), self.config.key
        )

    def admit(self, uid: str, body: Mapping[str, Any]) -> bool:
        """A watch event of a CR the selector matches: True when this replica acts on it now
        (the caller gives the body to its loop). False: not ours; a loop it had is stopped
        here. The body is kept either way, for the view change that makes the CR ours."""
        if self._context is None:
            # kopf's context (its settings, for Events): the loops we start ourselves run in it
            # as those a watch event starts do.
            self._context = contextvars.copy_context()
        key = self.key_of(body)
        if uid not in self.crs:
            self._crs_version += 1
        self.crs[uid] = _Cr(key, dict(body))  # trimmed as it was decoded (kube.json_seam)
        if self._may_act(key):
            if uid not in self.serving:
                self.serving.add(uid)
                _note("serving", body)
            return True
        if uid in self.serving:
            self._stop([uid])
        return False

    def drop(self, uid: str) -> None:
        """The CR is gone, or no longer matches the selector (the caller stops its loop)."""
        if self.crs.pop(uid, None) is not None:
            self._crs_version += 1
        self.serving.discard(uid)

    def unclaimed(self) -> int:
        """CRs of the selector that no live member may act on (none claims it, or two do)."""
        known = self._unclaimed
        if known is None or known[0] != self.claims or known[1] != self._crs_version:
            count = sum(1 for cr in self.crs.values() if self.claims.unclaimed(cr.key))
            known = self._unclaimed = (self.claims, self._crs_version, count)
        return known[2]

    def _may_act(self, key: str) -> bool:
        return not self._stopped and self.claims.may_act(key)

    def _stop(self, uids: list[str]) -> None:
        for uid in uids:
            self.serving.discard(uid)
            cr = self.crs.get(uid)
            latest = self.loops.body_of(uid) if self.loops is not None else None
            if (
                cr is not None
                and latest is not None
                and not older(resource_version(latest), resource_version(cr.body))
            ):
                # What our own writes made of it: should the CR come back to us before anyone
                # else writes it, its loop starts from there.
                cr.body = latest
            if cr is not None:
                _note("not serving", cr.body)
                self.forget(cr.body)
        if self.loops is not None:
            for task in self.loops.stop_many(uids):
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)

    def _apply(self) -> None:
        """Start the loops of CRs that became ours, stop those that are not ours any more."""
        if self.loops is None:
            return
        self._applied = self.claims
        gone = []
        for uid, cr in list(self.crs.items()):
            mine = self._may_act(cr.key)
            if mine and uid not in self.serving:
                self.serving.add(uid)
                _note("serving", cr.body)
                if self._context is not None:
                    self._context.copy().run(self.loops.seen, uid, cr.body)
                else:
                    self.loops.seen(uid, cr.body)
            elif not mine and uid in self.serving:
                gone.append(uid)
        if gone:
            self._stop(gone)

    def _restrict(self) -> None:
        """What we act on: claimed under our Lease's view and under every pending view; nothing
        before our Lease holds a view."""
        mine = [*self.pending, self.published] if self.published is not None else []
        self.claims = Claims(self.config.identity, tuple(dict.fromkeys(mine)), self.claims.others)

    # -- the Lease -----------------------------------------------------------------------------

    def _lease(self, view: tuple[str, ...]) -> k8s.V1Lease:
        c = self.config
        now = _now()
        if self._acquired is None:
            self._acquired = now
        return k8s.V1Lease(
            metadata=k8s.V1ObjectMeta(
                name=c.lease_name,
                namespace=c.namespace,
                labels={RING_LABEL: c.ring},
                annotations={VIEW_ANNOTATION: json.dumps(list(view))},
                # A replace is conditioned on the version we wrote last: a write of ours that
                # timed out and lands late can never overwrite a later one.
                resource_version=self._version,
            ),
            spec=k8s.V1LeaseSpec(
                holder_identity=c.identity,
                lease_duration_seconds=max(1, int(c.lease_seconds)),
                acquire_time=self._acquired,
                renew_time=now,
            ),
        )

    def write(self, view: tuple[str, ...]) -> None:
        """Write our Lease with `view` (blocking). Raises when it did not land."""
        c = self.config
        try:
            if self._version is None:
                try:
                    written = self.api.create_namespaced_lease(c.namespace, self._lease(view))
                except ApiException as exc:
                    if exc.status != 409:
                        raise
                    # Ours from before a restart (same identity): continue from its version.
                    current = self.api.read_namespaced_lease(c.lease_name, c.namespace)
                    self._version = _version_of(current)
                    written = self.api.replace_namespaced_lease(
                        c.lease_name, c.namespace, self._lease(view)
                    )
            else:
                written = self.api.replace_namespaced_lease(
                    c.lease_name, c.namespace, self._lease(view)
                )
        except ApiException as exc:
            if exc.status in (404, 409):
                self._version = None  # deleted or written meanwhile: start afresh next time
            raise
        self._version = _version_of(written)

    def read(self) -> list[Any]:
        """Every Lease of the ring, with a quorum read (blocking)."""
        c = self.config
        listing = self.api.list_namespaced_lease(
            c.namespace, label_selector=f"{RING_LABEL}={c.ring}"
        )
        return list(listing.items or ())

    def delete(self) -> None:
        """Our Lease goes (a clean stop: the others take our CRs at their next round)."""
        c = self.config
        try:
            self.api.delete_namespaced_lease(c.lease_name, c.namespace)
            logger.info("shard lease %s/%s deleted", c.namespace, c.lease_name)
        except Exception as exc:  # best effort: it expires by itself
            logger.warning("could not delete shard lease %s/%s: %s", c.namespace,
                           c.lease_name, exc)  # fmt: skip

    def _collect(self, leases: list[Any], now: float) -> list[tuple[str, str]]:
        """Liveness and the others' views from one read; returns the Leases expired for more
        than another lease duration, to delete, as (name, resourceVersion)."""
        c = self.config
        views: dict[str, tuple[str, ...]] = {}
        present, stale = [], []
        for lease in leases:
            spec = lease.spec or k8s.V1LeaseSpec()
            member = spec.holder_identity or ""
            metadata = lease.metadata
            if not member or member == c.identity:
                continue
            present.append(member)
            self.liveness.observe(member, str(metadata.resource_version), now)
            duration = float(spec.lease_duration_seconds or c.lease_seconds)
            if self.liveness.live(member, duration, now):
                views[member] = _view_in(metadata.annotations)
            elif self.liveness.expired_for(member, duration, now) > duration:
                stale.append((metadata.name, str(metadata.resource_version)))
        self.liveness.forget_absent(present)
        self.members = view_of([c.identity, *views])
        self.claims = Claims(c.identity, self.claims.mine, views)
        self._restrict()
        return stale

    def _delete_stale(self, stale: list[tuple[str, str]]) -> None:
        for name, version in stale:
            try:
                self.api.delete_namespaced_lease(
                    name,
                    self.config.namespace,
                    body=k8s.V1DeleteOptions(
                        preconditions=k8s.V1Preconditions(resource_version=version)
                    ),
                )
                logger.info("deleted the expired shard lease %s", name)
            except ApiException as exc:
                if exc.status not in (404, 409):
                    logger.warning("could not delete expired shard lease %s: %s", name, exc)

    # -- the loop ------------------------------------------------------------------------------

    async def _call(self, what: Callable[[], Any]) -> Any:
        # asyncio.timeout, not wait_for: in Python 3.11 wait_for returns the call's result
        # instead of raising when a cancellation (the deadline's) arrives as the call finished.
        async with asyncio.timeout(self.config.retry_seconds * 2):
            return await asyncio.to_thread(what)

    def _begin(self, target: tuple[str, ...]) -> None:
        """Head for `target`: stop what it takes away from us at once, and drain it (the
        reconciles in flight end) in the background while the Lease keeps being renewed."""
        self.pending.append(target)
        self._restrict()
        self._apply()
        waiting = set(self._in_flight)
        previous = self._drain

        async def drain() -> None:
            if previous is not None:
                await previous
            if waiting:
                await asyncio.wait(waiting)

        self._drain = asyncio.create_task(drain(), name="shard drain")

    async def round(self) -> bool:
        """One round: write our Lease (a renewal, or a new view once drained), then read every
        Lease and act on that read. True when our write landed."""
        target = self.members or (self.config.identity,)
        if target != self.published and (not self.pending or self.pending[-1] != target):
            self._begin(target)
        drained = self._drain is None or self._drain.done()
        view = self.pending[-1] if self.pending and drained else self.published
        wrote = False
        if view is not None:
            # Before the write: no other replica can have read it earlier (`sent` in the log).
            sent = time.time()
            try:
                await self._call(lambda: self.write(view))
                wrote = True
                if view != self.published:
                    logger.info("shard view published: %s", ", ".join(view),
                                extra={"sent": _log_time(sent)})  # fmt: skip
                self.published = view
                if self.pending and view == self.pending[-1]:
                    self.pending.clear()
            except Exception as exc:
                logger.warning("shard lease %s: %s", self.config.lease_name, exc)
        try:
            leases = await self._call(self.read)
        except Exception as exc:
            logger.warning("shard leases of ring %s: %s", self.config.ring, exc)
            self._restrict()
            self._apply()
            return wrote
        stale = self._collect(leases, self.clock())
        if stale:
            await asyncio.to_thread(self._delete_stale, stale)
        if self.claims != self._applied:
            # Unchanged claims: the watch keeps the loops in line (admit) between changes.
            self._apply()
        self.observe(self)
        return wrote

    async def run(self) -> None:
        """Rounds every retry period until cancelled; raises LostLease (after stopping every
        loop) when our Lease could not be written for the renew deadline."""
        c = self.config
        logger.info("shard member %s of ring %s (lease %s/%s)", c.identity, c.ring,
                    c.namespace, c.lease_name)  # fmt: skip
        # A first read, so that the first view we publish names the members alive already.
        try:
            self._collect(await self._call(self.read), self.clock())
        except Exception as exc:
            logger.warning("shard leases of ring %s: %s", c.ring, exc)
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        lost = False

        def deadline() -> None:
            # Not renewed for the renew deadline: stop acting now, whatever the round waits on.
            nonlocal lost
            lost = self.lost = True
            self.stop_acting()
            if task is not None:
                task.cancel()

        watchdog = loop.call_later(c.renew_deadline_seconds, deadline)
        try:
            while True:
                began = loop.time()
                wrote = await self.round()
                # Whatever a round awaits may drop a cancellation (as asyncio.wait_for did in
                # Python 3.11 when it landed just as the call finished): the deadline's, or a
                # stop asked for.
                if lost:
                    break
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError
                if wrote:
                    watchdog.cancel()
                    watchdog = loop.call_at(began + c.renew_deadline_seconds, deadline)
                await asyncio.sleep(max(0.0, c.retry_seconds - (loop.time() - began)))
        except asyncio.CancelledError:
            if not lost:
                raise
        finally:
            watchdog.cancel()
            if self._drain is not None:
                self._drain.cancel()
        logger.error("shard lease %s/%s not renewed in %.0fs: stopped acting", c.namespace,
                     c.lease_name, c.renew_deadline_seconds)  # fmt: skip
        raise LostLease(c.lease_name)

    def stop_acting(self) -> None:
        """Stop every loop at once (reconciles in flight end with the process)."""
        self._stopped = True
        self._apply()


def _note(what: str, body: Mapping[str, Any]) -> None:
    """One debug line per CR whose loop starts or stops here (which replica served what)."""
    if logger.isEnabledFor(logging.DEBUG):
        metadata = body.get("metadata") or {}
        logger.debug("%s %s/%s", what, metadata.get("namespace"), metadata.get("name"),
                     extra=log_fields(body))  # fmt: skip


def _log_time(seconds: float) -> str:
    """As the JSON log writes a line's own time (milliseconds, truncated), so the two compare."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds")


def _version_of(lease: Any) -> str | None:
    metadata = getattr(lease, "metadata", None)
    version = getattr(metadata, "resource_version", None)
    return str(version) if version else None


def _view_in(annotations: Mapping[str, str] | None) -> tuple[str, ...]:
    """The view a Lease publishes; an unreadable one claims nothing."""
    try:
        found = json.loads((annotations or {}).get(VIEW_ANNOTATION, "[]"))
    except ValueError:
        return ()
    if not isinstance(found, list) or not all(isinstance(m, str) for m in found):
        return ()
    return view_of(found)
