"""The HTTP client stack under the operator's clients (host and Kubernetes API): httpx's API over
aiohttp's connection pool, with no cookie handling at either level."""

from __future__ import annotations

from typing import Any

import aiohttp
import httpx
from httpx_aiohttp import AiohttpTransport


def pooled_transport(*, verify: Any, cert: Any, max_connections: int) -> httpx.AsyncBaseTransport:
    """A transport for one httpx.AsyncClient (host or Kubernetes API).

    httpx's own pool (httpcore over anyio) was about half of the operator's CPU under load;
    aiohttp's connector (kopf already runs on aiohttp) does the same requests for about half the
    CPU (docs/performance.md). Failures still arrive as httpx.TransportError subclasses, and the
    client's timeouts still apply, so the callers are unchanged."""
    limits = httpx.Limits(max_connections=max_connections)
    transport = AiohttpTransport(verify=verify, cert=cert, limits=limits)
    ssl_context = transport.ssl_context

    def session() -> aiohttp.ClientSession:
        # Built on the first request, inside the running event loop (as the transport would).
        connector = aiohttp.TCPConnector(
            ssl=ssl_context, limit=max_connections, keepalive_timeout=limits.keepalive_expiry
        )
        return aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar())

    transport.client = session
    return transport


class _NoCookies(httpx.Cookies):
    """A jar that keeps nothing: httpx otherwise runs every answer's headers through urllib's
    cookie machinery (about 5 % of the operator's CPU under load)."""

    def extract_cookies(self, response: httpx.Response) -> None:
        return None


class CookielessClient(httpx.AsyncClient):
    """An httpx.AsyncClient that neither keeps nor sends cookies: neither the host API
    (docs/host-api.md) nor the Kubernetes API uses them."""

    @property
    def cookies(self) -> httpx.Cookies:
        return _NoCookies()

    @cookies.setter
    def cookies(self, cookies: Any) -> None:
        return None


class Urls:
    """Parsed URLs, kept for reuse: httpx parses a URL string in Python, character by character
    (a third of building a request), and a CR's requests go to the same few URLs again and
    again (its resource's read, create and polls; its status), mostly within one reconcile.
    httpx.URL is immutable. At most `limit` are kept, when full the cache starts over: a
    reconcile uses a few URLs, so 512 hold those of a hundred reconciles in flight, and every
    URL kept is two objects more for each full garbage collection to walk and about 350 bytes
    held (docs/performance.md)."""

    def __init__(self, limit: int = 512) -> None:
        self._limit = limit
        self._parsed: dict[str, httpx.URL] = {}

    def __call__(self, text: str) -> httpx.URL:
        url = self._parsed.get(text)
        if url is None:
            if len(self._parsed) >= self._limit:
                self._parsed.clear()
            url = self._parsed[text] = httpx.URL(text)
        return url
