"""Writing a CR's status: one merge-patch on the status subresource per reconcile outcome."""

from __future__ import annotations

import asyncio
from typing import Any, Protocol

from kubernetes import client as k8s
from kubernetes import config as k8s_config


class StatusWriter(Protocol):
    async def write(
        self, group: str, version: str, plural: str, namespace: str, name: str, status: Any
    ) -> None: ...


class KubernetesStatusWriter:
    """Patches `/status` with the official client (in a thread: the client is synchronous)."""

    def __init__(self, api: k8s.CustomObjectsApi | None = None) -> None:
        if api is None:
            k8s_config.load_config()  # type: ignore[no-untyped-call]
            api = k8s.CustomObjectsApi()
        self._api = api

    async def write(
        self, group: str, version: str, plural: str, namespace: str, name: str, status: Any
    ) -> None:
        await asyncio.to_thread(
            self._api.patch_namespaced_custom_object_status,
            group,
            version,
            namespace,
            plural,
            name,
            {"status": status},
            _content_type="application/merge-patch+json",
        )
