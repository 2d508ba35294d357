"""Writing to a CR: its status (one merge-patch per reconcile outcome) and our finalizer."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Sequence
from typing import Any, Protocol

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException


class StatusWriteFailed(Exception):
    """A write to the CR did not land (API server error, conflict, connection): retry soon."""


class CrWriter(Protocol):
    async def write(
        self, group: str, version: str, plural: str, namespace: str, name: str, status: Any
    ) -> None:
        """Merge-patch the status subresource."""

    async def set_finalizers(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str,
        name: str,
        finalizers: Sequence[str],
        resource_version: str,
    ) -> None:
        """Replace metadata.finalizers, only if the CR is still at `resource_version`."""


class KubernetesCrWriter:
    """Patches with the official client (in a thread: the client is synchronous)."""

    def __init__(self, api: k8s.CustomObjectsApi | None = None) -> None:
        if api is None:
            k8s_config.load_config()  # type: ignore[no-untyped-call]
            api = k8s.CustomObjectsApi()
        self._api = api

    async def write(
        self, group: str, version: str, plural: str, namespace: str, name: str, status: Any
    ) -> None:
        await self._patch(
            self._api.patch_namespaced_custom_object_status,
            (group, version, namespace, plural, name),
            {"status": status},
        )

    async def set_finalizers(
        self,
        group: str,
        version: str,
        plural: str,
        namespace: str,
        name: str,
        finalizers: Sequence[str],
        resource_version: str,
    ) -> None:
        # resourceVersion in a merge-patch is a precondition: a concurrent change is a 409.
        metadata = {"finalizers": list(finalizers), "resourceVersion": resource_version}
        await self._patch(
            self._api.patch_namespaced_custom_object,
            (group, version, namespace, plural, name),
            {"metadata": metadata},
        )

    async def _patch(self, call: Any, where: tuple[str, ...], body: dict[str, Any]) -> None:
        try:
            send = functools.partial(
                call, *where, body, _content_type="application/merge-patch+json"
            )
            await asyncio.to_thread(send)
        except (ApiException, OSError, urllib3.exceptions.HTTPError) as exc:
            namespace, name = where[2], where[4]
            raise StatusWriteFailed(f"write to {namespace}/{name} did not land: {exc}") from exc
