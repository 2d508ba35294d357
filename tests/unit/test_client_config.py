"""A kubeconfig the client cannot use ends `takoform-operator run` with one line, exit 2: never
the Kubernetes client's traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from takoform_operator.kube.client_config import KubeConfigUnusable, load_kube_config


@pytest.mark.parametrize("content", [None, "garbage\n", "{}\n"], ids=["missing", "text", "empty"])
def test_an_unusable_kubeconfig_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None
) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(KubeConfigUnusable) as raised:
        load_kube_config()
    message = str(raised.value)
    assert message.startswith(f"cannot use the Kubernetes configuration (KUBECONFIG={path}): ")
    assert message.endswith("or run in a pod with a ServiceAccount") and "\n" not in message


def test_run_with_an_unusable_kubeconfig_exits_2_with_one_line(tmp_path: Path) -> None:
    (tmp_path / "kubeconfig").write_text("garbage\n")
    env = {
        **os.environ,
        "KUBECONFIG": str(tmp_path / "kubeconfig"),
        "TAKOFORM_IMPLICIT_HOST": "false",
        "TAKOFORM_METRICS_PORT": "0",
        "TAKOFORM_HEALTH_PORT": "0",
    }
    done = subprocess.run(
        [sys.executable, "-m", "takoform_operator.cli", "run"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("error: cannot use the Kubernetes configuration")
    )
