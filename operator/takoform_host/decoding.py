"""Request decoding for the host API: raw path routing, bearer tokens, JSON bodies, parameters.

Routing is done on the RAW path (each segment percent-decoded on its own), so a space or name
containing an encoded `/` reaches validation and is refused with 400 (H-5) instead of being
mistaken for another route. Bodies are JSON objects in UTF-8 under a size limit (H-1, H-4).
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.requests import Request
from starlette.responses import Response

from takoform_spec.errors import InvalidName, InvalidSpaceId
from takoform_spec.host_api import ErrorCode
from takoform_spec.identity import FormLine, validate_resource_name, validate_space_id

from .errors import HostError
from .rules import Mutation, fingerprint

_DECIMAL = re.compile(r"^(0|[1-9][0-9]*)$")


class Route_:
    def __init__(self, pattern: str, handlers: dict[str, Callable[..., Awaitable[Response]]]):
        self.parts = pattern.strip("/").split("/")
        self.handlers = handlers

    def match(self, segments: list[str]) -> dict[str, str] | None:
        if len(segments) != len(self.parts):
            return None
        params: dict[str, str] = {}
        for part, segment in zip(self.parts, segments, strict=True):
            if part.startswith("{"):
                params[part[1:-1]] = segment
            elif part != segment:
                return None
        return params


def raw_path(request: Request) -> str:
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    return raw.decode("latin-1")


def path_segments(raw: str) -> list[str]:
    """Each segment of the raw path percent-decoded on its own (H-5)."""
    segments = []
    for segment in raw.strip("/").split("/"):
        try:
            segments.append(unquote_to_bytes(segment).decode("utf-8"))
        except UnicodeDecodeError:
            raise HostError(
                ErrorCode.INVALID_REQUEST, "a path segment is not valid UTF-8"
            ) from None
    return segments


# -- authentication ----------------------------------------------------------------------------


def token_in(token: str | None, accepted: list[str]) -> bool:
    if not token:
        return False
    found = False
    for candidate in accepted:
        found |= hmac.compare_digest(token.encode(), candidate.encode())
    return found


def bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


# -- bodies ------------------------------------------------------------------------------------


async def body_json(request: Request, max_body: int, *, lenient_content_type: bool) -> Any:
    """The request body as JSON (H-1, H-4). `None` when there is no body."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > max_body:
        raise too_large(max_body)
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > max_body:
            raise too_large(max_body)
    body = bytes(chunks)
    if not body and request.headers.get("content-type") is None:
        return None
    if not lenient_content_type:
        check_content_type(request.headers.get("content-type"))
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as exc:
        raise HostError(ErrorCode.INVALID_REQUEST, f"the body is not valid JSON: {exc}") from None


def too_large(max_body: int) -> HostError:
    return HostError(
        ErrorCode.PAYLOAD_TOO_LARGE,
        f"the body exceeds this host's limit of {max_body} bytes",
        {"limit": max_body},
    )


def check_content_type(value: str | None) -> None:
    if value is None:
        raise HostError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "Content-Type: application/json needed")
    media, *params = (part.strip() for part in value.split(";"))
    charset_ok = all(
        p.lower().replace(" ", "") in ("charset=utf-8", 'charset="utf-8"')
        for p in params
        if p.lower().startswith("charset")
    )
    if media.lower() != "application/json" or not charset_ok:
        raise HostError(
            ErrorCode.UNSUPPORTED_MEDIA_TYPE,
            f"Content-Type {value!r} is not application/json (UTF-8)",
            {"contentType": value},
        )


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# -- path and query parameters -----------------------------------------------------------------


def space_param(space: str) -> str:
    try:
        return validate_space_id(space)
    except InvalidSpaceId as exc:
        raise HostError(ErrorCode.INVALID_REQUEST, str(exc), {"space": space}) from None


def name_param(name: str) -> str:
    try:
        return validate_resource_name(name)
    except InvalidName as exc:
        raise HostError(ErrorCode.INVALID_REQUEST, str(exc), {"name": name}) from None


def line_param(group: str, version: str, kind: str) -> FormLine:
    return FormLine(f"{group}/{version}", kind)


def ref_params(request: Request, *, allow_missing: bool) -> tuple[str | None, str | None]:
    """definitionVersion and schemaDigest from the query; both required unless `allow_missing`."""
    q = request.query_params
    version, digest = q.get("definitionVersion") or None, q.get("schemaDigest") or None
    if (version is None or digest is None) and not allow_missing:
        missing = [
            n for n, v in (("definitionVersion", version), ("schemaDigest", digest)) if v is None
        ]
        raise HostError(
            ErrorCode.INVALID_REQUEST,
            "the query parameters definitionVersion and schemaDigest are both required "
            f"(missing: {', '.join(missing)})",
            {"missing": missing},
        )
    return version, digest


def canonical_decimal(value: str) -> bool:
    return bool(_DECIMAL.match(value))


def mutation(
    request: Request,
    space: str,
    line: FormLine,
    name: str,
    version: str | None,
    digest: str | None,
    body: Any,
) -> Mutation:
    """A PUT or DELETE of a resource, its fences and its Idempotency-Key checked for syntax."""
    headers = request.headers
    fences = {
        "ifNoneMatch": headers.get("if-none-match"),
        "ifMatch": headers.get("if-match"),
        "expectedGeneration": headers.get("takoform-expected-generation"),
        "expectedUid": headers.get("takoform-expected-uid"),
    }
    generation = fences["expectedGeneration"]
    if generation is not None:
        generation = generation.strip()
        if not canonical_decimal(generation):
            raise HostError(
                ErrorCode.INVALID_REQUEST,
                "Takoform-Expected-Generation must be a canonical decimal string",
                {"value": generation},
            )
    key = headers.get("idempotency-key")
    if key is not None and not (0 < len(key) <= 255):
        raise HostError(ErrorCode.INVALID_REQUEST, "Idempotency-Key must be 1-255 characters")
    path = (request.scope.get("raw_path") or b"").decode("latin-1")
    return Mutation(
        method=request.method,
        space=space,
        line=line,
        name=name,
        definition_version=version,
        schema_digest=digest,
        body=body,
        if_none_match=fences["ifNoneMatch"],
        if_match=fences["ifMatch"],
        expected_generation=generation,
        expected_uid=fences["expectedUid"],
        idempotency_key=key,
        fingerprint=fingerprint(
            request.method,
            path,
            {"definitionVersion": version, "schemaDigest": digest},
            fences,
            body,
        ),
    )
