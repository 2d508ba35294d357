"""`takoform-conformance`: run the host conformance checks against a host URL.

Exit codes: 0 every required check passed, 1 a required check failed or was skipped (not
proven; `--allow-skips` accepts skipped ones, which are still named), 2 usage error (bad
arguments, unknown check name, host unreachable or token refused).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from typing import TextIO

from .checks import CHECKS, Check
from .outcomes import CheckResult, HostUnusable
from .runner import Progress, RunReport, run, select

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="takoform-conformance",
        description="Prove a Takoform v1alpha3 host keeps the MUSTs of docs/host-api.md. Each "
        "check cites the H-numbers it proves. The run creates its own space "
        "(conformance-<random>) and removes everything it created afterwards.",
        epilog="Exit codes: 0 all required checks passed, 1 a required check failed or was "
        "skipped (not proven) without --allow-skips, 2 usage error (including an unreachable "
        "host or a refused token).",
    )
    parser.add_argument("--host", help="base URL of the host, e.g. http://127.0.0.1:8080")
    parser.add_argument(
        "--token",
        default=os.environ.get("TAKOFORM_TOKEN"),
        help="bearer token for the host API (default: $TAKOFORM_TOKEN)",
    )
    parser.add_argument(
        "--admin-token",
        default=os.environ.get("TAKOFORM_ADMIN_TOKEN"),
        help="token for the reference host's /admin/v1 API; checks that need it are skipped "
        "without it (default: $TAKOFORM_ADMIN_TOKEN)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", action="extend", help="run only these checks"
    )
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    parser.add_argument(
        "--op-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to wait for an operation to settle (default 10)",
    )
    parser.add_argument(
        "--allow-skips",
        action="store_true",
        help="exit 0 even when a required check was skipped (e.g. needs --admin-token, or cannot "
        "be proven over the wire); the report still names every required check not proven",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    return parser


def _admin_label(item: Check) -> str:
    return {"no": "no", "optional": "optional", "required": "yes"}[item.admin]


def _print_list(out: TextIO) -> None:
    width = max(len(c.name) for c in CHECKS)
    out.write(f"{'CHECK':<{width}}  {'CITES':<16} {'REQUIRED':<8} {'ADMIN':<8} WHAT\n")
    for item in CHECKS:
        out.write(
            f"{item.name:<{width}}  {', '.join(item.cites):<16} "
            f"{'yes' if item.required else 'no':<8} {_admin_label(item):<8} {item.summary}\n"
        )


def _table(report: RunReport, out: TextIO) -> None:
    width = max(len(r.name) for r in report.results) if report.results else 10
    out.write(f"\nTakoform host conformance: {report.host}\n\n")
    out.write(f"{'CHECK':<{width}}  {'RESULT':<7}  {'CITES':<16} REASON\n")
    for result in report.results:
        label = result.result if result.required or result.result != "fail" else "fail*"
        reason = result.reason
        indent = " " * (width + 2 + 9 + 17)
        lines = textwrap.wrap(reason, 100) or [""]
        out.write(f"{result.name:<{width}}  {label:<7}  {', '.join(result.cites):<16} {lines[0]}\n")
        for line in lines[1:]:
            out.write(f"{indent}{line}\n")
    out.write("\n" + _summary_line(report.results) + "\n")
    if any(r.failed and not r.required for r in report.results):
        out.write("(fail*: an optional check failed; it does not change the exit code)\n")
    if report.unproven:
        out.write(f"required checks not proven (skipped): {', '.join(report.unproven)}\n")
        if report.allow_skips:
            out.write("(accepted by --allow-skips: the rules they cite remain unproven)\n")
        else:
            out.write("(a skipped required check is not a pass: exit 1; --allow-skips accepts)\n")
    for problem in report.cleanup_problems:
        out.write(f"warning: clean-up: {problem}\n")


def _counts(results: Sequence[CheckResult]) -> dict[str, int]:
    return {
        "checks": len(results),
        "passed": sum(r.result == "pass" for r in results),
        "failed": sum(r.result == "fail" for r in results),
        "requiredFailed": sum(r.result == "fail" and r.required for r in results),
        "skipped": sum(r.result == "skipped" for r in results),
        "requiredSkipped": sum(r.result == "skipped" and r.required for r in results),
    }


def _summary_line(results: Sequence[CheckResult]) -> str:
    c = _counts(results)
    return (
        f"{c['checks']} checks: {c['passed']} passed, {c['failed']} failed "
        f"({c['requiredFailed']} required), {c['skipped']} skipped "
        f"({c['requiredSkipped']} required)"
    )


def _progress(err: TextIO) -> Progress:
    def report(index: int, total: int, item: Check, result: CheckResult | None) -> None:
        if result is None:
            err.write(f"[{index:>2}/{total}] {item.name} ... ")
            err.flush()
        else:
            err.write(f"{result.result} ({result.seconds:.2f}s)\n")
            err.flush()

    return report


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    out, err = sys.stdout, sys.stderr
    if args.list:
        _print_list(out)
        return EXIT_OK
    if not args.host:
        parser.print_usage(err)
        err.write("takoform-conformance: error: --host is required\n")
        return EXIT_USAGE
    if not args.token:
        parser.print_usage(err)
        err.write("takoform-conformance: error: --token (or $TAKOFORM_TOKEN) is required\n")
        return EXIT_USAGE
    try:
        select(args.only)
    except ValueError as exc:
        err.write(f"takoform-conformance: error: {exc}\n")
        return EXIT_USAGE
    try:
        report = run(
            args.host,
            args.token,
            args.admin_token,
            args.only,
            op_timeout=args.op_timeout,
            progress=None if args.quiet else _progress(err),
            allow_skips=args.allow_skips,
        )
    except HostUnusable as exc:
        err.write(f"takoform-conformance: error: {exc}\n")
        return EXIT_USAGE
    except KeyboardInterrupt:
        err.write("takoform-conformance: interrupted\n")
        return 130
    code = EXIT_OK if report.ok else EXIT_FAILED
    if args.json:
        doc = {
            "host": report.host,
            "space": report.space,
            "summary": _counts(report.results),
            "exitCode": code,
            "allowSkips": report.allow_skips,
            "unproven": report.unproven,
            "checks": [r.to_json() for r in report.results],
            "cleanupProblems": report.cleanup_problems,
        }
        out.write(json.dumps(doc, indent=2, ensure_ascii=False) + "\n")
    else:
        _table(report, out)
    return code


if __name__ == "__main__":
    sys.exit(main())
