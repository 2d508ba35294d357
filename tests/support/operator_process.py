"""A real `takoform-operator run` process for the tests, and its clean stop."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest


@contextmanager
def operator_process(
    kubeconfig: Path, host: object | None, namespace: str | None, log: Path, **settings: str
) -> Iterator[subprocess.Popen[bytes]]:
    """Run the operator for `namespace` (None: every namespace) against `host` (a
    fixtures_host.HostProcess: the implicit host `default`; None: no host URL or token settings at
    all); extra TAKOFORM_* settings come as keyword arguments (e.g. METRICS_PORT="0")."""
    env = {name: value for name, value in os.environ.items() if not name.startswith("TAKOFORM_")}
    env["KUBECONFIG"] = str(kubeconfig)
    if host is not None:
        env["TAKOFORM_HOST_URL"] = host.url  # type: ignore[attr-defined]
        env["TAKOFORM_HOST_TOKEN"] = host.token  # type: ignore[attr-defined]
        # The local reference host serves plain http: said explicitly, as a user must.
        env["TAKOFORM_HOST_INSECURE"] = str(host.url.startswith("http://")).lower()  # type: ignore[attr-defined]
    # Scraped without a token unless a test asks for the reviews (METRICS_AUTH="kubernetes").
    env["TAKOFORM_METRICS_AUTH"] = "none"
    env.update({f"TAKOFORM_{name}": value for name, value in settings.items()})
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "takoform_operator.cli",
                "run",
                *(["--namespace", namespace] if namespace else []),
            ],
            env=env,
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()


@contextmanager
def policy_operator(
    kubeconfig: Path, ops: str, log: Path, watch: str | None = None, **settings: str
) -> Iterator[subprocess.Popen[bytes]]:
    """The operator for namespace `watch` (None: every namespace) with hosts only from
    TakoformHosts and TakoformSpaceGrants: no implicit host, and so no host URL or token
    settings; the hosts' Secrets are in `ops`. Its log is printed when the block fails."""
    with operator_process(
        kubeconfig,
        None,
        watch,
        log,
        METRICS_PORT="0",
        OPERATOR_NAMESPACE=ops,
        IMPLICIT_HOST="false",
        **settings,
    ) as process:
        try:
            yield process
        except BaseException:
            print(log.read_text(errors="replace")[-6000:])
            raise


@dataclass
class Operator:
    process: subprocess.Popen[bytes]
    log: Path
    metrics_url: str

    def metrics(self) -> str:
        with urllib.request.urlopen(self.metrics_url, timeout=5) as answer:
            return str(answer.read().decode())

    def reconciles(self, result: str | None = None, kind: str | None = None) -> float:
        """Its reconciles so far (takoform_reconciles_total), of one `result` and `kind`, or
        of all."""
        total = 0.0
        for labels, value in re.findall(
            r"^takoform_reconciles_total\{([^}]*)\} (\S+)$", self.metrics(), re.M
        ):
            if (result is None or f'result="{result}"' in labels) and (
                kind is None or f'kind="{kind}"' in labels
            ):
                total += float(value)
        return total

    def log_tail(self, lines: int = 60) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def serving(operator: Operator) -> bool:
    if operator.process.poll() is not None:
        pytest.fail(f"the operator exited:\n{operator.log_tail()}", pytrace=False)
    try:
        operator.metrics()
    except urllib.error.HTTPError as refused:
        return refused.code in (401, 403)  # served, behind the reviews
    except OSError:
        return False
    return True


def cr_status(cluster: Any, namespace: str, name: str, kind: str = "bucket") -> dict[str, Any]:
    found = cluster.get_object(kind, name, namespace)
    return dict((found or {}).get("status") or {})


def condition_of(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions", []) if c["type"] == kind), {})


def is_ready(cluster: Any, namespace: str, name: str, kind: str = "bucket") -> bool:
    ready = condition_of(cr_status(cluster, namespace, name, kind), "Ready")
    return bool(ready.get("status") == "True")
