"""The host token read from a file on every change: a Secret mounted as a volume is updated in
place by the kubelet when the Secret changes, so a rotated token is used without a restart."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import httpx

logger = logging.getLogger("takoform_operator")


class TokenFile:
    """The token in `path`, re-read when the file's identity or mtime changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._token = ""

    def get(self) -> str:
        st = os.stat(self.path)  # follows the kubelet's ..data symlink to the current file
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp != self._stamp:
            token = self.path.read_text(encoding="utf-8").strip()
            if self._stamp is not None and token != self._token:
                logger.info("host token re-read from %s (changed)", self.path)
            self._token, self._stamp = token, stamp
        return self._token


class TokenFileTransport(httpx.AsyncBaseTransport):
    """Sets `Authorization: Bearer <token from the file>` on every request, then sends it."""

    def __init__(self, inner: httpx.AsyncBaseTransport, token: TokenFile) -> None:
        self._inner = inner
        self._token = token

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["Authorization"] = f"Bearer {self._token.get()}"
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def token_file_transport(
    path: Path, *, verify: object, cert: object, max_connections: int
) -> TokenFileTransport:
    """A transport re-reading the token from `path`; httpx ignores verify, cert and limits when
    given a transport, so they go to the inner one here."""
    return TokenFileTransport(
        httpx.AsyncHTTPTransport(
            verify=verify,  # type: ignore[arg-type]
            cert=cert,  # type: ignore[arg-type]
            limits=httpx.Limits(max_connections=max_connections),
        ),
        TokenFile(path),
    )
