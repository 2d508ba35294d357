"""§5 Reads and §6 mutations: visibility, the create and update fences, validation."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import httpx

from takoform_spec.host_api import OperationState
from takoform_spec.identity import FormRef

from ..answers import describe
from ..context import Context
from ..outcomes import CheckSkipped, ensure, fail
from .common import Check, generation_of, registrar, revision_of, same_details, uid_of, unchanged

CHECKS: list[Check] = []
check = registrar(CHECKS)


@check("uncommitted-invisible", "H-20", "H-36", admin="optional")
def uncommitted_invisible(ctx: Context) -> None:
    """Running creates, updates and deletes are invisible to reads until they commit."""
    if ctx.admin_http is None:
        name = ctx.name("uncommitted")
        record = ctx.accepted(ctx.create(name), "create")
        read = ctx.read(name)
        op = ctx.get_operation(record["id"]).json()
        if op.get("state") == OperationState.RUNNING:
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
            ctx.update(updated, ctx.model().changed(rep_u["spec"]), generation_of(rep_u)), "update"
        )
        delete = ctx.accepted(ctx.delete(deleted), "delete")
        time.sleep(0.1)
        for op in (create, update, delete):
            state = ctx.get_operation(op["id"]).json().get("state")
            if state != OperationState.RUNNING:
                raise fail(
                    f"faults stuckOperations=true did not hold operation {op['id']} ({state})"
                )
        ctx.expect_error(
            ctx.read(name), 404, "resource_not_found", "H-20", "read while create runs"
        )
        unchanged(ctx, updated, rep_u, "H-20", "an update that has not committed")
        still = ctx.read(deleted)
        ensure(
            still.status_code == 200,
            f"H-36: a resource whose delete has not committed reads {describe(still)}",
        )
        ctx.release()
        for op in (create, update, delete):
            final = ctx.wait(op["id"])
            ensure(
                final.get("state") == OperationState.SUCCEEDED,
                f"operation {op['id']} ended {final}",
            )
    ctx.representation(name, what="after its create committed")
    ensure(
        generation_of(ctx.representation(updated)) != generation_of(rep_u),
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
    unchanged(ctx, name, rep, "H-21", "a refused create")
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
    unchanged(ctx, name, rep, "H-21", "an unfenced PUT")
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
        ctx.update(existing, {**rep["spec"], "conformanceUndeclared": 1}, generation_of(rep)),
        422,
        "validation_failed",
        "H-22",
        "update with an undeclared field",
    )
    unchanged(ctx, existing, rep, "H-22", "a refused update")
    extra = sorted(sibling_fields - set(model.fields))
    if ctx.sibling is not None and extra:
        sibling = ctx.model(ctx.sibling)
        field = extra[0]
        spec = {**sibling.valid_spec(), field: sibling.example(field)}
        ctx.make("validate", spec, ref=ctx.sibling)  # the same field is fine where declared


def _refused_by_fence(
    ctx: Context,
    response: httpx.Response,
    code: str,
    cite: str,
    what: str,
    *,
    expected: str,
    current: str,
) -> None:
    """A mutation refused with 412 `code` by one of its fences, the details naming the value it
    expected and the current one."""
    details = ctx.expect_error(response, 412, code, cite, what)
    ensure(
        same_details(details, "expected", expected) and same_details(details, "current", current),
        f"{cite}: details must name expected {expected} and current {current}: {details}",
    )


@check("stale-generation-fence", "H-23")
def stale_generation_fence(ctx: Context) -> None:
    """An update fenced on a stale generation fails generation_conflict and changes nothing."""
    name, rep = ctx.make("genfence")
    current = ctx.change(name, rep)
    for stale in ("1", str(int(generation_of(current)) + 5)):
        _refused_by_fence(
            ctx,
            ctx.update(name, ctx.model().changed(current["spec"]), stale),
            "generation_conflict",
            "H-23",
            f"update expecting generation {stale} (current {generation_of(current)})",
            expected=stale,
            current=generation_of(current),
        )
        unchanged(ctx, name, current, "H-23", "a stale-generation update")


def _fence_holds(
    ctx: Context,
    name: str,
    current: dict[str, Any],
    stale: str,
    *,
    fence: str,
    value_of: Callable[[dict[str, Any]], str],
    code: str,
    cite: str,
) -> None:
    """An update and a delete of `name` fenced on `stale` (`fence`: the keyword of
    Context.update and delete) both fail 412 `code` and change nothing; fenced on the current
    value (`value_of` a representation), both go through."""

    def fenced_on(value: str) -> dict[str, Any]:
        return {fence: value}

    what = f"update with {fence}={stale}"
    _refused_by_fence(
        ctx,
        ctx.update(
            name, ctx.model().changed(current["spec"]), generation_of(current), **fenced_on(stale)
        ),
        code,
        cite,
        f"{what} (current {value_of(current)})",
        expected=stale,
        current=value_of(current),
    )
    unchanged(ctx, name, current, cite, what)
    what = f"delete with {fence}={stale}"
    ctx.expect_error(ctx.delete(name, **fenced_on(stale)), 412, code, cite, what)
    unchanged(ctx, name, current, cite, what)
    fresh = ctx.change(name, current, **fenced_on(value_of(current)))
    ctx.settle(ctx.delete(name, **fenced_on(value_of(fresh))), f"delete with the current {fence}")


def _quoted_revision(rep: dict[str, Any]) -> str:
    return f'"{revision_of(rep)}"'


@check("stale-revision-fence", "H-24")
def stale_revision_fence(ctx: Context) -> None:
    """A mutation with a stale If-Match fails revision_conflict and changes nothing."""
    name, rep = ctx.make("revfence")
    current = ctx.change(name, rep)
    _fence_holds(
        ctx,
        name,
        current,
        _quoted_revision(rep),
        fence="if_match",
        value_of=_quoted_revision,
        code="revision_conflict",
        cite="H-24",
    )
    ctx.expect_absent(name, "H-36", "after a fenced delete committed")


@check("expected-uid-fence", "H-25")
def expected_uid_fence(ctx: Context) -> None:
    """A mutation expecting another uid fails uid_mismatch and changes nothing."""
    name, rep = ctx.make("uidfence")
    _fence_holds(
        ctx,
        name,
        rep,
        str(uuid.uuid4()),
        fence="uid",
        value_of=uid_of,
        code="uid_mismatch",
        cite="H-25",
    )


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
            ctx.update(existing, ctx.model().changed(rep["spec"]), generation_of(rep)), "update"
        )
        for what, response in (
            ("second update", ctx.update(existing, rep["spec"], generation_of(rep))),
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
    ensure(final.get("state") == OperationState.SUCCEEDED, f"the first create ended {final}")
    rep_new = ctx.representation(name)
    ensure(
        uid_of(rep_new) == first.get("resourceUid", uid_of(rep_new)),
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
    ctx.settle(
        ctx.update(name, {**spec, field: other}, generation_of(rep)), f"update setting {field}"
    )
    set_rep = ctx.representation(name)
    ensure(set_rep["spec"].get(field) == other, f"H-27: update did not set {field!r}")
    ctx.settle(ctx.update(name, spec, generation_of(set_rep)), f"update omitting {field}")
    after = ctx.representation(name)
    ensure(
        after["spec"].get(field) == default,
        f"H-27: update omitting {field!r}: spec.{field} is {after['spec'].get(field)!r}, "
        f"the definition's default is {default!r}",
    )


def _with_sensitive_outputs(ctx: Context) -> tuple[FormRef, list[str]] | None:
    """An installed FormRef whose definition declares sensitive outputs, and their names."""
    for form in ctx.installed:
        outputs = ctx.model(form.ref).schema.get("outputs") or []
        names = [o["name"] for o in outputs if isinstance(o, dict) and o.get("sensitive")]
        if names:
            return form.ref, names
    return None


@check("errors-keep-sensitive-outputs", "H-39")
def errors_keep_sensitive_outputs(ctx: Context) -> None:
    """Refusals of a resource with sensitive outputs carry none of their values."""
    found = _with_sensitive_outputs(ctx)
    if found is None:
        raise CheckSkipped("the host installs no definition with a sensitive output")
    ref, names = found
    name, rep = ctx.make("sensitive", ctx.model(ref).valid_spec(), ref=ref)
    outputs = (rep.get("status") or {}).get("outputs") or {}
    values = {n: str(outputs[n]) for n in names if outputs.get(n)}
    if not values:
        raise CheckSkipped(f"{ref} declares sensitive outputs but the host reported none")
    refusals = [
        (
            "an update with an undeclared field",
            ctx.update(
                name, {**rep["spec"], "conformanceUndeclared": 1}, generation_of(rep), ref=ref
            ),
        ),
        ("an update with a stale generation", ctx.update(name, rep["spec"], "999", ref=ref)),
        ("a create of the existing name", ctx.create(name, rep["spec"], ref=ref)),
    ]
    for what, response in refusals:
        ensure(response.status_code >= 400, f"{what} was accepted: {describe(response)}")
        leaked = sorted(n for n, value in values.items() if value in response.text)
        ensure(not leaked, f"H-39: {what}: the error answer carries the value of {leaked}")
