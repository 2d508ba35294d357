"""The host token read from a file on every change: a Secret mounted as a volume is updated in
place by the kubelet when the Secret changes, so a rotated token is used without a restart.
`FileToken` is the TokenSource the host client takes."""

from __future__ import annotations

import logging
import os
from pathlib import Path

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


class FileToken:
    """A TokenSource over a token file (TAKOFORM_HOST_TOKEN_FILE): every request carries what
    the file holds now; a stat per request is all it costs."""

    def __init__(self, path: Path) -> None:
        self._file = TokenFile(path)

    async def token(self) -> str | None:
        return self._file.get() or None

    async def refresh(self) -> str | None:
        return self._file.get() or None
