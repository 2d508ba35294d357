"""The named checks. Each proves the H-numbered MUSTs of docs/host-api.md it cites.

A check fails with a message that starts with the H-number it caught being broken, so a reader of
the table knows which sentence of the normative text the host did not keep.
"""

from __future__ import annotations

import json
import secrets
import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from takoform_spec.canonical import canonical_json, sha256_digest
from takoform_spec.identity import FormRef

from .harness import (
    API,
    CONDITION_REASONS,
    CONDITION_TYPES,
    DECIMAL,
    ERROR_CODES,
    OPERATION_STATES,
    Check,
    CheckSkipped,
    Context,
    describe,
    ensure,
    error_code,
    error_details,
    fail,
    unquote_etag,
)

CHECKS: list[Check] = []


def check(
    name: str, *cites: str, required: bool = True, admin: str = "no"
) -> Callable[[Callable[[Context], None]], Callable[[Context], None]]:
    def register(func: Callable[[Context], None]) -> Callable[[Context], None]:
        summary = " ".join((func.__doc__ or "").strip().split("\n\n")[0].split())
        CHECKS.append(Check(name, tuple(cites), func, required, admin, summary))
        return func

    return register


def _gen(rep: dict[str, Any]) -> str:
    return str(rep["metadata"]["generation"])


def _rev(rep: dict[str, Any]) -> str:
    return str(rep["metadata"]["revision"])


def _uid(rep: dict[str, Any]) -> str:
    return str(rep["metadata"]["uid"])


def _same_details(details: dict[str, Any], key: str, value: str) -> bool:
    return unquote_etag(details.get(key)) == unquote_etag(value)


def _unchanged(ctx: Context, name: str, before: dict[str, Any], cite: str, what: str) -> None:
    after = ctx.representation(name, what=f"after {what}")
    ensure(
        _rev(after) == _rev(before) and after["spec"] == before["spec"],
        f"{cite}: {what} changed the resource (revision {_rev(before)} -> {_rev(after)})",
    )


# ----------------------------------------------------------------------------------------------
# §1 conventions


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
    gen = _gen(rep)
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
        if code not in ERROR_CODES:
            raise fail(
                f"H-37: {what}: error code {code!r} (status {response.status_code}) is not in "
                f"the closed set of §9 (expected {expected!r})"
            )
        if ERROR_CODES[code] != response.status_code:
            raise fail(
                f"H-37: {what}: code {code!r} came with status {response.status_code}, "
                f"§9 gives {ERROR_CODES[code]}"
            )
        if code != expected:
            wrong.append(f"{what}: {code} (expected {expected})")
    if wrong:
        raise fail("H-37: codes from the set but not the ones §9 prescribes: " + "; ".join(wrong))


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
        headers={"Content-Type": "text/plain", "Takoform-Expected-Generation": _gen(rep)},
    )
    ctx.expect_error(response, 415, "unsupported_media_type", "H-1", "update with text/plain")
    _unchanged(ctx, existing, rep, "H-1", "a text/plain update")

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


@check("unknown-space-refused", "H-6")
def unknown_space_refused(ctx: Context) -> None:
    """Resource requests in a space that does not exist fail space_not_found and create nothing."""
    space = ctx.space + "-missing"
    ctx.spaces.append(space)
    name = ctx.name("nospace")
    ctx.expect_error(
        ctx.create(name, space=space), 404, "space_not_found", "H-6", "create in a missing space"
    )
    ctx.expect_error(
        ctx.read(name, space=space), 404, "space_not_found", "H-6", "read in a missing space"
    )
    ctx.expect_error(
        ctx.http.get(f"{API}/spaces/{space}"),
        404,
        "space_not_found",
        "H-6",
        "the refused create created its space",
    )


@check("space-lifecycle", "§2", required=False)
def space_lifecycle(ctx: Context) -> None:
    """Spaces: idempotent PUT, opaque case-sensitive UTF-8 ids, 409 space_not_empty, delete."""
    space = ctx.space + "-Lifecycle-ü"
    first = ctx.create_space(space)
    ensure(first.status_code == 201, f"§2: PUT of a new space: expected 201, got {describe(first)}")
    ensure("space" in ctx.body(first, "PUT space"), "§2: PUT space body lacks `space`")
    again = ctx.create_space(space)
    ensure(
        again.status_code == 200,
        f"§2: repeated PUT of a space: expected 200, got {describe(again)}",
    )
    got = ctx.http.get(f"{API}/spaces/{space}")
    ensure(got.status_code == 200, f"§2: GET of an existing space: {describe(got)}")
    ctx.expect_error(
        ctx.http.get(f"{API}/spaces/{space.lower()}"),
        404,
        "space_not_found",
        "§2",
        "space ids are case-sensitive: GET of the lower-cased id",
    )
    name = ctx.name("inspace")
    ctx.settle(ctx.create(name, space=space), "create in the lifecycle space")
    ctx.expect_error(
        ctx.http.delete(f"{API}/spaces/{space}"),
        409,
        "space_not_empty",
        "§2",
        "DELETE of a space holding a resource",
    )
    ctx.settle(
        ctx.http.delete(ctx.resource_path(name, space=space), params=ctx.query(ctx.primary)),
        "delete of the resource",
    )
    gone = ctx.http.delete(f"{API}/spaces/{space}")
    ensure(
        gone.status_code == 204, f"§2: DELETE of an empty space: expected 204, got {describe(gone)}"
    )
    ctx.expect_error(
        ctx.http.get(f"{API}/spaces/{space}"), 404, "space_not_found", "§2", "GET after DELETE"
    )


# ----------------------------------------------------------------------------------------------
# §3 forms


