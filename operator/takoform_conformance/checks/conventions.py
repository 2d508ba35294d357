"""§1 Conventions: authentication, the error body, the closed error codes, bad input."""

from __future__ import annotations

import json
import secrets
import uuid

import httpx

from takoform_spec.host_api import ERROR_STATUS, ErrorCode

from ..answers import describe, error_code
from ..context import Context
from ..outcomes import ensure, fail
from ..vocabulary import API
from .common import Check, generation_of, registrar, unchanged

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("auth-required", "H-3")
def auth_required(ctx: Context) -> None:
    """Without a valid bearer token every request is 401 unauthenticated and nothing happens."""
    wrong = "conformance-wrong-" + secrets.token_hex(8)
    variants = [
        ("no Authorization header", {}),
        ("an unknown token", {"Authorization": f"Bearer {wrong}"}),
        ("a non-Bearer scheme", {"Authorization": f"Basic {ctx.token}"}),
        ("a bearer scheme without a token", {"Authorization": "Bearer"}),
    ]
    for label, headers in variants:
        space = ctx.space + "-unauth-" + secrets.token_hex(2)
        name = ctx.name("unauth")
        ctx.spaces.append(space)
        ctx.track(name, None, None)
        requests: list[tuple[str, httpx.Response]] = [
            ("GET /forms", ctx.raw.get(f"{API}/forms", headers=headers)),
            ("PUT space", ctx.raw.put(f"{API}/spaces/{space}", headers=headers)),
            (
                "create",
                ctx.raw.put(
                    ctx.resource_path(name),
                    params=ctx.query(ctx.primary),
                    json={"spec": ctx.model().valid_spec()},
                    headers={**headers, "If-None-Match": "*"},
                ),
            ),
            (
                "GET operation",
                ctx.raw.get(f"{API}/operations/op-conformance-missing", headers=headers),
            ),
        ]
        for what, response in requests:
            ctx.expect_error(response, 401, "unauthenticated", "H-3", f"{what} with {label}")
        ctx.expect_error(
            ctx.http.get(f"{API}/spaces/{space}"),
            404,
            "space_not_found",
            "H-3",
            f"a space PUT with {label} was acted on: reading it back",
        )
        ctx.expect_absent(name, "H-3", f"a create with {label} was acted on")


def _provoke_errors(ctx: Context) -> list[tuple[str, str, httpx.Response]]:
    """(what, the code the text prescribes, response) for every error the suite can provoke."""
    if ctx.provoked is not None:
        return ctx.provoked
    ref = ctx.primary
    key = ctx.key()
    name, rep = ctx.make("errors", key=key)
    spec = rep["spec"]
    gen = generation_of(rep)
    missing = ctx.name("missing")
    out: list[tuple[str, str, httpx.Response]] = []

    def add(what: str, code: str, response: httpx.Response) -> None:
        out.append((what, code, response))

    add("no token", "unauthenticated", ctx.raw.get(f"{API}/forms"))
    add("unknown route", "route_not_found", ctx.http.get(f"{API}/conformance-no-such-route"))
    add("POST on GET-only /forms", "method_not_allowed", ctx.http.post(f"{API}/forms", json={}))
    add(
        "read in an unknown space",
        "space_not_found",
        ctx.read(missing, space=ctx.space + "-nowhere"),
    )
    add("read under an unknown FormRef", "form_unknown", ctx.read(name, ctx.unknown_version(ref)))
    add("read of a missing resource", "resource_not_found", ctx.read(missing))
    add("unknown operation", "operation_not_found", ctx.get_operation("op-conformance-missing"))
    add(
        "availability without definitionVersion",
        "invalid_request",
        ctx.http.get(
            ctx.form_path(ref, "availability"), params={"schemaDigest": ref.schema_digest}
        ),
    )
    add(
        "create with text/plain",
        "unsupported_media_type",
        ctx.http.put(
            ctx.resource_path(missing),
            params=ctx.query(ref),
            content=json.dumps({"spec": spec}).encode(),
            headers={"Content-Type": "text/plain", "If-None-Match": "*"},
        ),
    )
    add(
        "create with malformed JSON",
        "invalid_request",
        ctx.http.put(
            ctx.resource_path(missing),
            params=ctx.query(ref),
            content=b'{"spec": {',
            headers={"Content-Type": "application/json", "If-None-Match": "*"},
        ),
    )
    add(
        "create with an undeclared field",
        "validation_failed",
        ctx.create(missing, {**spec, "conformanceUndeclared": 1}),
    )
    add(
        "PUT without If-None-Match or expected generation",
        "precondition_required",
        ctx.update(name, spec, None),
    )
    add("create of an existing name", "resource_exists", ctx.create(name, spec))
    add("update with a stale generation", "generation_conflict", ctx.update(name, spec, "999"))
    add(
        "update with a stale If-Match",
        "revision_conflict",
        ctx.update(name, spec, gen, if_match='"999999"'),
    )
    add(
        "update with a wrong expected uid",
        "uid_mismatch",
        ctx.update(name, spec, gen, uid=str(uuid.uuid4())),
    )
    add("oversized body", "payload_too_large", _oversized_create(ctx, missing))
    add(
        "DELETE of a space holding resources",
        "space_not_empty",
        ctx.http.delete(f"{API}/spaces/{ctx.space}"),
    )
    add(
        "idempotency key reused for another name",
        "idempotency_key_reused",
        ctx.create(missing, spec, key=key),
    )
    ctx.provoked = out
    return out


