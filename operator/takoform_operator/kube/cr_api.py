"""What a look (kube.cr_step) does to its CR on the API server: the status and finalizer
writes, its Events, and its connection Secret. Thin: every decision is the step's; this only
writes, and tells the CR's loop what it wrote (kube.loops: our own writes never wake it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

from takoform_operator.core.conditions import Reason
from takoform_operator.core.connection import ConnectionSecret, has_connection_secret, secret_name
from takoform_operator.core.outcome import Event
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import Remedy
from takoform_operator.core.shard_ring import SLOT_LABEL, shard_key, slot_of
from takoform_operator.core.state import DeletionPolicy
from takoform_operator.core.tenancy import connection_secret_refusal
from takoform_operator.kube import events
from takoform_operator.kube.connection_secrets import (
    SecretForbidden,
    SecretNotOurs,
    SecretStore,
    SecretWriteFailed,
    secret_name_of,
)
from takoform_operator.kube.cr_step import FINALIZER
from takoform_operator.kube.crs import log_fields, merged_status
from takoform_operator.kube.loops import ReconcileLoops, host_named
from takoform_operator.kube.status import CrWriter
from takoform_operator.settings import Settings
from takoform_spec.identity import FormLine, plural_of

logger = logging.getLogger("takoform_operator")
#: Event reasons of the connection Secret alone: no condition states them (core.conditions).
_NOT_OURS = cast(Reason, "ConnectionSecretNotOurs")
_NOT_WRITTEN = cast(Reason, "ConnectionSecretNotWritten")


def fields(body: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The CR fields of a log line about `body` (takoform_operator.logs)."""
    return log_fields(body, host_named(body))


def where(body: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    """(group, version, plural, namespace, name) of a CR body."""
    group, version = str(body["apiVersion"]).split("/", 1)
    metadata = body["metadata"]
    plural = plural_of(str(body["kind"]))
    return group, version, plural, str(metadata["namespace"]), str(metadata["name"])


@dataclass
class ApiCr:
    registry: Registry
    settings: Settings
    writer: CrWriter
    loops: ReconcileLoops
    #: Where sensitive outputs go (docs/tenancy.md, Connection Secrets); None: not written.
    secrets: SecretStore | None = None

    async def write_status(
        self, body: Mapping[str, Any], patch: dict[str, Any]
    ) -> Mapping[str, Any]:
        answer = await self.writer.write(*where(body), patch)
        version = (answer.get("metadata") or {}).get("resourceVersion")
        expected = {
            **body,
            "metadata": {**body["metadata"], "resourceVersion": version},
            "status": merged_status(body.get("status"), patch),
        }
        self.loops.wrote(str(body["metadata"]["uid"]), answer, expected)
        return answer

    async def set_finalizer(self, body: Mapping[str, Any], present: bool) -> Mapping[str, Any]:
        """With sharding `hash`, putting the finalizer on writes the CR's slot label too (one
        write: kube.shards watches by it)."""
        metadata = body["metadata"]
        seen = list(metadata.get("finalizers") or ())
        resource_version = str(metadata.get("resourceVersion", ""))
        labels = self._slot_label(body) if present else {}
        answer = await self.writer.set_finalizer(
            where(body), FINALIZER, present, seen, resource_version, labels
        )
        finalizers = [f for f in seen if f != FINALIZER] + ([FINALIZER] if present else [])
        version = (answer.get("metadata") or {}).get("resourceVersion")
        expected = {
            **body,
            "metadata": {
                **metadata,
                "finalizers": finalizers,
                "resourceVersion": version,
                **({"labels": {**(metadata.get("labels") or {}), **labels}} if labels else {}),
            },
        }
        self.loops.wrote(str(metadata["uid"]), answer, expected)
        return answer

    async def set_slot_label(self, body: Mapping[str, Any], slot: str) -> Mapping[str, Any]:
        """Correct the CR's slot label (kube.shards): a write of its own, which its loop (if it
        has one here) is told of like any other."""
        answer = await self.writer.set_labels(where(body), {SLOT_LABEL: slot})
        uid = str(body["metadata"]["uid"])
        if self.loops.body_of(uid) is not None:
            self.loops.wrote(uid, answer)
        return answer

    def _slot_label(self, body: Mapping[str, Any]) -> dict[str, str]:
        if self.settings.sharding != "hash":
            return {}
        metadata = body["metadata"]
        key = shard_key(str(metadata["namespace"]), str(metadata["name"]), self.settings.shard_key)
        return {SLOT_LABEL: str(slot_of(key))}

    def post(self, body: Mapping[str, Any], event: Event) -> None:
        events.post(body, event)

    async def write_connection(
        self, body: Mapping[str, Any], secret: ConnectionSecret
    ) -> tuple[str, tuple[Remedy, ...]] | None:
        """A Secret the operator may not reach (403: its Secret rights are not bound in that
        namespace) returns the message and remedies of the CR's condition. A Secret that is not
        ours is left alone, with a Warning Event; any other write that did not land is a Warning
        too, and is tried again at the next look, not at once: the resource itself is fine."""
        if self.secrets is None:
            return None
        try:
            if await self.secrets.apply(body, secret):
                logger.info(
                    "connection Secret %s/%s written", secret.namespace, secret.name,
                    extra=fields(body),
                )  # fmt: skip
        except SecretForbidden as exc:
            logger.warning("%s", exc, extra=fields(body))
            return connection_secret_refusal(
                secret.namespace,
                secret.name,
                exc.answer,
                self.settings.connection_secret_role,
                self.settings.service_account,
            )
        except SecretNotOurs as exc:
            logger.warning("%s", exc, extra=fields(body))
            self.post(body, Event("Warning", _NOT_OURS, str(exc)))
        except SecretWriteFailed as exc:
            logger.warning("%s; tried again at the next look", exc, extra=fields(body))
            self.post(body, Event("Warning", _NOT_WRITTEN, str(exc)))
        return None

    async def let_go_of_connection(self, body: Mapping[str, Any]) -> None:
        """With deletionPolicy Orphan the Secret loses its ownerReference and stays (the host
        resource and its credentials live on). Otherwise the garbage collector deletes it with
        the CR (the operator has no delete right on Secrets)."""
        metadata = body["metadata"]
        line = FormLine(str(body["apiVersion"]), str(body["kind"]))
        if self.secrets is None or not has_connection_secret(self.registry, line):
            return
        if (body.get("spec") or {}).get("deletionPolicy") != DeletionPolicy.ORPHAN:
            return
        name = secret_name_of(body, secret_name(str(metadata["name"]), None))
        await self.secrets.release(body, str(metadata["namespace"]), name)