@check("form-ref-members-required", "H-7")
def form_ref_members_required(ctx: Context) -> None:
    """Every endpoint that needs a FormRef refuses a query lacking definitionVersion or digest."""
    ref = ctx.primary
    partials = {
        "without definitionVersion": {"schemaDigest": ref.schema_digest},
        "without schemaDigest": {"definitionVersion": ref.definition_version},
        "without both": {},
    }
    name, rep = ctx.make("members")
    spec = rep["spec"]
    for label, params in partials.items():
        new = ctx.name("members")
        ctx.track(new, ref, None)
        requests = [
            ("availability", ctx.http.get(ctx.form_path(ref, "availability"), params=params)),
            ("definition read", ctx.http.get(ctx.form_path(ref, "definition"), params=params)),
            ("resource read", ctx.http.get(ctx.resource_path(name), params=params)),
            ("observe", ctx.http.post(ctx.resource_path(name) + "/observe", params=params)),
            (
                "create",
                ctx.http.put(
                    ctx.resource_path(new),
                    params=params,
                    json={"spec": spec},
                    headers={"If-None-Match": "*"},
                ),
            ),
            (
                "update",
                ctx.http.put(
                    ctx.resource_path(name),
                    params=params,
                    json={"spec": ctx.model().changed(spec)},
                    headers={"Takoform-Expected-Generation": _gen(rep)},
                ),
            ),
            ("delete", ctx.http.delete(ctx.resource_path(name), params=params)),
        ]
        for what, response in requests:
            ctx.expect_error(response, 400, "invalid_request", "H-7", f"{what} {label}")
        ctx.expect_absent(new, "H-7", f"create {label} stored something")
        _unchanged(ctx, name, rep, "H-7", f"update/delete {label}")


@check("exact-form-ref-fails-closed-on-unknown-definition", "H-8")
def exact_form_ref_fails_closed(ctx: Context) -> None:
    """0017 rule 8: an unknown definitionVersion or schemaDigest is form_unknown everywhere."""
    ref = ctx.primary
    ok = ctx.http.get(ctx.form_path(ref, "availability"), params=ctx.query(ref))
    ensure(ok.status_code == 200, f"H-8: availability of installed {ref}: {describe(ok)}")
    doc = ctx.body(ok, "availability")
    ensure(
        doc.get("available") is True and doc.get("formRef") == ref.to_json(),
        f"§3: availability of an installed FormRef must be {{formRef, available: true}}: {doc}",
    )
    name, rep = ctx.make("exactref")
    unknowns = [
        ("an unknown definitionVersion", ctx.unknown_version(ref)),
        ("an unknown schemaDigest", ctx.unknown_digest(ref)),
    ]
    if ctx.sibling is not None:
        # Each member is installed, but not together: only whole-ref matching refuses it.
        mixed = FormRef(
            ref.api_version, ref.kind, ctx.sibling.definition_version, ref.schema_digest
        )
        unknowns.append(("another installed version with this version's digest", mixed))
    for label, bad in unknowns:
        query = ctx.query(bad)
        new = ctx.name("exactref")
        requests = [
            ("availability", ctx.http.get(ctx.form_path(bad, "availability"), params=query)),
            ("definition read", ctx.http.get(ctx.form_path(bad, "definition"), params=query)),
            ("resource read", ctx.read(name, bad)),
            ("observe", ctx.observe(name, bad)),
            ("update", ctx.update(name, rep["spec"], _gen(rep), ref=bad)),
            ("delete", ctx.delete(name, ref=bad)),
            ("create", ctx.create(new, rep["spec"], ref=bad)),
        ]
        for what, response in requests:
            ctx.expect_error(
                response,
                404,
                "form_unknown",
                "H-8",
                f"{what} with {label} ({bad.definition_version})",
            )
        ctx.expect_absent(new, "H-8", f"create with {label} stored a resource")
        _unchanged(ctx, name, rep, "H-8", f"update/delete with {label}")


@check("definition-schema-matches-digest", "H-9")
def definition_schema_matches_digest(ctx: Context) -> None:
    """Each installed definition's schema hashes (canonical JSON, SHA-256) to its schemaDigest."""
    for form in ctx.installed:
        ref = form.ref
        response = ctx.http.get(ctx.form_path(ref, "definition"), params=ctx.query(ref))
        ensure(response.status_code == 200, f"H-9: definition read of {ref}: {describe(response)}")
        doc = ctx.body(response, f"definition of {ref}")
        ensure(
            doc.get("formRef") == ref.to_json(),
            f"H-9: definition read of {ref} names formRef {doc.get('formRef')}",
        )
        schema = doc.get("schema")
        ensure(isinstance(schema, dict), f"H-9: definition of {ref} has no schema object")
        digest = sha256_digest(canonical_json(schema))
        ensure(
            digest == ref.schema_digest,
            f"H-9: the schema served for {ref} hashes to {digest}, not its schemaDigest",
        )
        ensure(
            isinstance(doc.get("packageDigests"), list) and doc["packageDigests"],
            f"§3: definition read of {ref} lacks packageDigests",
        )


@check("package-digest-substitution", "H-10", "H-12", admin="required")
def package_digest_substitution(ctx: Context) -> None:
    """A FormRef served by another package keeps its resources readable, updatable, deletable."""
    ctx.need_admin("switching the package that serves a FormRef")
    candidates = [f for f in ctx.installed if len(set(f.package_digests)) >= 2]
    if not candidates:
        raise CheckSkipped("no FormRef is installed from two packages (GET /v1alpha3/forms)")
    candidates.sort(key=lambda f: f.ref.line != ctx.primary.line)
    form = candidates[0]
    ref = form.ref
    name, rep = ctx.make("package", ref=ref)
    recorded = rep["metadata"].get("packageDigest")
    original = recorded if recorded in form.package_digests else form.package_digests[0]
    other = next(d for d in form.package_digests if d != original)
    ctx.admin("POST", "/packages/activate", {"formRef": ref.to_json(), "packageDigest": other})
    try:
        after = ctx.representation(name, ref, f"after switching {ref} to package {other}")
        ensure(_uid(after) == _uid(rep), "H-12: the uid changed with the package")
        ensure(after.get("formRef") == ref.to_json(), "H-10: the formRef changed with the package")
        observed = ctx.observe(name, ref)
        ensure(observed.status_code == 200, f"H-10: observe after the switch: {describe(observed)}")
        changed = ctx.change(name, after, ref)
        ensure(_uid(changed) == _uid(rep), "H-12: the uid changed on an update after the switch")
        ctx.settle(ctx.delete(name, ref=ref), "H-10: delete after the package switch")
        ctx.expect_absent(name, "H-10", "after delete through the same FormRef", ref)
        ctx.make("package", ref=ref)  # and new resources still come to be under it
    finally:
        ctx.admin(
            "POST", "/packages/activate", {"formRef": ref.to_json(), "packageDigest": original}
        )