def _oversized_create(ctx: Context, name: str) -> httpx.Response:
    spec = ctx.model().valid_spec()
    body = json.dumps({"spec": spec, "padding": "x" * (2 * 1024 * 1024)}).encode()
    return ctx.http.put(
        ctx.resource_path(name),
        params=ctx.query(ctx.primary),
        content=body,
        headers={"Content-Type": "application/json", "If-None-Match": "*"},
    )


@check("error-body-shape", "H-2")
def error_body_shape(ctx: Context) -> None:
    """Every error is JSON {"error": {"code", "message", "details"}} with a JSON content type."""
    for what, _code, response in _provoke_errors(ctx):
        ensure(
            response.status_code >= 400, f"H-2: {what}: expected an error, got {describe(response)}"
        )
        content_type = response.headers.get("content-type", "")
        ensure(
            content_type.split(";")[0].strip().lower() == "application/json",
            f"H-2: {what}: error Content-Type is {content_type!r}, not application/json",
        )
        try:
            body = response.json()
        except ValueError:
            raise fail(f"H-2: {what}: error body is not JSON: {response.text[:120]!r}") from None
        ensure(
            isinstance(body, dict) and set(body) == {"error"},
            f'H-2: {what}: error body must be exactly {{"error": ...}}, got {body!r:.160}',
        )
        error = body["error"]
        ensure(isinstance(error, dict), f"H-2: {what}: `error` is not an object")
        ensure(
            isinstance(error.get("code"), str) and error["code"],
            f"H-2: {what}: error.code missing or not a string",
        )
        ensure(isinstance(error.get("message"), str), f"H-2: {what}: error.message not a string")
        ensure(isinstance(error.get("details"), dict), f"H-2: {what}: error.details not an object")


@check("error-codes-closed", "H-37")
def error_codes_closed(ctx: Context) -> None:
    """Every error code the host answers is in the closed set of §9, with its status."""
    wrong: list[str] = []
    for what, expected, response in _provoke_errors(ctx):
        code = error_code(response)
        if code is None or code not in ERROR_STATUS:
            raise fail(
                f"H-37: {what}: error code {code!r} (status {response.status_code}) is not in "
                f"the closed set of §9 (expected {expected!r})"
            )
        status = ERROR_STATUS[ErrorCode(code)]
        if status != response.status_code:
            raise fail(
                f"H-37: {what}: code {code!r} came with status {response.status_code}, "
                f"§9 gives {status}"
            )
        if code != expected:
            wrong.append(f"{what}: {code} (expected {expected})")
    if wrong:
        raise fail("H-37: codes from the set but not the ones §9 prescribes: " + "; ".join(wrong))


#: H-40's bounds: an error message's characters, an answer body's bytes.
MESSAGE_LIMIT = 4096
ANSWER_LIMIT = 4 * 1024 * 1024


