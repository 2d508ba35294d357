"""Running the command-line tools of the tests (kubectl, helm, promtool): one way for each.

- ``run(argv)``: text in, text out, a timeout, and (with `check`, the default) a non-zero exit
  raises AssertionError showing the command, its exit code, stderr and stdout.
- ``kubectl(binary, kubeconfig, *args)``: kubectl against one kubeconfig, optionally namespaced.
- ``Helm(binary, home)``: helm with its config, cache and data kept under `home`, never in the
  real $HOME; call it with helm's arguments.

The pytest fixtures around them (``kube_cluster``, ``helm``) are in fixtures_kube and fixtures_helm.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path


def run(
    argv: Sequence[str | Path],
    *,
    input: str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 60,
    check: bool = True,
) -> subprocess.CompletedProcess[str]:
    """Run a tool to completion; with `check`, a non-zero exit fails with its output."""
    args = [str(arg) for arg in argv]
    proc = subprocess.run(
        args,
        input=input,
        capture_output=True,
        text=True,
        env=None if env is None else dict(env),
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        command = " ".join([Path(args[0]).name, *args[1:]])
        raise AssertionError(
            f"{command} exited {proc.returncode}:\n{proc.stderr}{proc.stdout}".rstrip()
        )
    return proc


def kubectl(
    binary: Path,
    kubeconfig: Path,
    *args: str,
    namespace: str | None = None,
    input: str | None = None,
    check: bool = True,
    timeout: float = 60,
) -> subprocess.CompletedProcess[str]:
    """kubectl against `kubeconfig`."""
    argv: list[str | Path] = [binary, f"--kubeconfig={kubeconfig}"]
    if namespace:
        argv.append(f"--namespace={namespace}")
    return run([*argv, *args], input=input, check=check, timeout=timeout)


class Helm:
    """helm, isolated: its config, cache and data live under `home`."""

    def __init__(self, binary: Path, home: Path) -> None:
        self.binary = binary
        self.env = {
            **os.environ,
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_DATA_HOME": str(home / "data"),
        }

    def __call__(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        return run([self.binary, *args], env=self.env, check=check, timeout=timeout)