# ----------------------------------------------------------------------------------------------
# §4 envelope


@check("envelope-shape", "H-11")
def envelope_shape(ctx: Context) -> None:
    """metadata.name is the only name; spec holds only the fields the exact definition declares."""
    model = ctx.model()
    name, rep = ctx.make("envelope")
    ensure(rep.get("formRef") == ctx.primary.to_json(), f"H-11: formRef is {rep.get('formRef')}")
    meta = rep.get("metadata")
    if not isinstance(meta, dict):
        raise fail("H-11: no metadata object")
    ensure(meta.get("name") == name, f"H-11: metadata.name is {meta.get('name')!r}, not {name!r}")
    ensure(meta.get("space") == ctx.space, f"§4: metadata.space is {meta.get('space')!r}")
    spec = rep.get("spec")
    if not isinstance(spec, dict):
        raise fail("H-11: spec is not an object")
    extra = sorted(set(spec) - set(model.fields))
    ensure(not extra, f"H-11: spec holds fields the definition does not declare: {extra}")
    for key in ("uid", "generation", "revision"):
        ensure(isinstance(meta.get(key), str) and meta[key], f"§4: metadata.{key} missing")
    ensure(isinstance(rep.get("status"), dict), "§4: status is not an object")


@check("uid-stability", "H-12", "H-11")
def uid_stability(ctx: Context) -> None:
    """The uid issued at create never changes across observes, updates and no-op updates."""
    name = ctx.name("uid")
    record = ctx.settle(ctx.create(name), "create")
    rep = ctx.representation(name)
    uid = _uid(rep)
    ensure(uid, "H-12: empty uid")
    ensure(rep["metadata"].get("name") == name, "H-11: metadata.name differs from the name")
    if record.get("resourceUid") is not None:
        ensure(record["resourceUid"] == uid, "H-12: the uid differs from the create's resourceUid")
    observed = ctx.observe(name)
    ensure(observed.status_code == 200, f"§4 observe: {describe(observed)}")
    ensure(_uid(observed.json()) == uid, "H-12: observe changed the uid")
    ensure(_uid(ctx.representation(name)) == uid, "H-12: the uid changed after observe")
    changed = ctx.change(name, ctx.representation(name))
    ensure(_uid(changed) == uid, "H-12: an update changed the uid")
    ctx.settle(ctx.update(name, changed["spec"], _gen(changed)), "no-op update")
    again = ctx.representation(name)
    ensure(_uid(again) == uid, "H-12: a no-op update changed the uid")
    ensure(again["metadata"].get("name") == name, "H-11: metadata.name changed")


@check("delete-recreate-uid-change", "H-13", "H-36")
def delete_recreate_uid_change(ctx: Context) -> None:
    """Deleting and re-creating a name yields a new uid; a committed delete reads 404."""
    name, rep = ctx.make("recreate")
    ctx.settle(ctx.delete(name), "delete")
    ctx.expect_absent(name, "H-36", "after its delete committed")
    record = ctx.settle(ctx.create(name), "re-create")
    again = ctx.representation(name, what="after re-create")
    ensure(_uid(again) != _uid(rep), f"H-13: the re-created resource reuses uid {_uid(rep)}")
    if record.get("resourceUid") is not None:
        ensure(
            record["resourceUid"] == _uid(again),
            "H-31: the re-create's resourceUid differs from the new resource's uid",
        )


@check("generation-only-on-spec-change", "H-14", "H-19")
def generation_only_on_spec_change(ctx: Context) -> None:
    """Generation starts at "1" and grows by exactly one on a spec change, never otherwise."""
    name, rep = ctx.make("generation")
    ensure(_gen(rep) == "1", f'H-14: generation of a new resource is {_gen(rep)!r}, not "1"')
    observed = ctx.observe(name)
    ensure(observed.status_code == 200, f"§4 observe: {describe(observed)}")
    ensure(_gen(observed.json()) == "1", "H-19: observe changed the generation")
    ensure(_gen(ctx.representation(name)) == "1", "H-19: the generation changed after observe")
    ctx.settle(ctx.update(name, rep["spec"], "1"), "no-op update")
    ensure(
        _gen(ctx.representation(name)) == "1",
        "H-14: an update whose spec equals the current spec changed the generation",
    )
    changed = ctx.change(name, ctx.representation(name))
    ensure(DECIMAL.match(_gen(changed)), f"H-14: generation {_gen(changed)!r} is not canonical")
    ensure(_gen(changed) == "2", f'H-14: a spec change made generation {_gen(changed)!r}, not "2"')
    ctx.settle(ctx.update(name, changed["spec"], "2"), "second no-op update")
    ctx.observe(name)
    ensure(_gen(ctx.representation(name)) == "2", "H-14: generation moved without a spec change")


@check("revision-on-status-change", "H-15", "H-19")
def revision_on_status_change(ctx: Context) -> None:
    """A status-only change (observe) moves the revision; so does a spec change."""
    name, rep = ctx.make("revision")
    ensure(DECIMAL.match(_rev(rep)), f"H-15: revision {_rev(rep)!r} is not a canonical decimal")
    before = rep
    for attempt in range(4):
        response = ctx.observe(name)
        ensure(response.status_code == 200, f"§4 observe: {describe(response)}")
        after = ctx.body(response, "observe")
        ensure(DECIMAL.match(_rev(after)), f"H-15: revision {_rev(after)!r} is not canonical")
        stripped = [
            {**r, "metadata": {k: v for k, v in r["metadata"].items() if k != "revision"}}
            for r in (before, after)
        ]
        if stripped[0] != stripped[1]:
            ensure(
                int(_rev(after)) > int(_rev(before)),
                f"H-15/H-19: observe changed the status but revision stayed {_rev(before)} "
                f"(now {_rev(after)})",
            )
            ensure(_gen(after) == _gen(before), "H-19: observe changed the generation")
            read = ctx.representation(name, what="after observe")
            ensure(_rev(read) == _rev(after), "H-15: a read after observe shows another revision")
            break
        ensure(_rev(after) == _rev(before), "H-15: revision moved while nothing changed")
        time.sleep(0.4 * (attempt + 1))
    else:
        raise CheckSkipped("observe never changed the representation; no status-only change seen")
    changed = ctx.change(name, ctx.representation(name))
    ensure(
        int(_rev(changed)) > int(_rev(after)),
        f"H-15: a spec change left the revision at {_rev(changed)}",
    )


