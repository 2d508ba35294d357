"""What the checks of every section share: declaring a check, reading a representation's members."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..answers import unquote_etag
from ..context import Context
from ..outcomes import ensure

CheckFunction = Callable[[Context], None]


@dataclass(frozen=True)
class Check:
    """One named check: the H-numbers it proves and how it runs."""

    name: str
    cites: tuple[str, ...]
    func: CheckFunction
    required: bool = True
    #: "no": runs without the admin API; "optional": proves more with it; "required": skipped
    #: without it.
    admin: str = "no"
    summary: str = ""


def registrar(
    checks: list[Check],
) -> Callable[..., Callable[[CheckFunction], CheckFunction]]:
    """A `@check(name, *cites, required=True, admin="no")` decorator appending to `checks`.

    The check's summary is the first paragraph of its docstring.
    """

    def check(
        name: str, *cites: str, required: bool = True, admin: str = "no"
    ) -> Callable[[CheckFunction], CheckFunction]:
        def register(func: CheckFunction) -> CheckFunction:
            summary = " ".join((func.__doc__ or "").strip().split("\n\n")[0].split())
            checks.append(Check(name, tuple(cites), func, required, admin, summary))
            return func

        return register

    return check


def generation_of(rep: dict[str, Any]) -> str:
    return str(rep["metadata"]["generation"])


def revision_of(rep: dict[str, Any]) -> str:
    return str(rep["metadata"]["revision"])


def uid_of(rep: dict[str, Any]) -> str:
    return str(rep["metadata"]["uid"])


def same_details(details: dict[str, Any], key: str, value: str) -> bool:
    return unquote_etag(details.get(key)) == unquote_etag(value)


def unchanged(ctx: Context, name: str, before: dict[str, Any], cite: str, what: str) -> None:
    after = ctx.representation(name, what=f"after {what}")
    ensure(
        revision_of(after) == revision_of(before) and after["spec"] == before["spec"],
        f"{cite}: {what} changed the resource "
        f"(revision {revision_of(before)} -> {revision_of(after)})",
    )
