"""Leader election with a coordination.k8s.io/v1 Lease, the way client-go's leaderelection does
it, so that of several replicas exactly one reconciles at a time.

- A candidate takes the Lease when it does not exist, is released (no holder), or has not been
  renewed for `lease_seconds` as observed on the candidate's own clock (no clock-skew trust).
- The leader renews every `retry_seconds`. When it cannot renew for `renew_deadline_seconds`
  (< `lease_seconds`) it stops leading at once, before any other replica may take the Lease.
- Every write is an update conditioned on the Lease's resourceVersion, so two candidates can
  never both win the same round.
- A leader that stops cleanly releases the Lease, so the next one takes over without waiting.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import Any

from takoform_operator.kube.api import ApiError, KubeApi

logger = logging.getLogger("takoform_operator.leader")


@dataclass(frozen=True)
class LeaseTiming:
    """How long a Lease lasts unrenewed, how long its holder keeps failing to renew before it
    stops, and how often it renews: the leader's Lease and each shard member's alike."""

    lease_seconds: float = 15.0
    renew_deadline_seconds: float = 10.0
    retry_seconds: float = 2.0

    def __post_init__(self) -> None:
        if not self.retry_seconds < self.renew_deadline_seconds < self.lease_seconds:
            raise ValueError("need retry < renew deadline < lease duration")


@dataclass(frozen=True)
class LeaseConfig:
    namespace: str
    name: str
    identity: str
    timing: LeaseTiming = field(default_factory=LeaseTiming)


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def micro_time(moment: dt.datetime) -> str:
    """A Lease's acquireTime or renewTime: an RFC 3339 MicroTime in UTC."""
    return moment.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_path(namespace: str, name: str | None = None) -> str:
    """The API path of the namespace's Leases, or of the one named."""
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    return f"{leases}/{name}" if name else leases


class LeaderElector:
    def __init__(self, config: LeaseConfig, api: KubeApi) -> None:
        self.config = config
        self.api = api
        # What we last saw of another holder: (holder, renewTime, resourceVersion) and when.
        self._observed: tuple[Any, float] | None = None
        self.is_leader = False
        self.transitions = 0

    # -- one round -----------------------------------------------------------------------------

    def _spec(self, acquire: bool, previous: Mapping[str, Any] | None) -> dict[str, Any]:
        now = micro_time(_now())
        transitions = (previous.get("leaseTransitions") or 0) if previous is not None else 0
        return {
            "holderIdentity": self.config.identity,
            "leaseDurationSeconds": int(self.config.timing.lease_seconds),
            "acquireTime": now if acquire or previous is None else previous.get("acquireTime"),
            "renewTime": now,
            "leaseTransitions": transitions + (1 if acquire and previous is not None else 0),
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round. True when we hold the Lease afterwards."""
        c = self.config
        path = lease_path(c.namespace, c.name)
        try:
            lease = await self.api.request("GET", path)
        except ApiError as exc:
            if exc.status != 404:
                raise
            body = {
                "apiVersion": "coordination.k8s.io/v1",
                "kind": "Lease",
                "metadata": {"name": c.name, "namespace": c.namespace},
                "spec": self._spec(acquire=True, previous=None),
            }
            try:
                await self.api.request("POST", lease_path(c.namespace), body)
            except ApiError as create_exc:
                if create_exc.status == 409:  # someone else created it first
                    return False
                raise
            return True

        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        mine = holder == c.identity
        if not mine and holder:
            version = (lease.get("metadata") or {}).get("resourceVersion")
            seen = (holder, spec.get("renewTime"), version)
            if self._observed is None or self._observed[0] != seen:
                self._observed = (seen, time.monotonic())
                return False
            if time.monotonic() - self._observed[1] < (
                spec.get("leaseDurationSeconds") or c.timing.lease_seconds
            ):
                return False  # the holder may still be alive: wait for its lease to run out
            logger.info("lease %s/%s expired (holder %s); taking it", c.namespace, c.name, holder)
        lease["spec"] = self._spec(acquire=not mine, previous=spec)
        try:
            # The Lease as read carries metadata.resourceVersion: a concurrent writer makes this
            # a 409.
            await self.api.request("PUT", path, lease)
        except ApiError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def release(self) -> None:
        """Give the Lease up (only if we still hold it), so a standby takes over at once."""
        c = self.config
        path = lease_path(c.namespace, c.name)
        try:
            lease = await self.api.request("GET", path)
            spec = lease.get("spec") or {}
            if spec.get("holderIdentity") != c.identity:
                return
            spec["holderIdentity"] = None
            spec["leaseDurationSeconds"] = 1
            spec["renewTime"] = micro_time(_now())
            await self.api.request("PUT", path, lease)
            logger.info("lease %s/%s released", c.namespace, c.name)
        except Exception as exc:  # best effort: the lease runs out by itself anyway
            logger.warning("could not release lease %s/%s: %s", c.namespace, c.name, exc)

    # -- the loop ------------------------------------------------------------------------------

    async def _round(self) -> bool:
        try:
            # asyncio.timeout, not wait_for: in Python 3.11 wait_for drops a cancellation that
            # arrives just as the call finished (kube/shards.py).
            async with asyncio.timeout(self.config.timing.retry_seconds * 2):
                return await self.try_acquire_or_renew()
        except Exception as exc:
            logger.warning("lease %s/%s: %s", self.config.namespace, self.config.name, exc)
            return False

    async def run(
        self,
        lead: Callable[[asyncio.Event], Coroutine[Any, Any, None]],
        on_change: Callable[[bool], None] = lambda leader: None,
    ) -> None:
        """Wait for the Lease, then run `lead(stop)` while renewing it. Returns when `lead`
        returns, or raises LostLease when renewal failed for the renew deadline (after setting
        `stop` and giving `lead` the renew deadline's slack to end)."""
        c = self.config
        on_change(False)
        logger.info("waiting for lease %s/%s as %s", c.namespace, c.name, c.identity)
        while not await self._round():
            await asyncio.sleep(c.timing.retry_seconds)
        self.is_leader = True
        on_change(True)
        logger.info("acquired lease %s/%s: leading", c.namespace, c.name)
        stop = asyncio.Event()
        task: asyncio.Task[None] = asyncio.create_task(lead(stop))
        last_renew = time.monotonic()
        try:
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=c.timing.retry_seconds)
                if done:
                    break
                if await self._round():
                    last_renew = time.monotonic()
                elif time.monotonic() - last_renew >= c.timing.renew_deadline_seconds:
                    logger.error("lease %s/%s not renewed in %.0fs: stopping", c.namespace,
                                 c.name, c.timing.renew_deadline_seconds)  # fmt: skip
                    raise LostLease(c.name)
            await task
        finally:
            self.is_leader = False
            on_change(False)
            if not task.done():
                stop.set()
                task.cancel()
                with _suppress_all():
                    await task


class LostLease(RuntimeError):
    """This replica could not renew its Lease in time and must stop acting."""


class _suppress_all:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> bool:
        return True