@check("etag-is-quoted-revision", "H-16")
def etag_is_quoted_revision(ctx: Context) -> None:
    """Every representation comes with the strong ETag "<revision>"."""
    name, _ = ctx.make("etag")

    def verify(response: httpx.Response, what: str) -> None:
        ensure(response.status_code == 200, f"H-16: {what}: {describe(response)}")
        etag = response.headers.get("etag")
        expected = f'"{_rev(response.json())}"'
        ensure(etag == expected, f"H-16: {what}: ETag is {etag!r}, expected {expected!r}")

    verify(ctx.read(name), "read")
    verify(ctx.observe(name), "observe")
    ctx.change(name, ctx.representation(name))
    verify(ctx.read(name), "read after an update")


@check("closed-condition-set", "H-17")
def closed_condition_set(ctx: Context) -> None:
    """Condition types and reasons come from the closed portable sets; observedGeneration set."""
    name, rep = ctx.make("conditions")
    reps = [("after create", rep)]
    observed = ctx.observe(name)
    if observed.status_code == 200:
        reps.append(("observe", observed.json()))
    reps.append(("after update", ctx.change(name, ctx.representation(name))))
    seen = 0
    for what, doc in reps:
        status = doc.get("status") or {}
        observed_generation = status.get("observedGeneration")
        if observed_generation is not None:
            ensure(
                DECIMAL.match(str(observed_generation))
                and int(str(observed_generation)) <= int(_gen(doc)),
                f"H-17: {what}: observedGeneration {observed_generation!r} is not a generation",
            )
        conditions = status.get("conditions") or []
        ensure(isinstance(conditions, list), f"H-17: {what}: status.conditions is not a list")
        for condition in conditions:
            seen += 1
            ensure(
                condition.get("type") in CONDITION_TYPES,
                f"H-17: {what}: condition type {condition.get('type')!r} is not in the closed set",
            )
            ensure(
                condition.get("reason") in CONDITION_REASONS,
                f"H-17: {what}: condition reason {condition.get('reason')!r} is not a portable "
                "reason (host-internal codes go to hostReason)",
            )
    if not seen:
        raise CheckSkipped("the host reported no conditions; nothing to check")


@check("exact-ref-binding", "H-18")
def exact_ref_binding(ctx: Context) -> None:
    """A resource is invisible under another installed definition of its line."""
    other = ctx.need_sibling()
    name, rep = ctx.make("binding")
    other_spec = ctx.model(other).valid_spec()
    requests = [
        ("read", ctx.read(name, other)),
        ("observe", ctx.observe(name, other)),
        ("update", ctx.update(name, other_spec, _gen(rep), ref=other)),
        ("delete", ctx.delete(name, ref=other)),
    ]
    for what, response in requests:
        ctx.expect_error(
            response,
            404,
            "resource_not_found",
            "H-18",
            f"{what} under installed {other.definition_version} of a resource bound to "
            f"{ctx.primary.definition_version}",
        )
    ctx.expect_error(
        ctx.read(name, ctx.unknown_version(ctx.primary)),
        404,
        "form_unknown",
        "H-18",
        "read under a FormRef that is not installed",
    )
    _unchanged(ctx, name, rep, "H-18", "mutations under another FormRef")


# ----------------------------------------------------------------------------------------------
# §5/§6 reads, mutations and fences


@check("uncommitted-invisible", "H-20", "H-36", admin="optional")
def uncommitted_invisible(ctx: Context) -> None:
    """Running creates, updates and deletes are invisible to reads until they commit."""
    if ctx.admin_http is None:
        name = ctx.name("uncommitted")
        record = ctx.accepted(ctx.create(name), "create")
        read = ctx.read(name)
        op = ctx.get_operation(record["id"]).json()
        if op.get("state") == "running":
            ctx.expect_error(read, 404, "resource_not_found", "H-20", "read while create runs")
            ctx.wait(record["id"])
            return
        ctx.wait(record["id"])
        raise CheckSkipped(
            "the create committed before the read; needs --admin-token to hold operations running"
        )
    updated, rep_u = ctx.make("uncommitted")
    deleted, _ = ctx.make("uncommitted")
    name = ctx.name("uncommitted")
    with ctx.faults(stuckOperations=True):
        create = ctx.accepted(ctx.create(name), "create")
        update = ctx.accepted(
            ctx.update(updated, ctx.model().changed(rep_u["spec"]), _gen(rep_u)), "update"
        )
        delete = ctx.accepted(ctx.delete(deleted), "delete")
        time.sleep(0.1)
        for op in (create, update, delete):
            state = ctx.get_operation(op["id"]).json().get("state")
            if state != "running":
                raise fail(
                    f"faults stuckOperations=true did not hold operation {op['id']} ({state})"
                )
        ctx.expect_error(
            ctx.read(name), 404, "resource_not_found", "H-20", "read while create runs"
        )
        _unchanged(ctx, updated, rep_u, "H-20", "an update that has not committed")
        still = ctx.read(deleted)
        ensure(
            still.status_code == 200,
            f"H-36: a resource whose delete has not committed reads {describe(still)}",
        )
        ctx.release()
        for op in (create, update, delete):
            final = ctx.wait(op["id"])
            ensure(final.get("state") == "succeeded", f"operation {op['id']} ended {final}")
    ctx.representation(name, what="after its create committed")
    ensure(
        _gen(ctx.representation(updated)) != _gen(rep_u),
        "H-20: the committed update is not visible",
    )
    ctx.expect_absent(deleted, "H-36", "after its delete committed")


