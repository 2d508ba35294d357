"""The HTTP layer: a Starlette application over the host's rules, and every answer's encoding.

Requests are decoded in `decoding.py`; the rules (`rules.py`) and the admin actions (`admin.py`)
answer with documents, operation records or a `HostError`, and this module turns each into a
status line, headers and a body. Errors are always the JSON body of H-2; a bug answers
`500 internal` with a safe message and the traceback goes to the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from takoform_spec.host_api import ErrorCode
from takoform_spec.identity import FormLine

from . import ADMIN_PREFIX, API_PREFIX
from .admin import Admin
from .decoding import (
    Route_,
    bearer,
    body_json,
    line_param,
    mutation,
    name_param,
    path_segments,
    raw_path,
    ref_params,
    space_param,
    token_in,
)
from .errors import HostError
from .misbehaviours import OVERSIZED_PADDING, served, served_record
from .operations import OperationRecord
from .rules import Host
from .storage import dumps

log = logging.getLogger("takoform_host")

ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
SETTLE_INTERVAL = 0.025


@dataclass
class Auth:
    tokens: list[str]
    admin_tokens: list[str] = field(default_factory=list)


class HostApp:
    """Builds the Starlette app; holds the host, its admin actions, the tokens, the body limit."""

    def __init__(self, host: Host, auth: Auth, max_body: int) -> None:
        self.host = host
        self.admin = Admin(host)
        self.auth = auth
        self.max_body = max_body
        api, admin = API_PREFIX, ADMIN_PREFIX
        resource = api + "/spaces/{space}/forms/{group}/{version}/{kind}/resources"
        act = self._admin_action
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
                {
                    "GET": act(self.admin.misbehaviours, body=False),
                    "PUT": act(self.admin.set_misbehaviours),
                },
            ),
            Route_(
                admin + "/faults",
                {"GET": act(self.admin.faults, body=False), "PUT": act(self.admin.merge_faults)},
            ),
            Route_(admin + "/operations/expire", {"POST": act(self.admin.expire)}),
            Route_(
                admin + "/resources/recreate",
                {"POST": act(self.admin.recreate, representation=True)},
            ),
            Route_(admin + "/resources/delete", {"POST": act(self.admin.delete)}),
            Route_(
                admin + "/resources/conditions",
                {"POST": act(self.admin.set_conditions, representation=True)},
            ),
            Route_(admin + "/resources/rotate-secrets", {"POST": act(self.admin.rotate_secrets)}),
            Route_(admin + "/packages/activate", {"POST": act(self.admin.activate)}),
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
        code: str = exc.code
        status, message = exc.status, exc.message
        if status == 404 and self.host.on("unknown-error-codes"):
            code = "not_found_generic"  # outside the closed set, on purpose
        if code == ErrorCode.RESOURCE_NOT_FOUND and self.host.on("misstatus-not-found"):
            status = 410  # a code with another status than its contract's, on purpose
        if self.host.on("oversized-errors"):
            message = f"{message} {'x' * OVERSIZED_PADDING}"
        if self.host.on("plain-text-errors"):
            return Response(
                f"{code}: {message}\n",
                status_code=status,
                headers=exc.headers,
                media_type="text/plain",
            )
        body = {"error": {"code": code, "message": message, "details": exc.details}}
        return self.json(status, body, exc.headers)

    def representation(self, status: int, doc: dict[str, Any]) -> Response:
        return self.json(status, served(doc, self.host.settings), {"ETag": self.etag(doc)})

    def etag(self, doc: dict[str, Any]) -> str:
        """The strong ETag of a representation: its quoted revision."""
        tag = f'"{doc["metadata"]["revision"]}"'
        return "W/" + tag if self.host.on("weak-etag") else tag

    def operation(self, record: OperationRecord) -> Response:
        """The answer to a mutation: its record, 202 while running, 200 once settled (H-28)."""
        location = {"Location": f"{API_PREFIX}/operations/{record.id}"}
        body = served_record(record.body, self.host.settings)
        return self.raw(202 if record.running else 200, body, location)

    # -- dispatch ----------------------------------------------------------------------------

    async def endpoint(self, request: Request) -> Response:
        try:
            return await self.dispatch(request)
        except HostError as exc:
            return self.error(exc)
        except Exception:
            log.exception("internal error serving %s %s", request.method, request.url.path)
            return self.error(
                HostError(ErrorCode.INTERNAL, "the host failed to serve this request; see its log")
            )

    async def dispatch(self, request: Request) -> Response:
        raw = raw_path(request)
        admin = raw == ADMIN_PREFIX or raw.startswith(ADMIN_PREFIX + "/")
        if raw != "/healthz":
            self.authenticate(request, admin)
        segments = path_segments(raw)
        for route in self.routes:
            params = route.match(segments)
            if params is None:
                continue
            handler = route.handlers.get(request.method)
            if handler is None:
                raise HostError(
                    ErrorCode.METHOD_NOT_ALLOWED,
                    f"{request.method} is not allowed here; allowed: {', '.join(route.handlers)}",
                    {"allowed": list(route.handlers)},
                    {"Allow": ", ".join(route.handlers)},
                )
            if not admin and route.parts[0] != "healthz":
                self.host.settle_due()  # reads see every commit that is due (deterministic)
            return await handler(request, **params)
        raise HostError(ErrorCode.ROUTE_NOT_FOUND, f"no endpoint {request.method} {raw}")

    def authenticate(self, request: Request, admin: bool) -> None:
        token = bearer(request)
        challenge = {"WWW-Authenticate": 'Bearer realm="takoform-host"'}
        if admin:
            if token_in(token, self.auth.admin_tokens):
                return
            if token_in(token, self.auth.tokens):
                raise HostError(ErrorCode.FORBIDDEN, "the admin API needs the admin token")
            raise HostError(
                ErrorCode.UNAUTHENTICATED, "missing or wrong admin token", {}, challenge
            )
        if self.host.on("accept-any-token") or token_in(token, self.auth.tokens):
            return
        raise HostError(ErrorCode.UNAUTHENTICATED, "missing or wrong bearer token", {}, challenge)

    async def body_json(self, request: Request) -> Any:
        lenient = self.host.on("lenient-content-type")
        return await body_json(request, self.max_body, lenient_content_type=lenient)

    def _ref_params(self, request: Request) -> tuple[str | None, str | None]:
        return ref_params(request, allow_missing=self.host.on("default-missing-formref"))

    def _named(
        self, request: Request, space: str, group: str, version: str, kind: str, name: str
    ) -> tuple[str, FormLine, str, str | None, str | None]:
        """The resource a request's path names, and the FormRef its query gives: space, line,
        name, definitionVersion, schemaDigest."""
        space, name = space_param(space), name_param(name)
        dv, sd = self._ref_params(request)
        return space, line_param(group, version, kind), name, dv, sd

    # -- handlers: health, spaces ------------------------------------------------------------

    async def healthz(self, request: Request) -> Response:
        if not self.ready:
            return self.json(503, {"ok": False})
        return self.json(200, {"ok": True})

    async def list_spaces(self, request: Request) -> Response:
        return self.json(200, {"items": self.host.list_spaces()})

    async def get_space(self, request: Request, space: str) -> Response:
        return self.json(200, {"space": self.host.get_space(space_param(space))})

    async def put_space(self, request: Request, space: str) -> Response:
        created, doc = self.host.put_space(space_param(space))
        return self.json(201 if created else 200, {"space": doc})

    async def delete_space(self, request: Request, space: str) -> Response:
        self.host.delete_space(space_param(space))
        return Response(status_code=204)

    # -- handlers: forms ---------------------------------------------------------------------

    async def list_forms(self, request: Request) -> Response:
        return self.json(
            200, {"items": [self.host.forms.item(ref) for ref in self.host.forms.all_refs()]}
        )

    async def availability(self, request: Request, group: str, version: str, kind: str) -> Response:
        dv, sd = self._ref_params(request)
        ref, _ = self.host.forms.resolve(
            line_param(group, version, kind), dv, sd, self.host.settings
        )
        return self.json(200, {"formRef": ref.to_json(), "available": True})

    async def definition(self, request: Request, group: str, version: str, kind: str) -> Response:
        dv, sd = self._ref_params(request)
        ref, _ = self.host.forms.resolve(
            line_param(group, version, kind), dv, sd, self.host.settings
        )
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
        space = space_param(space)
        dv, sd = self._ref_params(request)
        docs = self.host.list_resources(space, line_param(group, version, kind), dv, sd)
        return self.json(200, {"items": [served(doc, self.host.settings) for doc in docs]})

    async def get_resource(
        self, request: Request, space: str, group: str, version: str, kind: str, name: str
    ) -> Response:
        res = self.host.read(*self._named(request, space, group, version, kind, name))
        return self.representation(200, res.doc)

    async def observe(
        self, request: Request, space: str, group: str, version: str, kind: str, name: str
    ) -> Response:
        doc = self.host.observe(*self._named(request, space, group, version, kind, name))
        return self.representation(200, doc)

    async def mutate(
        self, request: Request, space: str, group: str, version: str, kind: str, name: str
    ) -> Response:
        space, line, name, dv, sd = self._named(request, space, group, version, kind, name)
        body: Any = None
        if request.method == "PUT":
            body = await self.body_json(request)
            if body is None:
                raise HostError(ErrorCode.UNSUPPORTED_MEDIA_TYPE, "a PUT needs a JSON body")
        m = mutation(request, space, line, name, dv, sd, body)
        return self.operation(self.host.mutate(m))

    # -- handlers: operations ----------------------------------------------------------------

    async def get_operation(self, request: Request, id: str) -> Response:
        return self.raw(200, served_record(self.host.operations.get(id).body, self.host.settings))

    async def list_operations(self, request: Request) -> Response:
        filters = {
            key: value
            for key in ("space", "apiVersion", "kind", "name")
            if (value := request.query_params.get(key))
        }
        if "space" not in filters:
            # A host-wide listing would leak operations across spaces.
            raise HostError(ErrorCode.INVALID_REQUEST, "the space filter is required")
        settings = self.host.settings
        items = [served_record(r.body, settings) for r in self.host.operations.list(filters)]
        return self.raw(200, b'{"items":[' + b",".join(items) + b"]}")

    # -- handlers: admin ---------------------------------------------------------------------

    def _admin_action(
        self, action: Callable[..., Any], *, body: bool = True, representation: bool = False
    ) -> Callable[[Request], Awaitable[Response]]:
        """The handler of an admin endpoint: `action` (given the request's JSON body where
        `body`) answered 200, as a resource representation where `representation`."""
        answer = self.representation if representation else self.json

        async def handle(request: Request) -> Response:
            return answer(200, action(await self.body_json(request)) if body else action())

        return handle


class FaultMiddleware:
    """Latency, 5xx, 429 and dropped connections for the host API (never admin, never
    /healthz)."""

    def __init__(self, app: ASGIApp, owner: HostApp) -> None:
        self.app = app
        self.owner = owner
        #: The rateLimitPerSecond fault's bucket: its rate, tokens, and when they were counted.
        self._rate, self._tokens, self._stamp = 0.0, 0.0, time.monotonic()

    def _over_rate(self, rate: float) -> bool:
        """One request against the rateLimitPerSecond bucket: True when it is empty. A new
        rate starts with a full bucket."""
        now = time.monotonic()
        capacity = max(1.0, rate)
        if rate != self._rate:
            self._rate, self._tokens, self._stamp = rate, capacity, now
        self._tokens = min(capacity, self._tokens + (now - self._stamp) * rate)
        self._stamp = now
        if self._tokens >= 1.0:
            self._tokens -= 1.0
            return False
        return True

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
        throttled = faults.throttleRetryAfterSeconds
        limited = bool(faults.rateLimitPerSecond) and self._over_rate(faults.rateLimitPerSecond)
        if limited:
            why = "(rateLimitPerSecond fault)"
        elif throttled:
            why = "(throttleRetryAfterSeconds fault)"
        else:
            why = "(errorRate fault)"
        if limited or throttled or (faults.errorRate and random.random() < faults.errorRate):
            fault = HostError(
                ErrorCode.UNAVAILABLE,
                f"the host is unavailable {why}",
                headers={"Retry-After": str(throttled or 1)},
            )
            body = {
                "error": {"code": fault.code, "message": fault.message, "details": fault.details}
            }
            response = Response(
                dumps(body),
                status_code=429 if limited or throttled else fault.status,
                headers=fault.headers,
                media_type="application/json",
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)
