"""The host's error answer: an HTTP status and a portable error code (docs/host-api.md §9)."""

from __future__ import annotations

from typing import Any


class HostError(Exception):
    """An error answer: HTTP status, a code of the closed set (section 9), details."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details = details or {}
        self.headers = headers or {}
