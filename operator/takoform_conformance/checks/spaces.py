"""§2 Spaces: an unknown space is refused; a space's own lifecycle."""

from __future__ import annotations

from ..answers import describe
from ..context import Context
from ..outcomes import ensure
from ..vocabulary import (
    API,
)
from .common import Check, registrar

CHECKS: list[Check] = []
check = registrar(CHECKS)


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
