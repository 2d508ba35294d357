"""The HTTP layer: a Starlette application over `engine.Host`.

Routing is done on the RAW path (each segment percent-decoded on its own), so a space or name
containing an encoded `/` reaches validation and is refused with 400 (H-5) instead of being
mistaken for another route. Errors are always the JSON body of H-2; a bug answers `500 internal`
with a safe message and the traceback goes to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote_to_bytes

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from takoform_spec.errors import InvalidName, InvalidSpaceId
from takoform_spec.identity import FormLine, validate_resource_name, validate_space_id

from . import ADMIN_PREFIX, API_PREFIX
from .engine import Host, HostError, Mutation, canonical_decimal, dumps, fingerprint
from .misbehaviours import MISBEHAVIOURS, InvalidFaults, UnknownMisbehaviour, check_misbehaviours

log = logging.getLogger("takoform_host")

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
SETTLE_INTERVAL = 0.025


@dataclass
class Auth:
    tokens: list[str]
    admin_tokens: list[str] = field(default_factory=list)


def _token_in(token: str | None, accepted: list[str]) -> bool:
    if not token:
        return False
    found = False
    for candidate in accepted:
        found |= hmac.compare_digest(token.encode(), candidate.encode())
    return found


def _bearer(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return None
    return token.strip() or None


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


class HostApp:
    """Builds the Starlette app; holds the engine, the tokens and the body limit."""

    def __init__(self, host: Host, auth: Auth, max_body: int) -> None:
        self.host = host
        self.auth = auth
        self.max_body = max_body
        api, admin = API_PREFIX, ADMIN_PREFIX
        resource = api + "/spaces/{space}/forms/{group}/{version}/{kind}/resources"
        self.routes = [
            Route_("/healthz", {"GET": self.healthz}),
            Route_(api + "/spaces", {"GET": self.list_spaces}),
            Route_(
                api + "/spaces/{space}",
                {"GET": self.get_space, "PUT": self.put_space, "DELETE": self.delete_space},
            ),
            Route_(api + "/forms", {"GET": self.list_forms}),
            Route_(
                api + "/forms/{group}/{version}/{kind}/availability", {"GET": self.availability}
            ),
            Route_(api + "/forms/{group}/{version}/{kind}/definition", {"GET": self.definition}),
            Route_(resource, {"GET": self.list_resources}),
            Route_(
                resource + "/{name}",
                {"GET": self.get_resource, "PUT": self.mutate, "DELETE": self.mutate},
            ),
            Route_(resource + "/{name}/observe", {"POST": self.observe}),
            Route_(api + "/operations", {"GET": self.list_operations}),
            Route_(api + "/operations/{id}", {"GET": self.get_operation}),
            Route_(
                admin + "/misbehaviours",
                {"GET": self.get_misbehaviours, "PUT": self.put_misbehaviours},
            ),
            Route_(admin + "/faults", {"GET": self.get_faults, "PUT": self.put_faults}),
            Route_(admin + "/operations/expire", {"POST": self.expire_operations}),
            Route_(admin + "/resources/recreate", {"POST": self.recreate_resource}),
            Route_(admin + "/resources/delete", {"POST": self.delete_resource_oob}),
            Route_(admin + "/packages/activate", {"POST": self.activate_package}),
        ]
        self.ready = False

    def build(self) -> Starlette:
        return Starlette(
            routes=[Route("/{path:path}", self.endpoint, methods=ALL_METHODS)],
            middleware=[Middleware(FaultMiddleware, owner=self)],
            lifespan=self.lifespan,
        )

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        self.host.settle_due()
        task = asyncio.create_task(self._settle_loop())
        self.ready = True
        log.info("takoform-host ready")
        try:
            yield
        finally:
            self.ready = False
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            self.host.close()

    async def _settle_loop(self) -> None:
        while True:
            await asyncio.sleep(SETTLE_INTERVAL)
            try:
                self.host.settle_due()
            except Exception:
                log.exception("settling operations failed")

    # -- responses ---------------------------------------------------------------------------

    def json(self, status: int, doc: Any, headers: dict[str, str] | None = None) -> Response:
        return self.raw(status, dumps(doc).encode("utf-8"), headers)

    @staticmethod
    def raw(status: int, body: bytes, headers: dict[str, str] | None = None) -> Response:
        return Response(body, status_code=status, headers=headers, media_type="application/json")

    def error(self, exc: HostError) -> Response:
        code = exc.code
        if exc.status == 404 and self.host.on("unknown-error-codes"):
            code = "not_found_generic"
        if self.host.on("plain-text-errors"):
            return Response(
                f"{code}: {exc.message}\n",
                status_code=exc.status,
                headers=exc.headers,
                media_type="text/plain",
            )
        body = {"error": {"code": code, "message": exc.message, "details": exc.details}}
        return self.json(exc.status, body, exc.headers)

    def representation(self, status: int, doc: dict[str, Any]) -> Response:
        return self.json(status, self.host.present(doc), {"ETag": self.host.etag(doc)})

    # -- dispatch ----------------------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        try:
            return await self.dispatch(request)
        except HostError as exc:
            return self.error(exc)
        except Exception:
            log.exception("internal error serving %s %s", request.method, request.url.path)
            return self.error(
                HostError(500, "internal", "the host failed to serve this request; see its log")
            )

    async def dispatch(self, request: Request) -> Response:
        raw_path: bytes = request.scope.get("raw_path") or request.url.path.encode()
        raw = raw_path.decode("latin-1")
        admin = raw == ADMIN_PREFIX or raw.startswith(ADMIN_PREFIX + "/")
        if raw != "/healthz":
            self.authenticate(request, admin)
        segments = []
        for segment in raw.strip("/").split("/"):
            try:
                segments.append(unquote_to_bytes(segment).decode("utf-8"))
            except UnicodeDecodeError:
                raise HostError(
                    400, "invalid_request", "a path segment is not valid UTF-8"
                ) from None
        for route in self.routes:
            params = route.match(segments)
            if params is None:
                continue
            handler = route.handlers.get(request.method)
            if handler is None:
                raise HostError(
                    405,
                    "method_not_allowed",
                    f"{request.method} is not allowed here; allowed: {', '.join(route.handlers)}",
                    {"allowed": list(route.handlers)},
                    {"Allow": ", ".join(route.handlers)},
                )
            if not admin and route.parts[0] != "healthz":
                self.host.settle_due()  # reads see every commit that is due (deterministic)
            return await handler(request, **params)
        raise HostError(404, "route_not_found", f"no endpoint {request.method} {raw}")

    def authenticate(self, request: Request, admin: bool) -> None:
        token = _bearer(request)
        challenge = {"WWW-Authenticate": 'Bearer realm="takoform-host"'}
        if admin:
            if _token_in(token, self.auth.admin_tokens):
                return
            if _token_in(token, self.auth.tokens):
                raise HostError(403, "forbidden", "the admin API needs the admin token")
            raise HostError(401, "unauthenticated", "missing or wrong admin token", {}, challenge)
        if self.host.on("accept-any-token") or _token_in(token, self.auth.tokens):
            return
        raise HostError(401, "unauthenticated", "missing or wrong bearer token", {}, challenge)

    async def body_json(self, request: Request) -> Any:
        """The request body as JSON (H-1, H-4). `None` when there is no body."""
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            raise self._too_large()
        chunks = bytearray()
        async for chunk in request.stream():
            chunks += chunk
            if len(chunks) > self.max_body:
                raise self._too_large()
        body = bytes(chunks)
        if not body and request.headers.get("content-type") is None:
            return None
        if not self.host.on("lenient-content-type"):
            self._check_content_type(request.headers.get("content-type"))
        try:
            return json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
        except (UnicodeDecodeError, ValueError) as exc:
            raise HostError(400, "invalid_request", f"the body is not valid JSON: {exc}") from None

    def _too_large(self) -> HostError:
        return HostError(
            413,
            "payload_too_large",
            f"the body exceeds this host's limit of {self.max_body} bytes",
            {"limit": self.max_body},
        )

    @staticmethod
    def _check_content_type(value: str | None) -> None:
        if value is None:
            raise HostError(415, "unsupported_media_type", "Content-Type: application/json needed")
        media, *params = (part.strip() for part in value.split(";"))
        charset_ok = all(
            p.lower().replace(" ", "") in ("charset=utf-8", 'charset="utf-8"')
            for p in params
            if p.lower().startswith("charset")
        )
        if media.lower() != "application/json" or not charset_ok:
            raise HostError(
                415,
                "unsupported_media_type",
                f"Content-Type {value!r} is not application/json (UTF-8)",
                {"contentType": value},
            )

    # -- path parameters ---------------------------------------------------------------------

    @staticmethod
    def _space(space: str) -> str:
        try:
            return validate_space_id(space)
        except InvalidSpaceId as exc:
            raise HostError(400, "invalid_request", str(exc), {"space": space}) from None

    @staticmethod
    def _name(name: str) -> str:
        try:
            return validate_resource_name(name)
        except InvalidName as exc:
            raise HostError(400, "invalid_request", str(exc), {"name": name}) from None

    @staticmethod
    def _line(group: str, version: str, kind: str) -> FormLine:
        return FormLine(f"{group}/{version}", kind)

    @staticmethod
    def _ref_params(request: Request) -> tuple[str | None, str | None]:
        q = request.query_params
        return q.get("definitionVersion") or None, q.get("schemaDigest") or None

    def _require_ref_params(self, request: Request) -> tuple[str | None, str | None]:
        version, digest = self._ref_params(request)
        if (version is None or digest is None) and not self.host.on("default-missing-formref"):
            missing = [
                n
                for n, v in (("definitionVersion", version), ("schemaDigest", digest))
                if v is None
            ]
            raise HostError(
                400,
                "invalid_request",
                "the query parameters definitionVersion and schemaDigest are both required "
                f"(missing: {', '.join(missing)})",
                {"missing": missing},
            )
        return version, digest

    # -- handlers: health, spaces ------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        if not self.ready:
            return self.json(503, {"ok": False})
        return self.json(200, {"ok": True})

    async def list_spaces(self, request: Request) -> Response:
        return self.json(200, {"items": self.host.list_spaces()})

    async def get_space(self, request: Request, space: str) -> Response:
        return self.json(200, {"space": self.host.get_space(self._space(space))})

    async def put_space(self, request: Request, space: str) -> Response:
        created, doc = self.host.put_space(self._space(space))
        return self.json(201 if created else 200, {"space": doc})

    async def delete_space(self, request: Request, space: str) -> Response:
        self.host.delete_space(self._space(space))
        return Response(status_code=204)

    # -- handlers: forms ---------------------------------------------------------------------

    async def list_forms(self, request: Request) -> Response:
        return self.json(
            200, {"items": [self.host.form_item(ref) for ref in self.host.forms.all_refs()]}
        )

    async def availability(self, request: Request, group: str, version: str, kind: str) -> Response:
        dv, sd = self._require_ref_params(request)
        ref, _ = self.host.resolve(self._line(group, version, kind), dv, sd)
        return self.json(200, {"formRef": ref.to_json(), "available": True})

    async def definition(self, request: Request, group: str, version: str, kind: str) -> Response:
        dv, sd = self._require_ref_params(request)
        ref, _ = self.host.resolve(self._line(group, version, kind), dv, sd)
        schema = self.host.forms.schema(ref, alter=self.host.on("serve-wrong-schema"))
        doc = {
            "formRef": ref.to_json(),
            "schema": schema,
            "packageDigests": self.host.forms.package_digests(ref),
            "activePackageDigest": self.host.forms.active_package(ref),
        }
        return self.json(200, doc)

    # -- handlers: resources -----------------------------------------------------------------

    async def list_resources(
        self, request: Request, space: str, group: str, version: str, kind: str
    ) -> Response:
        space = self._space(space)
        dv, sd = self._require_ref_params(request)
        items = self.host.list_resources(space, self._line(group, version, kind), dv, sd)
        return self.json(200, {"items": items})

    async def get_resource(
        self, request: Request, space: str, group: str, version: str, kind: str, name: str
    ) -> Response:
        space, name = self._space(space), self._name(name)
        dv, sd = self._require_ref_params(request)
        res = self.host.read(space, self._line(group, version, kind), name, dv, sd)
        return self.representation(200, res.doc)

    async def observe(
        self, request: Request, space: str, group: str, version: str, kind: str, name: str
    ) -> Response:
        space, name = self._space(space), self._name(name)
        dv, sd = self._require_ref_params(request)
        doc = self.host.observe(space, self._line(group, version, kind), name, dv, sd)
        return self.representation(200, doc)

    async def mutate(
        self, request: Request, space: str, group: str, version: str, kind: str, name: str
    ) -> Response:
        space, name = self._space(space), self._name(name)
        dv, sd = self._require_ref_params(request)
        headers = request.headers
        body: Any = None
        if request.method == "PUT":
            body = await self.body_json(request)
            if body is None:
                raise HostError(415, "unsupported_media_type", "a PUT needs a JSON body")
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
                    400,
                    "invalid_request",
                    "Takoform-Expected-Generation must be a canonical decimal string",
                    {"value": generation},
                )
        key = headers.get("idempotency-key")
        if key is not None and not (0 < len(key) <= 255):
            raise HostError(400, "invalid_request", "Idempotency-Key must be 1-255 characters")
        raw_path = (request.scope.get("raw_path") or b"").decode("latin-1")
        m = Mutation(
            method=request.method,
            space=space,
            line=self._line(group, version, kind),
            name=name,
            definition_version=dv,
            schema_digest=sd,
            body=body,
            if_none_match=fences["ifNoneMatch"],
            if_match=fences["ifMatch"],
            expected_generation=generation,
            expected_uid=fences["expectedUid"],
            idempotency_key=key,
            fingerprint=fingerprint(
                request.method,
                raw_path,
                {"definitionVersion": dv, "schemaDigest": sd},
                fences,
                body,
            ),
        )
        reply = self.host.mutate(m)
        return self.raw(reply.status, reply.body, reply.headers)

    # -- handlers: operations ----------------------------------------------------------------

    async def get_operation(self, request: Request, id: str) -> Response:
        status, body = self.host.get_operation(id)
        return self.raw(status, body)

    async def list_operations(self, request: Request) -> Response:
        filters = {
            key: value
            for key in ("space", "apiVersion", "kind", "name")
            if (value := request.query_params.get(key))
        }
        if "space" not in filters:
            # A host-wide listing would leak operations across spaces.
            raise HostError(400, "invalid_request", "the space filter is required")
        return self.raw(200, self.host.list_operations(filters))

    # -- handlers: admin ---------------------------------------------------------------------

    def _misbehaviours_doc(self) -> dict[str, Any]:
        return {
            "enabled": sorted(self.host.settings.misbehaviours),
            "available": [
                {"name": name, "breaks": rule, "description": what}
                for name, (rule, what) in MISBEHAVIOURS.items()
            ],
        }

    async def get_misbehaviours(self, request: Request) -> Response:
        return self.json(200, self._misbehaviours_doc())

    async def put_misbehaviours(self, request: Request) -> Response:
        body = await self.body_json(request)
        names = body.get("enabled") if isinstance(body, dict) else None
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise HostError(400, "invalid_request", 'body must be {"enabled": ["name", ...]}')
        try:
            enabled = check_misbehaviours(names)
        except UnknownMisbehaviour as exc:
            raise HostError(400, "invalid_request", str(exc)) from None
        self.host.settings.misbehaviours = set(enabled)
        log.info("misbehaviours now %s", sorted(enabled) or "none")
        return self.json(200, self._misbehaviours_doc())

    async def get_faults(self, request: Request) -> Response:
        return self.json(200, self.host.faults.to_json())

    async def put_faults(self, request: Request) -> Response:
        body = await self.body_json(request)
        try:
            self.host.faults.merge(body)
        except InvalidFaults as exc:
            raise HostError(400, "invalid_request", str(exc)) from None
        log.info("faults now %s", self.host.faults.to_json())
        return self.json(200, self.host.faults.to_json())

    async def expire_operations(self, request: Request) -> Response:
        body = await self.body_json(request)
        body = {} if body is None else body
        ids = body.get("ids") if isinstance(body, dict) else None
        if not isinstance(body, dict) or (
            ids is not None
            and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids))
        ):
            raise HostError(400, "invalid_request", 'body must be {"ids": ["op-...", ...]} or {}')
        return self.json(200, self.host.admin_expire(ids))

    async def recreate_resource(self, request: Request) -> Response:
        doc = self.host.admin_recreate(await self.body_json(request))
        return self.representation(200, doc)

    async def delete_resource_oob(self, request: Request) -> Response:
        return self.json(200, self.host.admin_delete(await self.body_json(request)))

    async def activate_package(self, request: Request) -> Response:
        return self.json(200, self.host.admin_activate(await self.body_json(request)))


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class FaultMiddleware:
    """Latency, 5xx and dropped connections for the host API (never admin, never /healthz)."""

    def __init__(self, app: ASGIApp, owner: HostApp) -> None:
        self.app = app
        self.owner = owner

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if not path or path == "/healthz" or path.startswith(ADMIN_PREFIX):
            await self.app(scope, receive, send)
            return
        faults = self.owner.host.faults
        if faults.latencyMs:
            await asyncio.sleep(faults.latencyMs / 1000.0)
        if faults.dropRate and random.random() < faults.dropRate:
            cycle = getattr(receive, "__self__", None)
            transport = getattr(cycle, "transport", None)
            if transport is not None:
                transport.abort()
                cycle.disconnected = True  # type: ignore[union-attr]
                return
            raise ConnectionAbortedError("dropped by the dropRate fault")
        if faults.errorRate and random.random() < faults.errorRate:
            body = {
                "error": {
                    "code": "unavailable",
                    "message": "the host is unavailable (errorRate fault)",
                    "details": {},
                }
            }
            response = Response(
                dumps(body),
                status_code=503,
                headers={"Retry-After": "1"},
                media_type="application/json",
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
