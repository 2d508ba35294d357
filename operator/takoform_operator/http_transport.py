"""The connection pool under the operator's HTTP clients: aiohttp's, behind httpx's API."""

from __future__ import annotations

from typing import Any

import httpx
from httpx_aiohttp import AiohttpTransport


def pooled_transport(*, verify: Any, cert: Any, max_connections: int) -> httpx.AsyncBaseTransport:
    """A transport for one httpx.AsyncClient (host or Kubernetes API).

    httpx's own pool (httpcore over anyio) was about half of the operator's CPU under load;
    aiohttp's connector (kopf already runs on aiohttp) does the same requests for about half the
    CPU (docs/performance.md). Failures still arrive as httpx.TransportError subclasses, and the
    client's timeouts still apply, so the callers are unchanged."""
    return AiohttpTransport(
        verify=verify, cert=cert, limits=httpx.Limits(max_connections=max_connections)
    )
