"""A real `takoform-operator run` process for the tests, and its clean stop."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def operator_process(
    kubeconfig: Path, host: object, namespace: str, log: Path, **settings: str
) -> Iterator[subprocess.Popen[bytes]]:
    """Run the operator for `namespace` against `host` (a fixtures_host.HostProcess); extra
    TAKOFORM_* settings come as keyword arguments (e.g. METRICS_PORT="0")."""
    env = {
        **os.environ,
        "KUBECONFIG": str(kubeconfig),
        "TAKOFORM_HOST_URL": host.url,  # type: ignore[attr-defined]
        "TAKOFORM_HOST_TOKEN": host.token,  # type: ignore[attr-defined]
        **{f"TAKOFORM_{name}": value for name, value in settings.items()},
    }
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "takoform_operator.cli", "run", "--namespace", namespace],
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