@check("create-fence", "H-21")
def create_fence(ctx: Context) -> None:
    """Create needs If-None-Match: * and fails resource_exists on a taken name (any FormRef)."""
    name, rep = ctx.make("fence")
    ctx.expect_error(
        ctx.create(name, rep["spec"]), 412, "resource_exists", "H-21", "create of an existing name"
    )
    _unchanged(ctx, name, rep, "H-21", "a refused create")
    if ctx.sibling is not None:
        ctx.expect_error(
            ctx.create(name, ctx.model(ctx.sibling).valid_spec(), ref=ctx.sibling),
            412,
            "resource_exists",
            "H-21",
            f"create of an existing name under {ctx.sibling.definition_version}",
        )
        ctx.expect_absent(name, "H-21", "create under the sibling ref", ctx.sibling)
    ctx.expect_error(
        ctx.update(name, ctx.model().changed(rep["spec"]), None),
        428,
        "precondition_required",
        "H-21",
        "PUT with neither If-None-Match nor Takoform-Expected-Generation",
    )
    _unchanged(ctx, name, rep, "H-21", "an unfenced PUT")
    fresh = ctx.name("fence")
    ctx.track(fresh, None, None)
    ctx.expect_error(
        ctx.update(fresh, rep["spec"], None),
        428,
        "precondition_required",
        "H-21",
        "unfenced PUT of a new name",
    )
    ctx.expect_absent(fresh, "H-21", "an unfenced PUT created a resource")


@check("exact-definition-validation", "H-22")
def exact_definition_validation(ctx: Context) -> None:
    """Specs are validated against the EXACT definition; failures name the field, store nothing."""
    model = ctx.model()
    sibling_fields: set[str] = set()
    if ctx.sibling is not None:
        sibling_fields = set(ctx.model(ctx.sibling).fields)
    for what, spec, field in model.invalid_specs(sibling_fields):
        name = ctx.name("validate")
        details = ctx.expect_error(
            ctx.create(name, spec), 422, "validation_failed", "H-22", f"create with {what}"
        )
        named = str(details.get("field", ""))
        ensure(
            named == field or named.startswith((field + ".", field + "[", field + "/")),
            f"H-22: create with {what}: details.field is {named!r}, expected {field!r}",
        )
        ctx.expect_absent(name, "H-22", f"create with {what} stored something")
    existing, rep = ctx.make("validate")
    ctx.expect_error(
        ctx.update(existing, {**rep["spec"], "conformanceUndeclared": 1}, _gen(rep)),
        422,
        "validation_failed",
        "H-22",
        "update with an undeclared field",
    )
    _unchanged(ctx, existing, rep, "H-22", "a refused update")
    extra = sorted(sibling_fields - set(model.fields))
    if ctx.sibling is not None and extra:
        sibling = ctx.model(ctx.sibling)
        field = extra[0]
        spec = {**sibling.valid_spec(), field: sibling.example(field)}
        ctx.make("validate", spec, ref=ctx.sibling)  # the same field is fine where declared


@check("stale-generation-fence", "H-23")
def stale_generation_fence(ctx: Context) -> None:
    """An update fenced on a stale generation fails generation_conflict and changes nothing."""
    name, rep = ctx.make("genfence")
    current = ctx.change(name, rep)
    for stale in ("1", str(int(_gen(current)) + 5)):
        details = ctx.expect_error(
            ctx.update(name, ctx.model().changed(current["spec"]), stale),
            412,
            "generation_conflict",
            "H-23",
            f"update expecting generation {stale} (current {_gen(current)})",
        )
        ensure(
            _same_details(details, "expected", stale)
            and _same_details(details, "current", _gen(current)),
            f"H-23: details must name expected {stale} and current {_gen(current)}: {details}",
        )
        _unchanged(ctx, name, current, "H-23", "a stale-generation update")


@check("stale-revision-fence", "H-24")
def stale_revision_fence(ctx: Context) -> None:
    """A mutation with a stale If-Match fails revision_conflict and changes nothing."""
    name, rep = ctx.make("revfence")
    current = ctx.change(name, rep)
    stale = f'"{_rev(rep)}"'
    details = ctx.expect_error(
        ctx.update(name, ctx.model().changed(current["spec"]), _gen(current), if_match=stale),
        412,
        "revision_conflict",
        "H-24",
        f"update with If-Match {stale} (current {_rev(current)})",
    )
    ensure(
        _same_details(details, "expected", stale)
        and _same_details(details, "current", _rev(current)),
        f"H-24: details must name expected {stale} and current {_rev(current)}: {details}",
    )
    _unchanged(ctx, name, current, "H-24", "a stale-revision update")
    ctx.expect_error(
        ctx.delete(name, if_match=stale), 412, "revision_conflict", "H-24", "delete, stale If-Match"
    )
    _unchanged(ctx, name, current, "H-24", "a stale-revision delete")
    fresh = ctx.change(name, current, if_match=f'"{_rev(current)}"')
    ctx.settle(ctx.delete(name, if_match=f'"{_rev(fresh)}"'), "delete with the current If-Match")
    ctx.expect_absent(name, "H-36", "after a fenced delete committed")


@check("expected-uid-fence", "H-25")
def expected_uid_fence(ctx: Context) -> None:
    """A mutation expecting another uid fails uid_mismatch and changes nothing."""
    name, rep = ctx.make("uidfence")
    wrong = str(uuid.uuid4())
    details = ctx.expect_error(
        ctx.update(name, ctx.model().changed(rep["spec"]), _gen(rep), uid=wrong),
        412,
        "uid_mismatch",
        "H-25",
        "update expecting another uid",
    )
    ensure(
        _same_details(details, "expected", wrong) and _same_details(details, "current", _uid(rep)),
        f"H-25: details must name expected {wrong} and current {_uid(rep)}: {details}",
    )
    _unchanged(ctx, name, rep, "H-25", "an update expecting another uid")
    ctx.expect_error(
        ctx.delete(name, uid=wrong), 412, "uid_mismatch", "H-25", "delete expecting another uid"
    )
    _unchanged(ctx, name, rep, "H-25", "a delete expecting another uid")
    current = ctx.change(name, rep, uid=_uid(rep))
    ctx.settle(ctx.delete(name, uid=_uid(current)), "delete expecting the right uid")


