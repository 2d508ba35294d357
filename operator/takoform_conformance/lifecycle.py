"""A run's set-up and clean-up: reaching the host, choosing its Forms, the run's space, removal."""

from __future__ import annotations

import contextlib

import httpx

from takoform_spec.identity import FormRef, parse_definition_version

from .answers import describe, error_code, error_details
from .context import Context, Tracked, quote_segment
from .forms import InstalledForm
from .outcomes import CheckFailed, HostUnusable
from .vocabulary import ADMIN, API

#: The Form line the suite prefers (docs/forms: Bucket has three definition versions).
PREFERRED_LINE = ("storage.takoform.io/v1", "Bucket")


def preflight(ctx: Context) -> None:
    """Reach the host and list its forms; HostUnusable when it cannot be tested at all."""
    try:
        response = ctx.http.get(f"{API}/forms")
    except httpx.TransportError as exc:
        raise HostUnusable(f"cannot reach the host at {ctx.base_url}: {exc}") from None
    except httpx.InvalidURL as exc:
        raise HostUnusable(f"invalid host URL {ctx.base_url!r}: {exc}") from None
    if response.status_code == 401:
        raise HostUnusable(f"the host at {ctx.base_url} refused the token (401)")
    if response.status_code != 200:
        raise HostUnusable(
            f"GET {API}/forms answered {describe(response)}; is {ctx.base_url} a Takoform "
            "v1alpha3 host?"
        )
    try:
        items = response.json()["items"]
        ctx.installed = [
            InstalledForm(FormRef.from_json(item["formRef"]), list(item["packageDigests"]))
            for item in items
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise HostUnusable(f"GET {API}/forms did not list forms as H-API §3 says: {exc}") from None
    if not ctx.installed:
        raise HostUnusable("the host has no Forms installed; nothing can be checked")
    if ctx.admin_http is not None:
        try:
            admin = ctx.admin_http.get(f"{ADMIN}/misbehaviours")
        except httpx.TransportError as exc:
            raise HostUnusable(f"admin API unreachable: {exc}") from None
        if admin.status_code != 200:
            raise HostUnusable(
                f"the admin token was given but GET {ADMIN}/misbehaviours answered "
                f"{describe(admin)}"
            )
    _choose_forms(ctx)


def _choose_forms(ctx: Context) -> None:
    lines: dict[tuple[str, str], list[FormRef]] = {}
    for form in ctx.installed:
        lines.setdefault((form.ref.api_version, form.ref.kind), []).append(form.ref)
    if PREFERRED_LINE in lines:
        line = PREFERRED_LINE
    else:
        line = max(lines, key=lambda key: (len(lines[key]), key))
    refs = sorted(lines[line], key=lambda r: parse_definition_version(r.definition_version))
    ctx.primary = refs[0]
    same_major = [r for r in refs[1:] if r.major == ctx.primary.major]
    others = same_major or refs[1:]
    ctx.sibling = others[0] if others else None


def setup_space(ctx: Context) -> None:
    response = ctx.create_space(ctx.space)
    if response.status_code not in (200, 201):
        raise CheckFailed(f"§2: PUT space {ctx.space!r} answered {describe(response)}")


def cleanup(ctx: Context) -> None:
    """Remove every resource and space this run created, best effort, never raising."""
    with contextlib.suppress(Exception):
        ctx.restore_faults()
    pending: list[tuple[Tracked, str]] = []
    seen: set[tuple[str, str]] = set()
    for item in reversed(ctx.tracked):
        key = (item.space, item.name)
        if key in seen:
            continue
        seen.add(key)
        for ref in ctx.refs_of_line(item.ref):
            try:
                response = ctx.http.delete(
                    ctx.resource_path(item.name, ref, item.space), params=ctx.query(ref)
                )
            except httpx.HTTPError as exc:
                ctx.cleanup_problems.append(f"delete {item.space}/{item.name}: {exc}")
                break
            if response.status_code == 409 and error_code(response) == "operation_in_progress":
                op_id = str(error_details(response).get("operationId", ""))
                with contextlib.suppress(Exception):
                    ctx.wait(op_id, timeout=ctx.op_timeout)
                response = ctx.http.delete(
                    ctx.resource_path(item.name, ref, item.space), params=ctx.query(ref)
                )
            if response.status_code == 202:
                with contextlib.suppress(Exception):
                    pending.append((item, str(response.json()["id"])))
                break
    for item, op_id in pending:
        try:
            ctx.wait(op_id, timeout=ctx.op_timeout)
        except Exception as exc:
            ctx.cleanup_problems.append(f"delete {item.space}/{item.name}: {exc}")
    for space in reversed(ctx.spaces):
        try:
            response = ctx.http.delete(f"{API}/spaces/{quote_segment(space)}")
        except httpx.HTTPError as exc:
            ctx.cleanup_problems.append(f"delete space {space!r}: {exc}")
            continue
        if response.status_code not in (204, 200, 404, 400):
            ctx.cleanup_problems.append(f"delete space {space!r}: {describe(response)}")
    for client in (ctx.http, ctx.raw, ctx.admin_http):
        if client is not None:
            client.close()
