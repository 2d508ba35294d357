"""The Secret reader loads the client's core API only when it first reads a Secret."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""

PROGRAM = """
import sys
from takoform_operator.kube.secrets import KubernetesSecretReader
reader = KubernetesSecretReader("takoform-system")
print("kubernetes.client.api.core_v1_api" in sys.modules)
"""


def test_start_up_does_not_import_the_core_api(tmp_path: Path) -> None:
    # A fresh interpreter: another test of this run may have imported it already.
    config = tmp_path / "kubeconfig"
    config.write_text(KUBECONFIG)
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env={**os.environ, "KUBECONFIG": str(config)},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "False"