@check("answers-are-bounded", "H-40")
def answers_are_bounded(ctx: Context) -> None:
    """Error messages are at most 4,096 characters and no answer body exceeds 4 MiB."""
    for what, _code, response in _provoke_errors(ctx):
        ensure(
            len(response.content) <= ANSWER_LIMIT,
            f"H-40: {what}: the answer body is {len(response.content)} bytes",
        )
        try:
            message = response.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            continue  # not the H-2 shape: error-body-shape says so
        ensure(
            not isinstance(message, str) or len(message) <= MESSAGE_LIMIT,
            f"H-40: {what}: the error message is {len(message)} characters",
        )


@check("bad-input-stores-nothing", "H-1", "H-4", "H-5")
def bad_input_stores_nothing(ctx: Context) -> None:
    """Wrong content type, malformed JSON, oversized bodies and bad names are refused unstored."""
    ref = ctx.primary
    spec = ctx.model().valid_spec()
    body = json.dumps({"spec": spec}).encode()
    cases: list[tuple[str, str, int, str, dict[str, str], bytes]] = [
        (
            "H-1",
            "Content-Type text/plain",
            415,
            "unsupported_media_type",
            {"Content-Type": "text/plain"},
            body,
        ),
        ("H-1", "no Content-Type", 415, "unsupported_media_type", {}, body),
        (
            "H-1",
            "Content-Type application/x-www-form-urlencoded",
            415,
            "unsupported_media_type",
            {"Content-Type": "application/x-www-form-urlencoded"},
            body,
        ),
        (
            "H-1",
            "malformed JSON",
            400,
            "invalid_request",
            {"Content-Type": "application/json"},
            b'{"spec": {"region": ',
        ),
        (
            "H-1",
            "a JSON body that is not an object",
            400,
            "invalid_request",
            {"Content-Type": "application/json"},
            b"[1, 2]",
        ),
    ]
    for cite, what, status, code, headers, content in cases:
        name = ctx.name("badinput")
        ctx.track(name, ref, None)
        response = ctx.http.put(
            ctx.resource_path(name),
            params=ctx.query(ref),
            content=content,
            headers={**headers, "If-None-Match": "*"},
        )
        if what.startswith("a JSON body") and response.status_code == 422:
            pass  # a non-object body may also be refused as a validation failure
        else:
            ctx.expect_error(response, status, code, cite, f"create with {what}")
        ctx.expect_absent(name, cite, f"create with {what} stored something")

    name = ctx.name("oversized")
    ctx.track(name, ref, None)
    ctx.expect_error(_oversized_create(ctx, name), 413, "payload_too_large", "H-4", "2 MiB body")
    ctx.expect_absent(name, "H-4", "an oversized create stored something")

    # An update with the wrong content type changes nothing either.
    existing, rep = ctx.make("badinput")
    response = ctx.http.put(
        ctx.resource_path(existing),
        params=ctx.query(ref),
        content=json.dumps({"spec": ctx.model().changed(rep["spec"])}).encode(),
        headers={"Content-Type": "text/plain", "Takoform-Expected-Generation": generation_of(rep)},
    )
    ctx.expect_error(response, 415, "unsupported_media_type", "H-1", "update with text/plain")
    unchanged(ctx, existing, rep, "H-1", "a text/plain update")

    bad_names = ["bad/name", "Bad-Name", "-bad", "bad-", "bad_name", "a" * 254, "bad name"]
    for bad in bad_names:
        ctx.expect_error(
            ctx.create(bad, spec), 400, "invalid_request", "H-5", f"create named {bad[:40]!r}"
        )
    ctx.expect_absent("bad", "H-5", "'bad/name' was stored as 'bad'")
    bad_space = f"{ctx.space}/sub"
    ctx.spaces.append(ctx.space + "%2Fsub")
    ctx.expect_error(
        ctx.create_space(bad_space), 400, "invalid_request", "H-5", f"PUT space {bad_space!r}"
    )
    ctx.expect_error(
        ctx.create(ctx.name("badspace"), spec, space=bad_space),
        400,
        "invalid_request",
        "H-5",
        f"create in space {bad_space!r}",
    )
