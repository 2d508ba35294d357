"""Running a selection of checks against one host, with set-up and guaranteed clean-up."""

from __future__ import annotations

import re
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import httpx

from .checks import CHECKS, Check
from .context import Context
from .lifecycle import cleanup, preflight, setup_space
from .outcomes import CheckFailed, CheckResult, CheckSkipped, HostUnusable

_CITED = re.compile(r"^(H-[0-9]+|§)")

Progress = Callable[[int, int, Check, CheckResult | None], None]


@dataclass
class RunReport:
    """What one run found, and what its clean-up could not remove."""

    host: str
    results: list[CheckResult]
    cleanup_problems: list[str] = field(default_factory=list)
    space: str = ""
    #: Whether a skipped required check is accepted (the CLI's --allow-skips). It still is not
    #: a pass: `unproven` names it either way.
    allow_skips: bool = False

    @property
    def failed_required(self) -> list[str]:
        return [r.name for r in self.results if r.failed and r.required]

    @property
    def unproven(self) -> list[str]:
        """Required checks that were skipped: the rules they cite were not proven."""
        return [r.name for r in self.results if r.required and r.result == "skipped"]

    @property
    def ok(self) -> bool:
        """Every required check passed; a skipped one counts only when skips are allowed."""
        return not self.failed_required and (self.allow_skips or not self.unproven)


def select(only: Iterable[str] | None) -> list[Check]:
    """The checks to run, in suite order; ValueError naming unknown names."""
    if not only:
        return list(CHECKS)
    wanted = list(only)
    known = {c.name for c in CHECKS}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise ValueError(f"unknown check name(s): {', '.join(unknown)} (see --list for the names)")
    return [c for c in CHECKS if c.name in wanted]


def run(
    url: str,
    token: str,
    admin_token: str | None = None,
    only: Iterable[str] | None = None,
    *,
    op_timeout: float = 10.0,
    poll_interval: float = 0.02,
    progress: Progress | None = None,
    allow_skips: bool = False,
) -> RunReport:
    """Run the selected checks. Raises HostUnusable when the host cannot be tested at all.

    The report is `ok` when every required check passed; with `allow_skips`, a required check
    that was skipped does not make it fail (it is still listed in `unproven`).
    """
    checks = select(only)
    ctx = Context(url, token, admin_token, op_timeout=op_timeout, poll_interval=poll_interval)
    results: list[CheckResult] = []
    try:
        preflight(ctx)
        setup_error = None
        try:
            setup_space(ctx)
        except CheckFailed as exc:
            setup_error = f"set-up failed: {exc}"
        for index, item in enumerate(checks, 1):
            if progress:
                progress(index, len(checks), item, None)
            if setup_error:
                result = CheckResult(item.name, item.cites, item.required, "fail", setup_error)
            else:
                result = _run_one(ctx, item)
            results.append(result)
            if progress:
                progress(index, len(checks), item, result)
    finally:
        cleanup(ctx)
    return RunReport(url, results, ctx.cleanup_problems, ctx.space, allow_skips)


def _run_one(ctx: Context, item: Check) -> CheckResult:
    started = time.monotonic()
    outcome, reason = "pass", ""
    try:
        item.func(ctx)
    except CheckFailed as exc:
        outcome, reason = "fail", str(exc)
        if not _CITED.match(reason):
            # A step every check shares (a create, a read) went wrong: name the rules at stake.
            reason = f"{'/'.join(item.cites)}: {reason}"
    except CheckSkipped as exc:
        outcome, reason = "skipped", str(exc)
    except HostUnusable:
        raise
    except httpx.TransportError as exc:
        outcome, reason = "fail", f"transport error talking to the host: {exc!r}"
    except Exception as exc:  # a host answer the suite could not interpret
        where = traceback.extract_tb(exc.__traceback__)[-1]
        outcome = "fail"
        reason = (
            f"unexpected {type(exc).__name__}: {exc} (at {where.name}:{where.lineno}; the host's "
            "answer did not have the shape docs/host-api.md describes)"
        )
    return CheckResult(
        item.name, item.cites, item.required, outcome, reason, time.monotonic() - started
    )
