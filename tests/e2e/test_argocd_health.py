"""The GitOps health checks on the real API server. docs/argocd-health.md's install command,
run as written, merges the chart's argocd-cm patch: one key per Form line holding exactly the
chart's script, the keys that were there kept, an older script replaced."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import REPO, KubeCluster

from takoform_operator.generator_argocd import CM_PATCH_PATH, DOC_PATH, LUA_PATH, health_key
from takoform_operator.registry_data import load_registry

pytestmark = pytest.mark.kube

DOC = (REPO / DOC_PATH).read_text(encoding="utf-8")
LUA = (REPO / LUA_PATH).read_text(encoding="utf-8")
KEYS = {health_key(line) for line in load_registry().lines()}


def _block(language: str, after: str) -> str:
    found = re.search(rf"{re.escape(after)}.*?```{language}\n(.*?)```", DOC, re.S)
    assert found, f"no {language} block after {after!r} in {DOC_PATH}"
    return found.group(1)


def _argocd_cm(cluster: KubeCluster, namespace: str) -> None:
    existing = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": namespace},
        "data": {"url": "https://argocd.example.com"},
    }
    cluster.apply(json.dumps(existing))


def _data(cluster: KubeCluster, namespace: str) -> dict[str, Any]:
    data: dict[str, Any] = cluster.kubectl_json(
        "get", "configmap", "argocd-cm", namespace=namespace
    )["data"]
    return data


def test_the_generated_command_installs_every_key(
    kube_cluster: KubeCluster, kube_namespace: str, kube_tools: Any, tmp_path: Path
) -> None:
    _argocd_cm(kube_cluster, kube_namespace)
    command = _block("sh", "## Install").replace(
        "--namespace argocd", f"--namespace {kube_namespace}"
    )
    assert CM_PATCH_PATH in command, "the shipped file, applied in one step"
    env = {
        **os.environ,
        "KUBECONFIG": str(kube_cluster.kubeconfig),
        "PATH": f"{kube_tools.kubectl.parent}{os.pathsep}{os.environ['PATH']}",
    }
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    data = _data(kube_cluster, kube_namespace)
    assert set(data) == KEYS | {"url"}, "one key per Form line, the other keys kept"
    assert all(data[key] == LUA for key in KEYS)


def test_the_patch_replaces_an_older_script(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    _argocd_cm(kube_cluster, kube_namespace)
    stale = {"data": {key: "return {status = 'Healthy'}\n" for key in sorted(KEYS)[:3]}}
    kube_cluster.kubectl(
        "patch", "configmap", "argocd-cm", "--type=merge", f"--patch={json.dumps(stale)}",
        namespace=kube_namespace,
    )  # fmt: skip
    kube_cluster.kubectl(
        "patch", "configmap", "argocd-cm", "--type=merge",
        f"--patch-file={REPO / CM_PATCH_PATH}", namespace=kube_namespace,
    )  # fmt: skip
    data = _data(kube_cluster, kube_namespace)
    assert set(data) == KEYS | {"url"}
    assert all(data[key] == LUA for key in KEYS)