@check("concurrent-create-refused", "H-26", admin="required")
def concurrent_create_refused(ctx: Context) -> None:
    """While an operation runs, other mutations of its name fail operation_in_progress."""
    ctx.need_admin("faults stuckOperations holds the first operation running")
    existing, rep = ctx.make("concurrent")
    name = ctx.name("concurrent")
    with ctx.faults(stuckOperations=True):
        first = ctx.accepted(ctx.create(name, key=ctx.key()), "first create")
        for label, key in (("a different key", ctx.key()), ("no key", None)):
            details = ctx.expect_error(
                ctx.create(name, key=key),
                409,
                "operation_in_progress",
                "H-26",
                f"second create with {label} while the first runs",
            )
            ensure(
                details.get("operationId") == first["id"],
                f"H-26: details.operationId is {details.get('operationId')!r}, not {first['id']}",
            )
        update = ctx.accepted(
            ctx.update(existing, ctx.model().changed(rep["spec"]), _gen(rep)), "update"
        )
        for what, response in (
            ("second update", ctx.update(existing, rep["spec"], _gen(rep))),
            ("delete", ctx.delete(existing)),
        ):
            details = ctx.expect_error(
                response, 409, "operation_in_progress", "H-26", f"{what} while an update runs"
            )
            ensure(
                details.get("operationId") == update["id"],
                f"H-26: {what}: details.operationId is {details.get('operationId')!r}",
            )
        ctx.release()
        final = ctx.wait(first["id"])
        ctx.wait(update["id"])
    ensure(final.get("state") == "succeeded", f"the first create ended {final}")
    rep_new = ctx.representation(name)
    ensure(
        _uid(rep_new) == first.get("resourceUid", _uid(rep_new)),
        "H-26: the resource is not the one the first create made",
    )


@check("omitted-field-default", "H-27")
def omitted_field_default(ctx: Context) -> None:
    """An omitted optional field takes the default its definition declares, on create and update."""
    model = ctx.model()
    found = model.defaulted_optional()
    if found is None:
        raise CheckSkipped(f"{ctx.primary} declares no optional field with a default")
    field, default = found
    spec = model.valid_spec()
    spec.pop(field, None)
    name, rep = ctx.make("default", spec)
    ensure(
        rep["spec"].get(field) == default,
        f"H-27: create omitting {field!r}: spec.{field} is {rep['spec'].get(field)!r}, "
        f"the definition's default is {default!r}",
    )
    kind = model.fields[field].get("type")
    other: Any
    if model.fields[field].get("enum"):
        other = next(v for v in model.fields[field]["enum"] if v != default)
    elif kind == "boolean":
        other = not default
    elif kind in ("integer", "number"):
        other = default + 1
    else:
        other = f"{default}x"
    ctx.settle(ctx.update(name, {**spec, field: other}, _gen(rep)), f"update setting {field}")
    set_rep = ctx.representation(name)
    ensure(set_rep["spec"].get(field) == other, f"H-27: update did not set {field!r}")
    ctx.settle(ctx.update(name, spec, _gen(set_rep)), f"update omitting {field}")
    after = ctx.representation(name)
    ensure(
        after["spec"].get(field) == default,
        f"H-27: update omitting {field!r}: spec.{field} is {after['spec'].get(field)!r}, "
        f"the definition's default is {default!r}",
    )


# ----------------------------------------------------------------------------------------------
# Idempotency keys


def _replay_status(response: httpx.Response, original: str, what: str) -> dict[str, Any]:
    ensure(
        response.status_code in (200, 202),
        f"H-28: {what}: replay answered {describe(response)}, not the original operation",
    )
    record: dict[str, Any] = response.json()
    ensure(
        record.get("id") == original,
        f"H-28: {what}: replay answered operation {record.get('id')!r}, not {original}",
    )
    state = record.get("state")
    ensure(
        (response.status_code == 202) == (state == "running"),
        f"H-28: {what}: replay status {response.status_code} with a {state} record",
    )
    return record


@check("idempotency-key-replays-original", "H-28", admin="optional")
def idempotency_key_replays_original(ctx: Context) -> None:
    """A repeated key with the same request answers the ORIGINAL operation and mutates nothing."""
    name = ctx.name("replay")
    key = ctx.key()
    spec = ctx.model().valid_spec()
    first = ctx.accepted(ctx.create(name, spec, key=key), "create")
    _replay_status(ctx.create(name, spec, key=key), first["id"], "immediate create replay")
    ctx.wait(first["id"])
    rep = ctx.representation(name)
    replay = _replay_status(ctx.create(name, spec, key=key), first["id"], "settled create replay")
    ensure(replay.get("state") == "succeeded", f"H-28: settled replay reports {replay}")
    ensure(
        replay == ctx.get_operation(first["id"]).json(),
        "H-28: the replay's body is not the operation's current record",
    )
    _unchanged(ctx, name, rep, "H-28", "a replayed create")

    update_key = ctx.key()
    changed = ctx.model().changed(rep["spec"])
    update = ctx.settle(ctx.update(name, changed, _gen(rep), key=update_key), "update")
    updated = ctx.representation(name)
    _replay_status(
        ctx.update(name, changed, _gen(rep), key=update_key),
        update["id"],
        "update replay (its generation fence is stale by now: the replay takes precedence)",
    )
    _unchanged(ctx, name, updated, "H-28", "a replayed update")

    delete_key = ctx.key()
    delete = ctx.settle(ctx.delete(name, key=delete_key), "delete")
    _replay_status(ctx.delete(name, key=delete_key), delete["id"], "delete replay")
    ctx.expect_absent(name, "H-28", "after a replayed delete")
    recreate = ctx.accepted(ctx.create(name, spec), "create after the delete")
    ctx.wait(recreate["id"])
    _replay_status(ctx.create(name, spec, key=key), first["id"], "replay of the first create")
    ensure(
        _uid(ctx.representation(name))
        == recreate.get("resourceUid", _uid(ctx.representation(name))),
        "H-28: replaying the first create mutated the re-created resource",
    )

    if ctx.admin_http is not None:
        running_name = ctx.name("replay")
        running_key = ctx.key()
        with ctx.faults(stuckOperations=True):
            held = ctx.accepted(ctx.create(running_name, spec, key=running_key), "held create")
            replay = _replay_status(
                ctx.create(running_name, spec, key=running_key),
                held["id"],
                "replay of a running create (takes precedence over operation_in_progress)",
            )
            ensure(replay.get("state") == "running", "H-28: a held create replayed as settled")
            ctx.release()
            ctx.wait(held["id"])


