"""The shard Leases through the API: one Lease per member of a ring.

A member's Lease is `<ring>-shard-<identity>` in the operator's namespace, labelled
`takoform.io/shard-ring=<ring>` so that the members find each other, and carries the member's
published view in the annotation `takoform.io/shard-view`, and how it places CRs on the ring in
`takoform.io/shard-placement` (core.shard_ring.PLACEMENT). What the claim rule makes of them is
core.shard_round's; when to call what is kube.shards'.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from takoform_operator.core.shard_ring import PLACEMENT, ShardKey, view_of
from takoform_operator.core.shard_round import SeenLease, View
from takoform_operator.kube.api import ApiError, KubeApi
from takoform_operator.kube.leader import LeaseTiming, lease_path, micro_time

logger = logging.getLogger("takoform_operator.shards")

RING_LABEL = "takoform.io/shard-ring"
VIEW_ANNOTATION = "takoform.io/shard-view"
PLACEMENT_ANNOTATION = "takoform.io/shard-placement"


@dataclass(frozen=True)
class ShardConfig:
    namespace: str
    ring: str
    identity: str
    key: ShardKey = "name"
    timing: LeaseTiming = field(default_factory=LeaseTiming)

    @property
    def lease_name(self) -> str:
        return lease_name(self.ring, self.identity)


def lease_name(ring: str, identity: str) -> str:
    """A DNS subdomain name for a member's Lease."""
    safe = re.sub(r"[^a-z0-9.-]+", "-", f"{ring}-shard-{identity}".lower()).strip("-.")
    return safe[:253].rstrip("-.")


@dataclass
class ShardLeases:
    config: ShardConfig
    api: KubeApi
    #: The resourceVersion of our Lease as we wrote it last (None: create it).
    _version: str | None = None
    _acquired: dt.datetime | None = None

    def _lease(self, view: View) -> dict[str, Any]:
        c = self.config
        now = dt.datetime.now(dt.UTC)
        if self._acquired is None:
            self._acquired = now
        metadata: dict[str, Any] = {
            "name": c.lease_name,
            "namespace": c.namespace,
            "labels": {RING_LABEL: c.ring},
            "annotations": {
                VIEW_ANNOTATION: json.dumps(list(view)),
                PLACEMENT_ANNOTATION: PLACEMENT,
            },
        }
        if self._version is not None:
            # A replace is conditioned on the version we wrote last: a write of ours that timed
            # out and lands late can never overwrite a later one.
            metadata["resourceVersion"] = self._version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": {
                "holderIdentity": c.identity,
                "leaseDurationSeconds": max(1, int(c.timing.lease_seconds)),
                "acquireTime": micro_time(self._acquired),
                "renewTime": micro_time(now),
            },
        }

    async def write(self, view: View) -> None:
        """Write our Lease with `view`. Raises when it did not land."""
        c = self.config
        ours = lease_path(c.namespace, c.lease_name)
        try:
            if self._version is None:
                try:
                    written = await self.api.request(
                        "POST", lease_path(c.namespace), self._lease(view)
                    )
                except ApiError as exc:
                    if exc.status != 409:
                        raise
                    # Ours from before a restart (same identity): continue from its version.
                    current = await self.api.request("GET", ours)
                    self._version = _version_of(current)
                    written = await self.api.request("PUT", ours, self._lease(view))
            else:
                written = await self.api.request("PUT", ours, self._lease(view))
        except ApiError as exc:
            if exc.status in (404, 409):
                self._version = None  # deleted or written meanwhile: start afresh next time
            raise
        self._version = _version_of(written)

    async def read(self) -> list[SeenLease]:
        """Every Lease of the ring, with a quorum read (never a cache)."""
        c = self.config
        listing = await self.api.request(
            "GET", lease_path(c.namespace), params={"labelSelector": f"{RING_LABEL}={c.ring}"}
        )
        found = []
        for lease in listing.get("items") or ():
            spec = lease.get("spec") or {}
            metadata = lease.get("metadata") or {}
            annotations = metadata.get("annotations") or {}
            found.append(
                SeenLease(
                    name=str(metadata.get("name")),
                    member=spec.get("holderIdentity") or "",
                    version=str(metadata.get("resourceVersion")),
                    duration=float(spec.get("leaseDurationSeconds") or c.timing.lease_seconds),
                    view=_view_in(annotations),
                    placement=annotations.get(PLACEMENT_ANNOTATION, ""),
                )
            )
        return found

    async def delete(self) -> None:
        """Our Lease goes (a clean stop: the others take our CRs at their next round)."""
        c = self.config
        try:
            await self.api.request("DELETE", lease_path(c.namespace, c.lease_name))
            logger.info("shard lease %s/%s deleted", c.namespace, c.lease_name)
        except Exception as exc:  # best effort: it expires by itself
            logger.warning("could not delete shard lease %s/%s: %s", c.namespace,
                           c.lease_name, exc)  # fmt: skip

    async def delete_expired(self, stale: list[SeenLease]) -> None:
        """Delete other members' expired Leases, each only as it was read (a renewal since
        keeps it)."""
        for lease in stale:
            try:
                await self.api.request(
                    "DELETE",
                    lease_path(self.config.namespace, lease.name),
                    {
                        "apiVersion": "v1",
                        "kind": "DeleteOptions",
                        "preconditions": {"resourceVersion": lease.version},
                    },
                )
                logger.info("deleted the expired shard lease %s", lease.name)
            except ApiError as exc:
                if exc.status not in (404, 409):
                    logger.warning("could not delete expired shard lease %s: %s", lease.name, exc)


def _version_of(lease: Any) -> str | None:
    metadata = lease.get("metadata") if isinstance(lease, Mapping) else None
    version = metadata.get("resourceVersion") if isinstance(metadata, Mapping) else None
    return str(version) if version else None


def _view_in(annotations: Mapping[str, str] | None) -> View:
    """The view a Lease publishes; an unreadable one claims nothing."""
    try:
        found = json.loads((annotations or {}).get(VIEW_ANNOTATION, "[]"))
    except ValueError:
        return ()
    if not isinstance(found, list) or not all(isinstance(m, str) for m in found):
        return ()
    return view_of(found)
