"""`takoform-host`: run the reference host.

    takoform-host serve --db PATH --listen 127.0.0.1:PORT [--token-file F] [--admin-token-file F]
                        [--package FILE ...] [--commit-delay S] [--retention S]
                        [--misbehave NAME ...] [--max-body BYTES] [--space NAME ...]
                        [--tls-cert F --tls-key F [--tls-client-ca F]]

Tokens also come from the environment: TAKOFORM_HOST_TOKENS (comma separated) and
TAKOFORM_HOST_ADMIN_TOKEN. See docs/reference-host.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import sqlite3
import ssl
import sys
from pathlib import Path
from typing import Any

from takoform_spec.errors import TakoformError

from .misbehaviours import MISBEHAVIOURS, Faults, UnknownMisbehaviour, check_misbehaviours

DESCRIPTION = "The Takoform reference host: the v1alpha3 host API of docs/host-api.md."


def _misbehaviour_help() -> str:
    lines = ["misbehaviour switches (--misbehave NAME, or PUT /admin/v1/misbehaviours):"]
    lines += [f"  {name:34} breaks {rule}: {what}" for name, (rule, what) in MISBEHAVIOURS.items()]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="takoform-host", description=DESCRIPTION)
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="serve the host API",
        description=DESCRIPTION,
        epilog=_misbehaviour_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    serve.add_argument("--db", required=True, type=Path, help="SQLite database file (created)")
    serve.add_argument(
        "--listen", default="127.0.0.1:8787", help="HOST:PORT to listen on (default %(default)s)"
    )
    serve.add_argument(
        "--token-file",
        type=Path,
        help="file with the accepted bearer tokens, one per line (also: TAKOFORM_HOST_TOKENS)",
    )
    serve.add_argument(
        "--admin-token-file",
        type=Path,
        help="file with the admin API token (also: TAKOFORM_HOST_ADMIN_TOKEN); "
        "without one the admin API refuses every request",
    )
    serve.add_argument(
        "--package",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="install an extra definition file (a second package of an installed FormRef, or a "
        "new definition); repeatable",
    )
    serve.add_argument(
        "--commit-delay",
        type=float,
        default=0.2,
        metavar="SECONDS",
        help="how long an accepted mutation runs before it commits (default %(default)s)",
    )
    serve.add_argument(
        "--retention",
        type=float,
        default=3600.0,
        metavar="SECONDS",
        help="how long a settled operation record stays addressable (default %(default)s)",
    )
    serve.add_argument(
        "--misbehave",
        action="append",
        default=[],
        metavar="NAME",
        help="switch a misbehaviour on at start-up (repeatable; see below)",
    )
    serve.add_argument(
        "--max-body",
        type=int,
        default=1048576,
        metavar="BYTES",
        help="largest accepted request body (default %(default)s)",
    )
    serve.add_argument(
        "--space",
        action="append",
        default=[],
        metavar="NAME",
        help="create this space at start-up if missing (repeatable)",
    )
    serve.add_argument(
        "--tls-cert", type=Path, metavar="FILE", help="serve HTTPS with this certificate (PEM)"
    )
    serve.add_argument("--tls-key", type=Path, metavar="FILE", help="the certificate's key (PEM)")
    serve.add_argument(
        "--tls-client-ca",
        type=Path,
        metavar="FILE",
        help="require a client certificate signed by a CA of this bundle (PEM; needs --tls-cert)",
    )
    serve.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    serve.add_argument("--access-log", action="store_true", help="log every request")
    return parser


def _read_tokens(path: Path | None, env: str, *, split: bool) -> list[str]:
    tokens: list[str] = []
    if path is not None:
        for line in path.read_text(encoding="utf-8").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                tokens.append(line)
    value = os.environ.get(env, "")
    parts = value.split(",") if split else [value]
    tokens += [part.strip() for part in parts if part.strip()]
    return tokens


def fail(message: str) -> int:
    print(f"takoform-host: error: {message}", file=sys.stderr)
    return 2


def _tls_options(args: argparse.Namespace) -> dict[str, Any]:
    """uvicorn's TLS settings from the flags; ValueError names what is wrong."""
    if args.tls_cert is None and args.tls_key is None:
        if args.tls_client_ca is not None:
            raise ValueError("--tls-client-ca needs --tls-cert and --tls-key")
        return {}
    if args.tls_cert is None or args.tls_key is None:
        raise ValueError("--tls-cert and --tls-key go together")
    files = [args.tls_cert, args.tls_key] + ([args.tls_client_ca] if args.tls_client_ca else [])
    for path in files:
        if not path.is_file():
            raise ValueError(f"{path}: no such file")
    # Load once here so a bad certificate or key is one clear line, not uvicorn's traceback.
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(args.tls_cert, args.tls_key)
        if args.tls_client_ca is not None:
            context.load_verify_locations(args.tls_client_ca)
    except ssl.SSLError as exc:
        raise ValueError(f"cannot load the TLS files: {exc}") from None
    options: dict[str, Any] = {"ssl_certfile": args.tls_cert, "ssl_keyfile": args.tls_key}
    if args.tls_client_ca is not None:
        options |= {"ssl_ca_certs": str(args.tls_client_ca), "ssl_cert_reqs": ssl.CERT_REQUIRED}
    return options


def serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import Auth, HostApp
    from .forms import install
    from .misbehaviours import Settings
    from .rules import Host

    try:
        tokens = _read_tokens(args.token_file, "TAKOFORM_HOST_TOKENS", split=True)
        admin_tokens = _read_tokens(args.admin_token_file, "TAKOFORM_HOST_ADMIN_TOKEN", split=False)
    except OSError as exc:
        return fail(f"cannot read a token file: {exc}")
    if not tokens:
        return fail(
            "no bearer token configured: give --token-file FILE or set TAKOFORM_HOST_TOKENS "
            "(comma separated); the host refuses to run without authentication"
        )
    host_part, sep, port_part = args.listen.rpartition(":")
    if not sep or not port_part.isdigit() or not host_part:
        return fail(f"--listen {args.listen!r} is not HOST:PORT")
    if args.commit_delay < 0 or args.retention < 0 or args.max_body < 1:
        return fail("--commit-delay and --retention must be >= 0, --max-body >= 1")
    try:
        misbehaviours = check_misbehaviours(args.misbehave)
    except UnknownMisbehaviour as exc:
        return fail(str(exc))
    for path in args.package:
        if not path.is_file():
            return fail(f"--package {path}: no such file")
    try:
        tls = _tls_options(args)
    except ValueError as exc:
        return fail(str(exc))
    try:
        forms = install(args.package)
    except (TakoformError, OSError) as exc:
        return fail(f"cannot install Form Definitions: {exc}")
    faults = Faults(
        commitDelayMs=round(args.commit_delay * 1000), operationRetentionSeconds=args.retention
    )
    settings = Settings(misbehaviours=set(misbehaviours), faults=faults)
    try:
        args.db.parent.mkdir(parents=True, exist_ok=True)
        host = Host(args.db, forms, settings)
        for space in args.space:
            host.put_space(space)
    except (sqlite3.Error, OSError) as exc:
        return fail(f"cannot open the database {args.db}: {exc}")
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    log = logging.getLogger("takoform_host")
    if not admin_tokens:
        log.warning("no admin token configured: the admin API refuses every request")
    if misbehaviours:
        log.warning("MISBEHAVING on purpose: %s", ", ".join(sorted(misbehaviours)))
    log.info(
        "%d FormRefs installed; database %s; listening on %s (%s)",
        len(forms.all_refs()),
        args.db,
        args.listen,
        ("HTTPS, client certificates required" if args.tls_client_ca else "HTTPS")
        if tls
        else "plain HTTP",
    )
    app = HostApp(host, Auth(tokens, admin_tokens), args.max_body).build()
    config = uvicorn.Config(
        app,
        host=host_part.strip("[]"),
        port=int(port_part),
        log_level=args.log_level,
        access_log=args.access_log,
        # uvicorn's own logging config drops the time; with none, its loggers (the access log
        # included) use the format above: one timestamped line per request.
        log_config=None,
        lifespan="on",
        timeout_graceful_shutdown=5,
        **tls,
    )
    uvicorn.Server(config).run()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "serve":
        return serve(args)
    return 2  # pragma: no cover - argparse enforces a command


if __name__ == "__main__":
    sys.exit(main())
