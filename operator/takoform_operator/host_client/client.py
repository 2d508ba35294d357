"""The host client: one shared httpx.AsyncClient speaking docs/host-api.md.

Reads are retried here, briefly, on transport errors, 429 and 5xx; an answer with Retry-After is
raised at once (the CR's back-off honours it, capped). A mutation is sent exactly once: if its
answer is lost, the reconcile replays it later with the SAME idempotency key, which the host
answers with the original operation (H-28).

Every request, each retry included, is reported to an optional `observe(verb, code, seconds)`
(the operator's metrics): `verb` names the operation (`VERBS`), `code` is the HTTP status, or
`error` when no answer came (refused, timed out, TLS failure). The client knows no metrics.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any, Protocol, TypeVar
from urllib.parse import quote, urlencode

import httpx
from pydantic import ValidationError

from takoform_operator.core.depth import MAX_DEPTH, TooDeep, strict_loads
from takoform_operator.core.scrub import clip
from takoform_operator.host_client.models import Operation, Resource
from takoform_operator.host_port import (
    ERROR_CLASSES,
    HostCertificateUntrusted,
    HostError,
    HostProtocolError,
    HostRejected,
    HostThrottled,
    HostUnavailable,
    ResourceNotFound,
)
from takoform_operator.http_transport import CookielessClient, Urls, pooled_transport
from takoform_spec.host_api import ERROR_STATUS, ErrorCode
from takoform_spec.identity import FormRef

API = "/v1alpha3"
_M = TypeVar("_M", Resource, Operation)

#: The most of one answer the client reads (docs/host-api.md H-40): a larger one is refused as a
#: protocol error, never held in memory whole.
MAX_ANSWER_BYTES = 4 * 1024 * 1024
#: The most of a host's error message the client keeps (the rest is cut, and says so): enough for
#: any credential it might echo to be whole, so core.scrub finds it (the condition and Event caps
#: cut further, after the scrub).
MAX_MESSAGE_CHARS = 16 * 1024
#: Levels of objects and lists one answer may nest (core.depth): a page of representations
#: ({"items": [RESOURCE]}) and an error body nest a few levels above the deepest object the
#: operator reads. Deeper is outside the contract, a HostProtocolError, never a RecursionError.
MAX_ANSWER_DEPTH = MAX_DEPTH + 2
#: Headers that describe the bytes on the wire, not the body as read (already decoded).
_WIRE_HEADERS = ("content-encoding", "content-length", "transfer-encoding")

#: What each request does, as `observe` is told (a bounded set: a label of the metrics).
VERBS = ("read", "operation", "forms", "space", "create", "update", "delete")
#: The `code` of a request that got no answer.
NO_ANSWER = "error"

#: observe(verb, code, seconds): one request sent and answered (or not).
RequestObserver = Callable[[str, str, float], None]


def _segment(value: str) -> str:
    return quote(value, safe="")


def resource_path(space: str, ref: FormRef, name: str | None = None) -> str:
    group, version = ref.api_version.split("/", 1)
    path = (
        f"{API}/spaces/{_segment(space)}/forms/{_segment(group)}/{_segment(version)}/"
        f"{_segment(ref.kind)}/resources"
    )
    return path if name is None else f"{path}/{_segment(name)}"


def ref_query(ref: FormRef) -> dict[str, str]:
    return {"definitionVersion": ref.definition_version, "schemaDigest": ref.schema_digest}


class TokenSource(Protocol):
    """Where the bearer token comes from, so a rotated token is used without a restart."""

    async def token(self) -> str | None:
        """The token to send now (a source may re-read it on an interval)."""

    async def refresh(self) -> str | None:
        """The host refused the token (401): read it again now."""


class StaticToken:
    def __init__(self, token: str | None) -> None:
        self._token = token

    async def token(self) -> str | None:
        return self._token

    async def refresh(self) -> str | None:
        return self._token


class _BearerAuth(httpx.Auth):
    """Sets the bearer token per request; on a 401 re-reads the token once and, when it
    changed, sends the request again (a 401 is answered before anything is processed)."""

    def __init__(self, source: TokenSource) -> None:
        self._source = source

    async def async_auth_flow(
        self, request: httpx.Request
    ) -> AsyncGenerator[httpx.Request, httpx.Response]:
        token = await self._source.token()
        if token:
            request.headers["Authorization"] = f"Bearer {token}"
        response = yield request
        if response.status_code == 401:
            fresh = await self._source.refresh()
            if fresh and fresh != token:
                request.headers["Authorization"] = f"Bearer {fresh}"
                yield request


class HostClient:
    """Async client of one host. Use `async with` or call `aclose()`. `token` is a fixed token
    or a TokenSource read before every request."""

    def __init__(
        self,
        base_url: str,
        token: str | TokenSource | None,
        *,
        timeout: float = 10.0,
        read_retries: int = 3,
        max_connections: int = 20,
        verify: Any = True,
        cert: Any = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Any = asyncio.sleep,
        observe: RequestObserver | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        source = token if token is None or not isinstance(token, str) else StaticToken(token)
        self._http = CookielessClient(
            base_url=base_url,
            headers={"Accept": "application/json"},
            auth=_BearerAuth(source) if source is not None else None,
            timeout=timeout,
            verify=verify,
            cert=cert,
            transport=transport
            or pooled_transport(verify=verify, cert=cert, max_connections=max_connections),
        )
        self._source = source
        self._base = str(self._http.base_url).rstrip("/")
        self._urls = Urls()
        self._read_retries = read_retries
        self._sleep = sleep
        self._observe = observe
        self._clock = clock

    async def ready(self) -> None:
        """Have what a request needs before it is sent (the token, read once when due), so
        that a request let go now goes out now."""
        if self._source is not None:
            await self._source.token()

    async def __aenter__(self) -> HostClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    @property
    def closed(self) -> bool:
        return self._http.is_closed

    # -- reads (retried) -------------------------------------------------------------------------

    async def get_resource(self, space: str, ref: FormRef, name: str) -> Resource:
        response = await self._read("read", resource_path(space, ref, name), params=ref_query(ref))
        resource = _parse(Resource, response)
        if resource.form_ref.to_ref() != ref:
            # H-18: a host must never answer an exact-ref read with another ref's resource.
            raise HostProtocolError(
                f"asked for {name} under {ref}, the host served {resource.form_ref.to_ref()}"
            )
        for member, asked, served in (
            ("space", space, resource.metadata.space),
            ("name", name, resource.metadata.name),
        ):
            if served != asked:
                # Nothing a host says re-points the recorded target.
                raise HostProtocolError(
                    f"asked for {member} {asked!r}, the host served {member} {served!r}"
                )
        return resource

    async def find_resource(self, space: str, ref: FormRef, name: str) -> Resource | None:
        try:
            return await self.get_resource(space, ref, name)
        except ResourceNotFound:
            return None

    async def get_operation(self, operation_id: str) -> Operation:
        response = await self._read("operation", f"{API}/operations/{_segment(operation_id)}")
        return _parse(Operation, response)

    async def list_operations(self, space: str, ref: FormRef, name: str) -> list[Operation]:
        params = {"space": space, "apiVersion": ref.api_version, "kind": ref.kind, "name": name}
        response = await self._read("operation", f"{API}/operations", params=params)
        items = _json(response).get("items", [])
        try:
            return [Operation.model_validate(item) for item in items]
        except ValidationError as exc:
            raise HostProtocolError(
                f"operation list does not match the contract: {_problems(exc)}"
            ) from None

    async def list_forms(self) -> list[FormRef]:
        """Every FormRef the host serves (GET /forms): the host's status and a reachability and
        authentication probe in one."""
        items = _json(await self._read("forms", f"{API}/forms")).get("items", [])
        try:
            return [FormRef.from_json(dict(item["formRef"])) for item in items]
        except (KeyError, TypeError, ValueError) as exc:
            raise HostProtocolError(f"form list does not match the contract: {exc}") from None

    async def ensure_space(self, space: str) -> None:
        await self._send("space", "PUT", f"{API}/spaces/{_segment(space)}", body=None, headers={})

    # -- mutations (sent once) -------------------------------------------------------------------

    async def create(
        self, space: str, ref: FormRef, name: str, spec: Mapping[str, Any], key: str
    ) -> Operation:
        headers = {"If-None-Match": "*", "Idempotency-Key": key}
        return await self._mutate("create", "PUT", space, ref, name, {"spec": dict(spec)}, headers)

    async def update(
        self,
        space: str,
        ref: FormRef,
        name: str,
        spec: Mapping[str, Any],
        *,
        expected_generation: str,
        expected_uid: str,
        key: str,
    ) -> Operation:
        headers = {
            "Takoform-Expected-Generation": expected_generation,
            "Takoform-Expected-Uid": expected_uid,
            "Idempotency-Key": key,
        }
        return await self._mutate("update", "PUT", space, ref, name, {"spec": dict(spec)}, headers)

    async def delete(
        self, space: str, ref: FormRef, name: str, *, expected_uid: str, key: str
    ) -> Operation:
        headers = {"Takoform-Expected-Uid": expected_uid, "Idempotency-Key": key}
        return await self._mutate("delete", "DELETE", space, ref, name, None, headers)

    # -- plumbing --------------------------------------------------------------------------------

    async def _mutate(
        self,
        verb: str,
        method: str,
        space: str,
        ref: FormRef,
        name: str,
        body: dict[str, Any] | None,
        headers: dict[str, str],
    ) -> Operation:
        path = resource_path(space, ref, name)
        response = await self._send(
            verb, method, path, body=body, headers=headers, params=ref_query(ref)
        )
        return _parse(Operation, response)

    async def _read(
        self, verb: str, path: str, params: Mapping[str, str] | None = None
    ) -> httpx.Response:
        attempt = 0
        while True:
            try:
                return await self._send(verb, "GET", path, body=None, headers={}, params=params)
            except HostUnavailable as exc:
                # The same client would meet the same untrusted certificate: no retry. A host
                # that says when to come back (Retry-After) is answered by the CR's back-off,
                # never by sleeping here, which would hold a reconcile slot that long.
                if (
                    attempt >= self._read_retries
                    or isinstance(exc, HostCertificateUntrusted)
                    or exc.retry_after is not None
                ):
                    raise
                attempt += 1
                await self._sleep(min(0.2 * 2**attempt, 5.0))

    async def _send(
        self,
        verb: str,
        method: str,
        path: str,
        *,
        body: dict[str, Any] | None,
        headers: dict[str, str],
        params: Mapping[str, str] | None = None,
    ) -> httpx.Response:
        content = None
        if body is not None:
            content = json.dumps(body, separators=(",", ":")).encode("utf-8")
            headers = {**headers, "Content-Type": "application/json"}
        # One absolute URL, query included: httpx's merge of a relative path into base_url and
        # of params into the URL cost as much again as the rest of building the request.
        url = self._urls(self._base + path + (f"?{urlencode(params)}" if params else ""))
        request = self._http.build_request(method, url, content=content, headers=headers)
        started, code = self._clock(), NO_ANSWER
        try:
            streamed = await self._http.send(request, stream=True)
            code = str(streamed.status_code)
            try:
                response = await _bounded(streamed, f"{method} {path}")
            finally:
                await streamed.aclose()
        except httpx.TransportError as exc:
            raise _transport_failure(f"{method} {path}", exc) from exc
        except asyncio.CancelledError:
            code = ""  # the operator stopped waiting (shutdown): nothing the host did
            raise
        finally:
            if self._observe is not None and code:
                self._observe(verb, code, self._clock() - started)
        if response.status_code < 400:
            return response
        raise _translate(response)


async def _bounded(streamed: httpx.Response, request: str) -> httpx.Response:
    """The answer, read up to MAX_ANSWER_BYTES; a larger one is a protocol error (H-40)."""
    declared = streamed.headers.get("content-length", "")
    too_large = HostProtocolError(
        f"{request}: the host answered {streamed.status_code} with a body of more than "
        f"{MAX_ANSWER_BYTES // (1024 * 1024)} MiB (docs/host-api.md H-40); not read"
    )
    if declared.isdigit() and int(declared) > MAX_ANSWER_BYTES:
        raise too_large
    body = bytearray()
    async for chunk in streamed.aiter_bytes():
        body += chunk
        if len(body) > MAX_ANSWER_BYTES:
            raise too_large
    headers = [(k, v) for k, v in streamed.headers.multi_items() if k.lower() not in _WIRE_HEADERS]
    return httpx.Response(
        streamed.status_code, headers=headers, content=bytes(body), request=streamed.request
    )


def _transport_failure(request: str, exc: httpx.TransportError) -> HostUnavailable:
    """Name what failed by its cause: the transport's own class is not reliable (aiohttp's
    refused connections and TLS failures arrive as httpx.ConnectTimeout)."""
    cause: BaseException | None = exc
    verify_failure: ssl.SSLCertVerificationError | None = None
    while cause is not None:
        if isinstance(cause, ssl.SSLCertVerificationError):
            verify_failure = cause  # the innermost is ssl's own, with the verify message
        cause = cause.__cause__ or cause.__context__
    if verify_failure is not None:
        reason = getattr(verify_failure, "verify_message", None) or str(verify_failure)
        return HostCertificateUntrusted(
            f"{request}: the host's TLS certificate is not trusted: {reason}"
        )
    named: BaseException = exc.__cause__ or exc
    return HostUnavailable(f"{request}: {type(named).__name__}: {named}")


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("Retry-After")
    try:
        return max(float(value), 0.0) if value is not None else None
    except ValueError:
        return None


def _translate(response: httpx.Response) -> HostError:
    """The one place HTTP answers become typed errors."""
    status = response.status_code
    if status == 429:
        return HostThrottled(
            f"host answered 429: {clip(response.text, 200)}", retry_after=_retry_after(response)
        )
    if status >= 500:
        return HostUnavailable(
            f"host answered {status}: {clip(response.text, 200)}",
            retry_after=_retry_after(response),
        )
    try:
        error = _decoded(response)["error"]
        code, message = str(error["code"]), clip(str(error.get("message", "")), MAX_MESSAGE_CHARS)
        details = error.get("details") or {}
        if not isinstance(details, dict):
            details = {}
    except HostProtocolError as exc:  # nested too deep
        return exc
    except (ValueError, KeyError, TypeError):
        return HostProtocolError(f"host answered {status} without a contract error body")
    try:
        known = ErrorCode(code)
        cls = ERROR_CLASSES[known]
    except (ValueError, KeyError):
        return HostProtocolError(f"host answered {status} with unknown error code {code!r}")
    if ERROR_STATUS[known] != status:
        # A code is honoured only with its contract status: a 403 or 410 that says
        # resource_not_found must not unbind a Ready CR (docs/host-api.md section 9).
        return HostProtocolError(
            f"host answered {status} with error code {known}, whose contract status is "
            f"{ERROR_STATUS[known]}"
        )
    return cls(status, known, message, dict(details))


def _decoded(response: httpx.Response) -> Any:
    """The answer's JSON, decoded depth-safe (core.depth.strict_loads). Raises ValueError when
    it is not JSON, HostProtocolError when it nests deeper than MAX_ANSWER_DEPTH."""
    try:
        return strict_loads(response.content, MAX_ANSWER_DEPTH)
    except TooDeep:
        raise HostProtocolError(
            f"host answered {response.status_code} with JSON nested deeper than "
            f"{MAX_ANSWER_DEPTH} levels"
        ) from None


def _json(response: httpx.Response) -> dict[str, Any]:
    try:
        document = _decoded(response)
    except ValueError:
        raise HostProtocolError("host answered with a body that is not JSON") from None
    if not isinstance(document, dict):
        raise HostProtocolError("host answered with JSON that is not an object")
    return document


def _parse(model: type[_M], response: httpx.Response) -> _M:
    try:
        return model.model_validate(_json(response))
    except ValidationError as exc:
        raise HostProtocolError(
            f"{model.__name__} does not match the contract: {_problems(exc)}"
        ) from None


def _problems(exc: ValidationError) -> str:
    """What did not match, by location, WITHOUT the values: pydantic's own text quotes the input,
    which may be a whole representation with its sensitive outputs."""
    problems = []
    for error in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in error.get("loc", ())) or "<document>"
        problems.append(f"{where}: {error.get('msg', 'invalid')}")
    return clip("; ".join(problems), MAX_MESSAGE_CHARS)


__all__ = ["HostClient", "HostRejected"]