@check("idempotency-key-reuse-refused", "H-29")
def idempotency_key_reuse_refused(ctx: Context) -> None:
    """A key repeated with a different request fails idempotency_key_reused, changing nothing."""
    key = ctx.key()
    name = ctx.name("reuse")
    record = ctx.settle(ctx.create(name, key=key), "create")
    rep = ctx.representation(name)
    other = ctx.name("reuse")
    ctx.track(other, None, None)
    attempts = [
        ("same name, different body", ctx.create(name, ctx.model().changed(rep["spec"]), key=key)),
        ("another name", ctx.create(other, rep["spec"], key=key)),
        ("an update of the resource", ctx.update(name, rep["spec"], _gen(rep), key=key)),
        ("a delete of the resource", ctx.delete(name, key=key)),
    ]
    for what, response in attempts:
        details = ctx.expect_error(
            response, 422, "idempotency_key_reused", "H-29", f"key reused for {what}"
        )
        ensure(
            details.get("operationId") == record["id"],
            f"H-29: {what}: details.operationId is {details.get('operationId')!r}, "
            f"not {record['id']}",
        )
    ctx.expect_absent(other, "H-29", "a reused key created another resource")
    _unchanged(ctx, name, rep, "H-29", "requests reusing a key")


@check("idempotency-key-recorded", "H-30")
def idempotency_key_recorded(ctx: Context) -> None:
    """The key is on the operation record, and a create's key on the resource it made."""
    key = ctx.key()
    name = ctx.name("recorded")
    accepted = ctx.accepted(ctx.create(name, key=key), "create")
    ensure(
        accepted.get("idempotencyKey") == key,
        f"H-30: the create's record carries idempotencyKey {accepted.get('idempotencyKey')!r}",
    )
    final = ctx.wait(accepted["id"])
    ensure(final.get("idempotencyKey") == key, "H-30: the settled record lost its idempotencyKey")
    rep = ctx.representation(name)
    ensure(
        rep["metadata"].get("creationIdempotencyKey") == key,
        "H-30: metadata.creationIdempotencyKey is "
        f"{rep['metadata'].get('creationIdempotencyKey')!r}, not the create's key",
    )
    update_key = ctx.key()
    update = ctx.settle(
        ctx.update(name, ctx.model().changed(rep["spec"]), _gen(rep), key=update_key), "update"
    )
    ensure(update.get("idempotencyKey") == update_key, "H-30: the update's record lacks its key")
    after = ctx.representation(name)
    ensure(
        after["metadata"].get("creationIdempotencyKey") == key,
        "H-30: an update changed metadata.creationIdempotencyKey",
    )


# ----------------------------------------------------------------------------------------------
# §7 operations


def _record_names(record: dict[str, Any], ctx: Context, name: str, verb: str, what: str) -> None:
    ensure(record.get("state") in OPERATION_STATES, f"H-31: {what}: state {record.get('state')!r}")
    ensure(record.get("verb") == verb, f"§7: {what}: verb is {record.get('verb')!r}, not {verb!r}")
    ensure(record.get("space") == ctx.space, f"H-31: {what}: space is {record.get('space')!r}")
    ensure(record.get("name") == name, f"H-31: {what}: name is {record.get('name')!r}")
    ensure(
        record.get("formRef") == ctx.primary.to_json(),
        f"H-31: {what}: formRef is {record.get('formRef')!r}, not the exact FormRef",
    )
    uid = record.get("resourceUid")
    ensure(isinstance(uid, str) and uid, f"H-31: {what}: resourceUid is {uid!r}")


@check("operation-record-shape", "H-31", "H-32", admin="optional")
def operation_record_shape(ctx: Context) -> None:
    """Operation records name the exact target and the result uid from acceptance on."""
    name = ctx.name("record")
    response = ctx.create(name)
    accepted = ctx.accepted(response, "create")
    location = response.headers.get("location", "")
    expected_location = f"{API}/operations/{accepted['id']}"
    ensure(
        location == expected_location or location.endswith(ctx.base_url + expected_location),
        f"§6: Location is {location!r}, expected {expected_location!r}",
    )
    _record_names(accepted, ctx, name, "create", "the create's 202 record")
    uid = accepted["resourceUid"]
    if ctx.admin_http is not None:
        held_name = ctx.name("record")
        with ctx.faults(stuckOperations=True):
            held = ctx.accepted(ctx.create(held_name), "held create")
            running = ctx.get_operation(held["id"]).json()
            ensure(running.get("state") == "running", f"a held create reports {running}")
            _record_names(running, ctx, held_name, "create", "a running create's record")
            ensure(
                running.get("settledAt") is None,
                f"§7: a running record has settledAt {running.get('settledAt')!r}",
            )
            ctx.release()
            settled = ctx.wait(held["id"])
        ensure(
            settled.get("resourceUid") == running["resourceUid"],
            "H-31: resourceUid changed when the create committed",
        )
        ensure(
            _uid(ctx.representation(held_name)) == running["resourceUid"],
            "H-31: the resource's uid is not the resourceUid its running create named",
        )
    final = ctx.wait(accepted["id"])
    ensure(final.get("state") == "succeeded", f"create ended {final}")
    ensure(
        final.get("error", "absent") is None,
        f"H-32: a succeeded record carries error {final.get('error')!r}",
    )
    _record_names(final, ctx, name, "create", "the settled create")
    ensure(final.get("resourceUid") == uid, "H-31: resourceUid changed on settlement")
    rep = ctx.representation(name)
    ensure(_uid(rep) == uid, f"H-31: the resource's uid {_uid(rep)} is not the resourceUid {uid}")
    update = ctx.accepted(ctx.update(name, ctx.model().changed(rep["spec"]), _gen(rep)), "update")
    _record_names(update, ctx, name, "update", "the update's record")
    ensure(update["resourceUid"] == uid, "H-31: the update's record names another uid")
    ctx.wait(update["id"])
    delete = ctx.accepted(ctx.delete(name), "delete")
    _record_names(delete, ctx, name, "delete", "the delete's record")
    ensure(delete["resourceUid"] == uid, "H-31: the delete's record names another uid")
    ctx.wait(delete["id"])
    listed = ctx.http.get(
        f"{API}/operations",
        params={
            "space": ctx.space,
            "apiVersion": ctx.primary.api_version,
            "kind": ctx.primary.kind,
            "name": name,
        },
    )
    ensure(listed.status_code == 200, f"§7: listing the operations of {name!r}: {describe(listed)}")
    items = ctx.body(listed, "operation list").get("items")
    if not isinstance(items, list):
        raise fail("§7: the operation list has no `items` array")
    ids = [item.get("id") for item in items if isinstance(item, dict)]
    expected = [delete["id"], update["id"], accepted["id"]]
    ensure(
        ids == expected,
        f"§7: the operations of {name!r} listed as {ids}, expected newest first {expected}",
    )


