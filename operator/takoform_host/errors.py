"""The host's error answer: a portable error code and its HTTP status (docs/host-api.md §9)."""

from __future__ import annotations

from typing import Any

from takoform_spec.host_api import ERROR_STATUS, ErrorCode


class HostError(Exception):
    """An error answer: a code of the closed set (section 9), its contract status, details."""

    def __init__(
        self,
        code: ErrorCode,
        message: str,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        status = ERROR_STATUS[code]
        if status is None:
            raise ValueError(f"{code} is only a failed operation's error, never an answer")
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.details = details or {}
        self.headers = headers or {}
