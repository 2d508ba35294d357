"""The operator reads its kubeconfig itself (kube.client_config): what it finds, one clear line
for what it cannot use (`takoform-operator run` exits 2, never a traceback), and the official
client only for a credential plugin, so that an operator process never loads it otherwise."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from takoform_operator.kube.api import ApiConnection
from takoform_operator.kube.client_config import KubeConfigUnusable, load_connection


@pytest.mark.parametrize("content", [None, "garbage\n", "{}\n"], ids=["missing", "text", "empty"])
def test_an_unusable_kubeconfig_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None
) -> None:
    path = tmp_path / "kubeconfig"
    if content is not None:
        path.write_text(content)
    monkeypatch.setenv("KUBECONFIG", str(path))
    with pytest.raises(KubeConfigUnusable) as raised:
        load_connection()
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


def _kubeconfig(user: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {{server: "https://127.0.0.1:6443", certificate-authority: pki/ca.crt}}
users:
- name: u
  user: {user}
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
"""


def test_a_kubeconfig_is_read_as_kubectl_reads_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Paths relative to the file, certificate data decoded, a token read from its file."""
    (tmp_path / "token").write_text("secret-token\n")
    key = base64.b64encode(b"-----BEGIN PRIVATE KEY-----\n").decode()
    user = f"{{tokenFile: token, client-certificate: /abs/client.crt, client-key-data: {key}}}"
    (tmp_path / "kubeconfig").write_text(_kubeconfig(user))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    assert load_connection() == ApiConnection(
        server="https://127.0.0.1:6443",
        ca_path=str(tmp_path / "pki" / "ca.crt"),
        token="secret-token",
        certificate_path="/abs/client.crt",
        private_key_data=b"-----BEGIN PRIVATE KEY-----\n",
    )


def test_a_credential_plugin_runs_through_the_official_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    plugin = tmp_path / "credential-plugin"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": "from-the-plugin"},
    }
    plugin.write_text(f"#!/bin/sh\necho '{json.dumps(credential)}'\n")
    plugin.chmod(0o755)
    user = (
        f"{{exec: {{apiVersion: client.authentication.k8s.io/v1, command: {plugin}, "
        "interactiveMode: Never}}"
    )
    (tmp_path / "kubeconfig").write_text(_kubeconfig(user))
    (tmp_path / "pki").mkdir()
    (tmp_path / "pki" / "ca.crt").write_text("")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    connection = load_connection()
    assert connection.token == "from-the-plugin"
    assert connection.server == "https://127.0.0.1:6443"


def test_a_pod_without_a_service_account_token_is_one_clear_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", "/nonexistent")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    with pytest.raises(KubeConfigUnusable, match="no kubeconfig and not in a pod"):
        load_connection()


def test_the_operator_process_never_loads_the_official_client(tmp_path: Path) -> None:
    """kopf imports it when it is installed, and the plugin needs it installed: about 9 MiB
    of every replica. `takoform-operator run` as far as the operator's main, which reports."""
    program = (
        "import sys, takoform_operator.cli, takoform_operator.main as operator;"
        "operator.main = lambda settings: print('kubernetes' in sys.modules) or 0;"
        "sys.exit(takoform_operator.cli.main(['run']))"
    )
    env = {**os.environ, "TAKOFORM_HOST_URL": "http://127.0.0.1:1", "TAKOFORM_HOST_TOKEN": "t"}
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, env=env
    )
    assert (done.returncode, done.stdout.strip()) == (0, "False"), done.stderr
