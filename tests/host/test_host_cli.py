"""`takoform-host serve` refuses to start with a clear message (exit 2, no traceback)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.host


def _serve(
    tmp_path: Path, *args: str, tokens: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOFORM_HOST_")}
    if tokens is not None:
        env["TAKOFORM_HOST_TOKENS"] = tokens
    return subprocess.run(
        [sys.executable, "-m", "takoform_host.cli", "serve", "--db", str(tmp_path / "db"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("args", "tokens", "message"),
    [
        ((), None, "no bearer token"),
        (("--token-file", "/nonexistent/tokens"), None, "cannot read a token file"),
        (("--misbehave", "be-evil"), "t", "unknown misbehaviour"),
        (("--package", "/nonexistent.yaml"), "t", "no such file"),
        (("--listen", "nowhere"), "t", "is not HOST:PORT"),
    ],
)
def test_refuses_to_start(
    tmp_path: Path, args: tuple[str, ...], tokens: str | None, message: str
) -> None:
    result = _serve(tmp_path, *args, tokens=tokens)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--tls-cert", "PEM"), "--tls-cert and --tls-key go together"),
        (("--tls-client-ca", "PEM"), "--tls-client-ca needs --tls-cert and --tls-key"),
        (("--tls-cert", "/nonexistent.crt", "--tls-key", "PEM"), "/nonexistent.crt: no such file"),
        (("--tls-cert", "PEM", "--tls-key", "PEM"), "cannot load the TLS files"),
    ],
)
def test_bad_tls_flags_are_refused(tmp_path: Path, flags: tuple[str, ...], message: str) -> None:
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("not a certificate\n", encoding="utf-8")
    args = [str(not_pem) if flag == "PEM" else flag for flag in flags]
    result = _serve(tmp_path, *args, tokens="t")
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_a_broken_package_file_is_refused(tmp_path: Path) -> None:
    package = tmp_path / "broken.yaml"
    package.write_text("apiVersion: x\nkind: [\n", encoding="utf-8")
    result = _serve(tmp_path, "--package", str(package), tokens="t")
    assert result.returncode == 2 and "cannot install" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_lists_every_misbehaviour() -> None:
    from takoform_host.misbehaviours import MISBEHAVIOURS

    result = subprocess.run(
        [sys.executable, "-m", "takoform_host.cli", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0
    for name in MISBEHAVIOURS:
        assert name in result.stdout
