"""Writing to a CR: its status (one merge-patch per reconcile outcome) and our finalizer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

import httpx

from takoform_operator.core.depth import safe_loads
from takoform_operator.http_transport import Urls
from takoform_operator.kube.api import ApiConnection, http_client
from takoform_operator.kube.echoes import OwnWrites
from takoform_operator.kube.json_seam import OBJECT_LIMIT


class StatusWriteFailed(Exception):
    """A write to the CR did not land (API server error, conflict, connection): retry soon."""


class CrWriter:
    """Patches over one async HTTP/2-less connection pool (no threads, no generated client): the
    status writes are a large share of the operator's work (docs/performance.md).

    Each write returns the CR as the API server answered it: the write applied, its new
    metadata.resourceVersion (a precondition of the next), and whatever else landed before
    it (someone else's edit)."""

    def __init__(
        self,
        max_connections: int = 16,
        echoes: OwnWrites | None = None,
        keep: Callable[[Any], Any] = lambda found: found,
    ) -> None:
        """`echoes`: where each answer is recorded, so that its watch echo is dropped; `keep`:
        what is kept of each answer as soon as it is decoded (kube.handlers.cr_trimmer: a Form
        CR only what the operator reads). A look goes on with the answer of its write, so
        without it every reconcile in flight held its CR whole, whatever its metadata
        carries."""
        self._max_connections = max_connections
        self._echoes = echoes
        self._keep = keep
        self._urls = Urls()
        self._client: httpx.AsyncClient | None = None
        self._connection: ApiConnection | None = None

    def connect(self, connection: ApiConnection) -> None:
        """Use these credentials from the next write on (kopf logs in again on a 401)."""
        if connection != self._connection:
            self._connection = connection
            old, self._client = self._client, None
            if old is not None:
                asyncio.get_running_loop().create_task(old.aclose())

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()

    @property
    def connection(self) -> ApiConnection | None:
        """The credentials of the last login (kube.api.KubeApi follows them too)."""
        return self._connection

    async def write(
        self, group: str, version: str, plural: str, namespace: str, name: str, status: Any
    ) -> Mapping[str, Any]:
        """Merge-patch the status subresource."""
        path = f"{_path(group, version, plural, namespace, name)}/status"
        return await self._patch(path, {"status": status}, namespace, name)

    async def set_finalizer(
        self,
        where: tuple[str, str, str, str, str],
        finalizer: str,
        present: bool,
        seen: Sequence[str],
        resource_version: str,
        labels: Mapping[str, str] | None = None,
    ) -> Mapping[str, Any]:
        """Add (`present`) or remove `finalizer`, given the finalizers `seen` at
        `resource_version`; should the CR have moved on since, from what it holds now. `labels`
        are set in the same write."""
        # resourceVersion in a merge-patch is a precondition: a concurrent change is a 409,
        # after which the list is recomputed from the CR as it is now (once; then it is retried
        # by the loop like any write that did not land).
        group, version, plural, namespace, name = where
        path = _path(group, version, plural, namespace, name)
        try:
            return await self._patch(
                path,
                _finalizers_patch(seen, finalizer, present, resource_version, labels),
                namespace,
                name,
            )
        except _Conflict:
            current = await self._http().get(path)
            if current.status_code != 200:
                raise StatusWriteFailed(
                    f"write to {namespace}/{name} did not land: {current.status_code}"
                ) from None
            metadata = safe_loads(current.content, OBJECT_LIMIT)["metadata"]
            patch = _finalizers_patch(
                metadata.get("finalizers") or (),
                finalizer,
                present,
                metadata["resourceVersion"],
                labels,
            )
            return await self._patch(path, patch, namespace, name)

    async def set_labels(
        self, where: tuple[str, str, str, str, str], labels: Mapping[str, str]
    ) -> Mapping[str, Any]:
        """Set `labels` whatever the CR holds now (values that never depend on it)."""
        group, version, plural, namespace, name = where
        path = _path(group, version, plural, namespace, name)
        return await self._patch(path, {"metadata": {"labels": dict(labels)}}, namespace, name)

    async def _patch(
        self, path: str, body: dict[str, Any], namespace: str, name: str
    ) -> Mapping[str, Any]:
        client = self._http()
        try:
            # An absolute URL: httpx merging a relative one into base_url is a cost per write.
            answer = await client.patch(
                self._urls(str(client.base_url).rstrip("/") + path),
                content=json.dumps(body),
                headers={"Content-Type": "application/merge-patch+json"},
            )
        except httpx.HTTPError as exc:
            raise StatusWriteFailed(f"write to {namespace}/{name} did not land: {exc}") from exc
        if answer.status_code == 409:
            raise _Conflict(f"write to {namespace}/{name} did not land: conflict")
        if answer.status_code != 200:
            reason = answer.text[:300]
            raise StatusWriteFailed(
                f"write to {namespace}/{name} did not land: {answer.status_code} {reason}"
            )
        # The answer is the whole CR: decoded depth-safe like every object (kube.json_seam).
        written = safe_loads(answer.content, OBJECT_LIMIT)
        if not isinstance(written, dict) or not isinstance(written.get("metadata"), dict):
            raise StatusWriteFailed(f"write to {namespace}/{name}: the answer is not a CR")
        if self._echoes is not None:
            self._echoes.wrote(written)
        return cast(Mapping[str, Any], self._keep(written))

    def client(self) -> httpx.AsyncClient:
        """The current connection, for the other thin writers (kube.connection_secrets)."""
        return self._http()

    def _http(self) -> httpx.AsyncClient:
        if self._client is None:
            if self._connection is None:
                raise StatusWriteFailed("not logged in to the API server yet")
            self._client = http_client(self._connection, self._max_connections)
        return self._client


class _Conflict(StatusWriteFailed):
    """The CR moved on since the resourceVersion the write was conditioned on."""


def _finalizers_patch(
    seen: Sequence[str],
    finalizer: str,
    present: bool,
    resource_version: str,
    labels: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    finalizers = [f for f in seen if f != finalizer] + ([finalizer] if present else [])
    metadata: dict[str, Any] = {"finalizers": finalizers, "resourceVersion": resource_version}
    if labels:
        metadata["labels"] = dict(labels)
    return {"metadata": metadata}


def _path(group: str, version: str, plural: str, namespace: str, name: str) -> str:
    """The object's path; without a namespace, a cluster-scoped object's."""
    where = f"/namespaces/{namespace}" if namespace else ""
    return f"/apis/{group}/{version}{where}/{plural}/{name}"
