"""`takoform-operator` command line."""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

from takoform_spec.errors import TakoformError


def _repo_root(start: Path) -> Path:
    for candidate in [start, *start.parents]:
        if (candidate / "pyproject.toml").is_file() and (candidate / "operator").is_dir():
            return candidate
    raise SystemExit(
        f"error: {start} is not inside a takoform-operator checkout (no pyproject.toml + operator/)"
    )


def _generate(args: argparse.Namespace) -> int:
    from takoform_operator import generate
    from takoform_operator.generate.argocd import LUA_PATH
    from takoform_spec.catalog import load_catalog

    root = args.root.resolve() if args.root else _repo_root(Path.cwd())

    with_chart = (root / "charts" / "takoform-operator" / "Chart.yaml").is_file()
    lua = root / LUA_PATH
    files = generate.render(
        load_catalog(),
        with_chart=with_chart,
        argocd_lua=lua.read_text(encoding="utf-8") if lua.is_file() else None,
    )
    if args.check:
        changed = generate.differences(root, files, with_chart)
        if changed:
            print("generated files are out of date; run `make generate`:", file=sys.stderr)
            for path in changed:
                print(f"  {path}", file=sys.stderr)
            return 1
        print(f"generated files are up to date ({len(files)} files checked)")
        return 0
    changed = generate.write(root, files, with_chart)
    for path in changed:
        print(f"wrote {path}")
    print(f"{len(files)} generated files, {len(changed)} changed")
    return 0


def _run(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from takoform_operator.kube.selector import parse_selector
    from takoform_operator.main import main as run_operator
    from takoform_operator.settings import Settings, settings_error

    try:
        settings = Settings()
    except ValidationError as exc:
        print(f"error: invalid settings: {settings_error(exc)}", file=sys.stderr)
        return 2
    if args.namespace:
        settings = settings.model_copy(update={"namespace": args.namespace})
    if args.selector:
        settings = settings.model_copy(update={"shard_selector": args.selector})
    try:
        parse_selector(settings.shard_selector)
    except ValueError as exc:
        print(f"error: TAKOFORM_SHARD_SELECTOR / --selector: {exc}", file=sys.stderr)
        return 2
    # Only the implicit host (the host_* settings) needs a token from the settings: TakoformHosts
    # name their own token Secrets.
    if settings.implicit_host:
        try:
            token = settings.host_token_secret or settings.token()
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
            print(
                f"error: TAKOFORM_HOST_TOKEN_FILE: cannot read {settings.host_token_file}: "
                f"{reason or exc}",
                file=sys.stderr,
            )
            return 2
        for name in ("host_ca_bundle", "host_client_cert", "host_client_key"):
            path = getattr(settings, name)
            if path is not None and not path.is_file():
                print(f"error: TAKOFORM_{name.upper()}: no such file: {path}", file=sys.stderr)
                return 2
        if token is None:
            print(
                "error: no host token: set TAKOFORM_HOST_TOKEN_SECRET, TAKOFORM_HOST_TOKEN or "
                "TAKOFORM_HOST_TOKEN_FILE, or "
                "TAKOFORM_IMPLICIT_HOST=false to use TakoformHosts only",
                file=sys.stderr,
            )
            return 2
    return run_operator(settings)


def settings_reference() -> str:
    """Every setting `run` reads, from the settings model itself: its variable, its default
    and what it does (docs/operator.md, "Settings", says more of each)."""
    from pydantic_core import PydanticUndefined

    from takoform_operator.settings import Settings

    lines = ["settings, from TAKOFORM_* environment variables (docs/operator.md, Settings):"]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = (
            "-"
            if default is None or default is PydanticUndefined
            else str(default).lower()
            if isinstance(default, bool)
            else str(default)
        )
        lines.append(f"  TAKOFORM_{name.upper()} (default: {shown})")
        lines += textwrap.wrap(
            field.description or "", width=96, initial_indent="      ", subsequent_indent="      "
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from takoform_operator.version import describe

    parser = argparse.ArgumentParser(prog="takoform-operator", description=__doc__)
    parser.add_argument("--version", action="version", version=describe())
    commands = parser.add_subparsers(dest="command", required=True)
    generate = commands.add_parser(
        "generate", help="write registry data, CRDs and reference docs from the Form catalog"
    )
    generate.add_argument("--check", action="store_true", help="fail if anything would change")
    generate.add_argument("--root", type=Path, help="repository root (default: found from cwd)")
    generate.set_defaults(handler=_generate)
    run = commands.add_parser(
        "run",
        help="run the operator (settings from TAKOFORM_* variables; see docs/operator.md)",
        epilog=settings_reference(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("--namespace", help="watch only this namespace (default: all)")
    run.add_argument(
        "--selector", help="reconcile only the CRs with these labels, e.g. shard=a (default: all)"
    )
    run.set_defaults(handler=_run)
    words = sys.argv[1:] if argv is None else argv
    if words[:1] != ["run"]:
        # The kubectl plugin's commands (kubectl takoform ...), under this command too; not
        # for `run`: they load the official Kubernetes client, about 9 MiB of every replica.
        from takoform_operator.plugin.commands import add_commands

        add_commands(commands)
    args = parser.parse_args(words)
    try:
        return int(args.handler(args))
    except TakoformError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
