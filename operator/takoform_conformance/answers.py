"""Reading a host's answers: the error body of H-2, ETags, short descriptions for failures."""

from __future__ import annotations

from typing import Any

import httpx


def describe(response: httpx.Response) -> str:
    """A short description of a response for failure messages."""
    code = error_code(response)
    if code is not None:
        message = response.json()["error"].get("message", "")
        return f"{response.status_code} {code} ({clip(str(message))})"
    return f"{response.status_code} {clip(response.text)!r}"


def clip(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_code(response: httpx.Response) -> str | None:
    """The `error.code` of an error body, or None when the body is not the H-2 shape."""
    try:
        body = response.json()
    except ValueError:
        return None
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        return code if isinstance(code, str) else None
    return None


def error_details(response: httpx.Response) -> dict[str, Any]:
    details = response.json()["error"].get("details")
    return details if isinstance(details, dict) else {}


def unquote_etag(value: object) -> str:
    text = str(value)
    if text.startswith("W/"):
        text = text[2:]
    return text.strip('"')