@check("failed-operation-reports-error", "H-32", admin="required")
def failed_operation_reports_error(ctx: Context) -> None:
    """A failed create reports a portable error and leaves no resource behind."""
    ctx.need_admin("faults failNextOperations makes the host fail an operation")
    name = ctx.name("failed")
    with ctx.faults(failNextOperations=1):
        record = ctx.accepted(ctx.create(name), "create")
        final = ctx.wait(record["id"])
    ensure(final.get("state") == "failed", f"failNextOperations=1 but the create ended {final}")
    error = final.get("error")
    if not isinstance(error, dict):
        raise fail(f"H-32: a failed record carries error {error!r}")
    ensure(
        error.get("code") in ERROR_CODES,
        f"H-32: the failed record's error code {error.get('code')!r} is not in §9",
    )
    ensure(isinstance(error.get("message"), str), "H-32: the failed record's error lacks a message")
    ctx.expect_absent(name, "H-32", "a failed create left a resource")
    again = ctx.settle(ctx.create(name), "create after the failed one")
    ensure(again.get("error", "absent") is None, "H-32: a succeeded record carries an error")


@check("operation-resumable-after-settlement", "H-33")
def operation_resumable_after_settlement(ctx: Context) -> None:
    """0017 rule 8: a settled create's record replays byte-identically after later operations."""
    name = ctx.name("resumable")
    create = ctx.settle(ctx.create(name), "create")
    op_id = create["id"]
    first = ctx.get_operation(op_id)
    ensure(first.status_code == 200, f"H-33: the settled create's record: {describe(first)}")
    original = first.content

    def same(moment: str) -> None:
        response = ctx.get_operation(op_id)
        ensure(
            response.status_code == 200,
            f"H-33: the create's record {moment}: {describe(response)}",
        )
        ensure(
            response.content == original,
            f"H-33: the create's record {moment} is not byte-identical: "
            f"{original[:200]!r} then {response.content[:200]!r}",
        )

    same("read twice")
    rep = ctx.representation(name)
    updated = ctx.change(name, rep)
    same("after the resource it created was updated")
    ctx.observe(name)
    second = ctx.settle(
        ctx.update(name, ctx.model().changed(updated["spec"]), _gen(updated)), "second update"
    )
    same("after a second operation ran")
    second_body = ctx.get_operation(second["id"]).content
    ctx.settle(ctx.delete(name), "delete")
    same("after the resource was deleted")
    ensure(
        ctx.get_operation(second["id"]).content == second_body,
        "H-33: the second update's record changed after a later delete",
    )
    ensure(ctx.get_operation(op_id).json().get("state") == "succeeded", "H-33: state changed")


@check("operation-expiry-keeps-resource", "H-34", admin="required")
def operation_expiry_keeps_resource(ctx: Context) -> None:
    """Records expire only once settled; an expired one is operation_not_found, the resource kept.

    Forced expiry (POST /admin/v1/operations/expire) first, then the host's own retention, cut
    to a fraction of a second, with a held (running) operation that must outlive it.
    """
    ctx.need_admin("POST /admin/v1/operations/expire forces expiry")
    name = ctx.name("expiry")
    record = ctx.settle(ctx.create(name), "create")
    rep = ctx.representation(name)
    ctx.admin("POST", "/operations/expire", {"ids": [record["id"]]})
    ctx.expect_error(
        ctx.get_operation(record["id"]), 404, "operation_not_found", "H-34", "an expired record"
    )
    _same_resource(ctx, name, rep, "its create's record was expired")
    current = ctx.change(name, rep)

    retention = 0.3
    with ctx.faults(operationRetentionSeconds=retention, stuckOperations=True):
        held = ctx.accepted(
            ctx.update(name, ctx.model().changed(current["spec"]), _gen(current)), "held update"
        )
        time.sleep(retention * 3)
        still = ctx.get_operation(held["id"])
        ensure(
            still.status_code == 200 and still.json().get("state") == "running",
            f"H-34: a running operation's record expired: {describe(still)}",
        )
        ctx.release()
        ctx.wait(held["id"])
        after_update = ctx.representation(name, what="after the held update committed")
        deadline = time.monotonic() + max(5.0, ctx.op_timeout)
        while True:
            gone = ctx.get_operation(held["id"])
            if gone.status_code != 200 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        ctx.expect_error(
            gone, 404, "operation_not_found", "H-34", f"a record {retention}s past its retention"
        )
        _same_resource(ctx, name, after_update, "its update's record expired by retention")


def _same_resource(ctx: Context, name: str, rep: dict[str, Any], moment: str) -> None:
    after = ctx.representation(name, what=f"after {moment}")
    for what, key in (("uid", _uid), ("generation", _gen), ("revision", _rev)):
        ensure(key(after) == key(rep), f"H-34: {moment}: the resource's {what} changed")
    ensure(after["spec"] == rep["spec"], f"H-34: {moment}: the resource's spec changed")


@check("accepted-mutation-durable", "H-35")
def accepted_mutation_durable(ctx: Context) -> None:
    """An accepted mutation survives a crash (not provable over the wire)."""
    raise CheckSkipped(
        "cannot be proven over the wire without crashing the host; the reference host's "
        "durability test (kill -9 and restart on the same database) proves it"
    )


CHECK_NAMES = [c.name for c in CHECKS]


def cited_rules() -> set[int]:
    """Every H-number some check cites."""
    return {int(cite[2:]) for c in CHECKS for cite in c.cites if cite.startswith("H-")}


__all__ = ["CHECKS", "CHECK_NAMES", "cited_rules", "error_details"]
