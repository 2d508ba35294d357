"""The shard Leases through the API (blocking calls): one Lease per member of a ring.

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

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from takoform_operator.core.shard_ring import PLACEMENT, ShardKey, view_of
from takoform_operator.core.shard_round import SeenLease, View
from takoform_operator.kube.leader import LeaseTiming

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
    api: k8s.CoordinationV1Api
    #: The resourceVersion of our Lease as we wrote it last (None: create it).
    _version: str | None = None
    _acquired: dt.datetime | None = None

    def _lease(self, view: View) -> k8s.V1Lease:
        c = self.config
        now = dt.datetime.now(dt.UTC)
        if self._acquired is None:
            self._acquired = now
        return k8s.V1Lease(
            metadata=k8s.V1ObjectMeta(
                name=c.lease_name,
                namespace=c.namespace,
                labels={RING_LABEL: c.ring},
                annotations={
                    VIEW_ANNOTATION: json.dumps(list(view)),
                    PLACEMENT_ANNOTATION: PLACEMENT,
                },
                # A replace is conditioned on the version we wrote last: a write of ours that
                # timed out and lands late can never overwrite a later one.
                resource_version=self._version,
            ),
            spec=k8s.V1LeaseSpec(
                holder_identity=c.identity,
                lease_duration_seconds=max(1, int(c.timing.lease_seconds)),
                acquire_time=self._acquired,
                renew_time=now,
            ),
        )

    def write(self, view: View) -> None:
        """Write our Lease with `view`. Raises when it did not land."""
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

    def read(self) -> list[SeenLease]:
        """Every Lease of the ring, with a quorum read (never a cache)."""
        c = self.config
        listing = self.api.list_namespaced_lease(
            c.namespace, label_selector=f"{RING_LABEL}={c.ring}"
        )
        found = []
        for lease in listing.items or ():
            spec = lease.spec or k8s.V1LeaseSpec()
            metadata = lease.metadata or k8s.V1ObjectMeta()
            found.append(
                SeenLease(
                    name=str(metadata.name),
                    member=spec.holder_identity or "",
                    version=str(metadata.resource_version),
                    duration=float(spec.lease_duration_seconds or c.timing.lease_seconds),
                    view=_view_in(metadata.annotations),
                    placement=(metadata.annotations or {}).get(PLACEMENT_ANNOTATION, ""),
                )
            )
        return found

    def delete(self) -> None:
        """Our Lease goes (a clean stop: the others take our CRs at their next round)."""
        c = self.config
        try:
            self.api.delete_namespaced_lease(c.lease_name, c.namespace)
            logger.info("shard lease %s/%s deleted", c.namespace, c.lease_name)
        except Exception as exc:  # best effort: it expires by itself
            logger.warning("could not delete shard lease %s/%s: %s", c.namespace,
                           c.lease_name, exc)  # fmt: skip

    def delete_expired(self, stale: list[SeenLease]) -> None:
        """Delete other members' expired Leases, each only as it was read (a renewal since
        keeps it)."""
        for lease in stale:
            try:
                self.api.delete_namespaced_lease(
                    lease.name,
                    self.config.namespace,
                    body=k8s.V1DeleteOptions(
                        preconditions=k8s.V1Preconditions(resource_version=lease.version)
                    ),
                )
                logger.info("deleted the expired shard lease %s", lease.name)
            except ApiException as exc:
                if exc.status not in (404, 409):
                    logger.warning("could not delete expired shard lease %s: %s", lease.name, exc)


def _version_of(lease: Any) -> str | None:
    metadata = getattr(lease, "metadata", None)
    version = getattr(metadata, "resource_version", None)
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
