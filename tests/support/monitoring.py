"""The monitoring stack the chart's alerts run on, as real processes on loopback.

- ``cached_tool(name)``: a binary hack/tools.sh built; ``kube_state_metrics_binary()``, the
  kube-state-metrics it built from its Go module.
- ``ksm_grant(kube, namespace, docs)``: the chart's read-only ClusterRole for kube-state-metrics
  (and its binding to a ServiceAccount ``ksm`` of `namespace`) applied; returns a kubeconfig
  holding only that ServiceAccount's token, so the chart's RBAC is what is proven enough.
- ``running_kube_state_metrics(...)``: kube-state-metrics with the chart's
  CustomResourceStateMetrics only; stopped by its pid.
- ``running_prometheus(...)``: a Prometheus with a config dict promtool passes; its HTTP API for
  alerts and queries; stopped by its pid.
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_kube import KubeCluster, localcluster, wait_until
from processes import free_port
from runners import run

KSM_SA = "ksm"


def cached_tool(name: str) -> Path:
    """A binary of the tools cache hack/tools.sh fills (`name`: its field of
    localcluster.Tools); the test fails when it is not there."""
    try:
        binary = getattr(localcluster.Tools.locate(), name)
    except localcluster.ClusterError as exc:
        pytest.fail(str(exc), pytrace=False)
    if not binary or not os.access(binary, os.X_OK):
        pytest.fail(f"{binary} missing: run `make tools`", pytrace=False)
    return Path(binary)


def kube_state_metrics_binary() -> Path:
    return cached_tool("kube_state_metrics")


def ksm_grant(kube: KubeCluster, namespace: str, docs: list[dict[str, Any]]) -> Path:
    """The chart's kube-state-metrics ClusterRole and ClusterRoleBinding (rendered with
    alerts.kubeStateMetrics.serviceAccount.name=ksm) applied with that ServiceAccount; a
    kubeconfig with its token."""
    rbac = [
        doc
        for doc in docs
        if doc["kind"] in ("ClusterRole", "ClusterRoleBinding")
        and doc["metadata"]["name"].endswith("-kube-state-metrics")
    ]
    assert sorted(d["kind"] for d in rbac) == ["ClusterRole", "ClusterRoleBinding"], rbac
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": KSM_SA}}
    kube.apply(json.dumps(account), namespace=namespace)
    kube.apply(yaml.safe_dump_all(rbac))
    token = kube.kubectl("create", "token", KSM_SA, namespace=namespace).stdout.strip()
    return kube.token_kubeconfig(token)


def ksm_config(docs: list[dict[str, Any]], path: Path) -> Path:
    """The CustomResourceStateMetrics of the chart's ConfigMap, written to `path`."""
    (config_map,) = [
        d
        for d in docs
        if d["kind"] == "ConfigMap" and d["metadata"]["name"].endswith("-kube-state-metrics")
    ]
    path.write_text(config_map["data"]["custom-resource-state.yaml"])
    return path


@dataclass(frozen=True)
class Process:
    url: str
    pid: int
    log: Path

    def get(self, path: str, **params: str) -> Any:
        """GET url+path?params: parsed JSON, else the text; None when it does not answer."""
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(self.url + path + query, timeout=5) as answer:
                body = answer.read().decode()
        except OSError:
            return None
        try:
            return json.loads(body)
        except ValueError:
            return body


@contextmanager
def _running(command: list[str], url: str, ready: str, log: Path) -> Iterator[Process]:
    with log.open("ab") as sink:
        process = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
    running = Process(url, process.pid, log)
    try:
        wait_until(lambda: running.get(ready) is not None, f"{command[0]} ready", timeout=60)
        yield running
    except BaseException:
        print(f"--- {log} ---\n{log.read_text(errors='replace')[-3000:]}")
        raise
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=15)


@contextmanager
def running_kube_state_metrics(
    binary: Path, kubeconfig: Path, config: Path, workdir: Path, port: int | None = None
) -> Iterator[Process]:
    """kube-state-metrics exporting only the custom resources of `config`, on loopback."""
    port = port or free_port()
    command = [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--custom-resource-state-only",
        f"--custom-resource-state-config-file={config}",
        "--host=127.0.0.1",
        f"--port={port}",
        "--telemetry-host=127.0.0.1",
        f"--telemetry-port={free_port()}",
    ]
    url = f"http://127.0.0.1:{port}"
    with _running(command, url, "/healthz", workdir / "kube-state-metrics.log") as running:
        yield running


@contextmanager
def running_prometheus(binary: Path, workdir: Path, config: dict[str, Any]) -> Iterator[Process]:
    """Prometheus with `config` (which its promtool must pass), its API on a free loopback
    port."""
    workdir.mkdir(exist_ok=True)
    config_file = workdir / "prometheus.yml"
    config_file.write_text(json.dumps(config, indent=1))
    run([binary.with_name("promtool"), "check", "config", config_file])
    port = free_port()
    command = [
        str(binary),
        f"--config.file={config_file}",
        f"--storage.tsdb.path={workdir / 'tsdb'}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    url = f"http://127.0.0.1:{port}"
    with _running(command, url, "/-/ready", workdir / "prometheus.log") as running:
        yield running


def alerts(prometheus: Process, name: str, state: str = "firing") -> list[dict[str, Any]]:
    found = prometheus.get("/api/v1/alerts") or {}
    every = found.get("data", {}).get("alerts", []) if isinstance(found, dict) else []
    return [a for a in every if a["labels"].get("alertname") == name and a["state"] == state]


def samples(metrics_text: str, name: str) -> list[str]:
    """The exposition lines of metric `name` (exactly that name)."""
    return [
        line
        for line in metrics_text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    ]
