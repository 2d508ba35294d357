"""The operator's own requests to the API server besides its CR writes (Leases, Secrets, reviews,
discovery, TakoformHost status): JSON over httpx, on small pools of their own (main.py gives the
Leases one apart), so that a Lease is renewed on time however busy the reconcile slots keep
kube.status's pool. No generated client:
the official one costs a process about 9 MiB once imported, some 20 more with the API
classes these requests used, and a thread per call."""

from __future__ import annotations

import contextlib
import json
import os
import ssl
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from takoform_operator.core.depth import safe_loads
from takoform_operator.http_transport import CookielessClient, pooled_transport
from takoform_operator.kube.json_seam import OBJECT_LIMIT
from takoform_operator.version import user_agent


@dataclass(frozen=True)
class ApiConnection:
    """How to reach the API server (kube.client_config), reduced to what an HTTP client needs.
    `*_data` are PEM."""

    server: str
    ca_path: str | None = None
    ca_data: bytes | None = None
    insecure: bool = False
    token: str | None = None
    certificate_path: str | None = None
    certificate_data: bytes | None = None
    private_key_path: str | None = None
    private_key_data: bytes | None = None


class ApiError(Exception):
    """The API server refused (`status`, its reason) or could not be reached (`status` 0)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(f"{status} {reason}" if status else reason)
        self.status = status
        self.reason = reason


def http_client(connection: ApiConnection, max_connections: int) -> httpx.AsyncClient:
    """An async client of the API server as `connection` says."""
    headers = {"User-Agent": user_agent()}
    if connection.token:
        headers["Authorization"] = f"Bearer {connection.token}"
    verify = ssl_context(connection)
    return CookielessClient(
        base_url=connection.server,
        verify=verify,
        headers=headers,
        timeout=30,
        transport=pooled_transport(verify=verify, cert=None, max_connections=max_connections),
    )


def ssl_context(connection: ApiConnection) -> ssl.SSLContext:
    """The CA to trust and the client certificate to show. Certificates given as data go
    through a private file for as long as the context loads them (ssl reads only files)."""
    context = ssl.create_default_context(
        cafile=connection.ca_path,
        cadata=connection.ca_data.decode() if connection.ca_data else None,
    )
    if connection.insecure:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    with (
        _as_file(connection.certificate_path, connection.certificate_data) as certificate,
        _as_file(connection.private_key_path, connection.private_key_data) as key,
    ):
        if certificate:
            context.load_cert_chain(certificate, key)
    return context


@contextlib.contextmanager
def _as_file(path: str | None, data: bytes | None) -> Iterator[str | None]:
    if path or not data:
        yield path
        return
    handle, written = tempfile.mkstemp(prefix="takoform-kube-")
    try:
        with os.fdopen(handle, "wb") as sink:
            sink.write(data)
        yield written
    finally:
        os.unlink(written)


class KubeApi:
    """`await api.request("GET", path)` -> the decoded answer; raises ApiError. The client
    follows the credentials `connection()` gives; on a 401 it calls `log_in()` (the
    configuration read again: a ServiceAccount's token is rotated on disk) and asks once more."""

    def __init__(
        self,
        connection: Callable[[], ApiConnection | None],
        max_connections: int = 2,
        log_in: Callable[[], object] | None = None,
    ) -> None:
        self._connection = connection
        self._max_connections = max_connections
        self._log_in = log_in
        self._client: httpx.AsyncClient | None = None
        self._built_for: ApiConnection | None = None

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        content = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if body is not None else None
        for attempt in range(2):
            client = await self._http()
            try:
                answer = await client.request(
                    method, path, params=params, content=content, headers=headers
                )
            except httpx.HTTPError as exc:
                raise ApiError(0, f"{method} {path}: {exc or type(exc).__name__}") from None
            if answer.status_code != 401 or self._log_in is None or attempt:
                break
            try:
                self._log_in()
            except Exception as exc:  # the configuration is unusable now: say so as a 401
                raise ApiError(401, f"cannot log in again: {exc}") from None
        if not 200 <= answer.status_code < 300:
            raise ApiError(answer.status_code, _reason(answer))
        return safe_loads(answer.content, OBJECT_LIMIT) if answer.content else None

    async def _http(self) -> httpx.AsyncClient:
        connection = self._connection()
        if connection is None:
            raise ApiError(0, "not logged in to the API server yet")
        if self._client is None or connection != self._built_for:
            old, self._client = self._client, http_client(connection, self._max_connections)
            self._built_for = connection
            if old is not None:
                await old.aclose()
        return self._client

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def _reason(answer: httpx.Response) -> str:
    """The API server's Status message, else the start of the body."""
    with contextlib.suppress(ValueError):
        status = safe_loads(answer.content, OBJECT_LIMIT)
        if isinstance(status, dict) and isinstance(status.get("message"), str):
            return str(status["message"])[:300]
    return answer.reason_phrase or answer.text[:300]
