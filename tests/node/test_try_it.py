"""The "try it in any cluster" recipe of docs/deployment.md, minus the kind commands, on the local
cluster with a node: the image `make image` builds (its per-build tag), `helm install` with
`referenceHost.enabled=true` and a grant for the namespace, `kubectl apply -f docs/examples/`, and
every example Ready. What differs from kind is only what this machine lacks (no pod network, no
Service addresses): hostNetwork, the reference host on the node's 127.0.0.1, the API server at
127.0.0.1 (docs/deployment.md says which is which)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_helm import CHART
from fixtures_kube import wait_until
from node_support import NodeCluster, assert_loopback_only
from processes import free_port
from waiting import wait_until as wait_for_event

pytestmark = [pytest.mark.kube, pytest.mark.node, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
RELEASE = "try"
EXAMPLES = REPO / "docs" / "examples"


def _examples() -> list[tuple[str, str]]:
    """(plural.group, name) of every object of docs/examples/."""
    found = []
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for document in yaml.safe_load_all(path.read_text()):
            if document:
                group = document["apiVersion"].split("/", 1)[0]
                found.append((f"{document['kind'].lower()}s.{group}", document["metadata"]["name"]))
    return found


def _ready(node: NodeCluster, namespace: str, resource: str, name: str) -> bool:
    found = node.kube.kubectl("get", resource, name, "-o", "json", namespace=namespace, check=False)
    if found.returncode != 0:
        return False
    conditions = (json.loads(found.stdout).get("status") or {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def test_the_recipe_gives_ready_examples_with_the_in_cluster_reference_host(
    helm: Any, node_cluster: NodeCluster, node_namespace: str, operator_image: Path
) -> None:
    node, namespace = node_cluster, node_namespace
    kube = node.kube
    # `make image` printed the per-build tag and wrote it next to the archive; the node holds
    # the image under that tag (as `kind load image-archive` would).
    tag = operator_image.with_name(operator_image.name.replace(".oci.tar", ".tag")).read_text()
    tag = tag.strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+-[0-9a-f]{12}", tag), tag
    assert node.image == f"docker.io/takoform/takoform-operator:{tag}"

    t0 = time.monotonic()
    out = helm(
        "install", RELEASE, str(CHART), f"--kubeconfig={kube.kubeconfig}", "--namespace", namespace,
        # The recipe:
        "--set", "image.repository=takoform/takoform-operator",
        "--set", f"image.tag={tag}",
        "--set", "referenceHost.enabled=true",
        "--set", f"referenceHost.grantNamespaces={{{namespace}}}",
        # This machine: no pod network, no Service addresses, nothing pulled; free ports.
        "--set", "image.pullPolicy=Never",
        "--set", "hostNetwork=true",
        "--set", f"referenceHost.port={free_port()}",
        "--set", "bindAddress=127.0.0.1",
        "--set", f"metrics.port={free_port()}",
        "--set", f"health.port={free_port()}",
        "--set", "rbac.userRoles.create=false",
        "--set", "extraEnv[0].name=KUBERNETES_SERVICE_HOST",
        "--set", "extraEnv[0].value=127.0.0.1",
        "--set", "extraEnv[1].name=KUBERNETES_SERVICE_PORT",
        "--set-string", f"extraEnv[1].value={node.api_port}",
        "--wait", "--timeout=150s",
        timeout=200,
    ).stdout  # fmt: skip
    print(f"helm install --wait: operator and reference host Ready in {time.monotonic() - t0:.1f}s")
    try:
        assert f"kubectl apply -n {namespace} -f docs/examples/" in out, out
        kube.kubectl("apply", "-f", str(EXAMPLES), namespace=namespace)
        t1 = time.monotonic()
        for resource, name in _examples():
            wait_until(
                lambda r=resource, n=name: _ready(node, namespace, r, n),
                f"{resource}/{name} Ready through the in-cluster reference host",
                timeout=120,
            )
        print(
            f"kubectl apply -f docs/examples/ to every example Ready: {time.monotonic() - t1:.1f}s"
        )
        # The PostgresInstance's sensitive outputs are in its connection Secret.
        secret = kube.kubectl_json("get", "secret", "orders-db", namespace=namespace)
        assert {"password", "username"} <= set(secret["data"])
        # Both pods run the per-build tag.
        pods = kube.kubectl_json(
            "get", "pods", "-l", f"app.kubernetes.io/instance={RELEASE}", namespace=namespace
        )["items"]
        images = sorted(c["image"] for p in pods for c in p["spec"]["containers"])
        assert images == [f"takoform/takoform-operator:{tag}"] * 2, images
        assert_loopback_only(node)
        kube.kubectl("delete", "-f", str(EXAMPLES), "--timeout=90s", namespace=namespace)
    except BaseException:
        print(kube.kubectl("get", "pods", "-o", "wide", namespace=namespace, check=False).stdout)
        for deployment in (
            f"{RELEASE}-takoform-operator",
            f"{RELEASE}-takoform-operator-reference-host",
        ):
            logs = kube.kubectl(
                "logs", f"deploy/{deployment}", "--tail=40", namespace=namespace, check=False
            )
            print(logs.stdout)
        raise
    finally:
        helm(
            "uninstall", RELEASE, f"--kubeconfig={kube.kubeconfig}", "--namespace", namespace,
            "--wait", "--timeout=60s", check=False,
        )  # fmt: skip


def test_kinds_own_import_command_stores_the_archive_under_the_name_the_kubelet_asks_for(
    operator_image: Path,
) -> None:
    """`kind load image-archive` runs `ctr -n k8s.io images import --all-platforms --digests
    --snapshotter=... -` in the node: the same command against a private containerd stores the
    archive of `make image` as docker.io/takoform/takoform-operator:<tag>, the reference a
    kubelet asks for `image: takoform/takoform-operator:<tag>` (not under a name of its own)."""
    tag = operator_image.with_name(operator_image.name.replace(".oci.tar", ".tag")).read_text()
    # A short directory: the socket's path must fit in 108 bytes.
    state = Path(tempfile.mkdtemp(prefix="ctrd-", dir="/tmp"))
    socket = state / "sock"
    (state / "config.toml").write_text(
        f'version = 2\nroot = "{state}/root"\nstate = "{state}/state"\n'
        f'[grpc]\n  address = "{socket}"\n'
        '[plugins."io.containerd.grpc.v1.cri"]\n  disable_tcp_service = true\n'
    )
    log = (state / "log").open("w")
    containerd = subprocess.Popen(
        ["containerd", "--config", str(state / "config.toml"), "--log-level", "error"],
        stdout=log, stderr=log,
    )  # fmt: skip
    try:
        wait_for_event(socket.exists, "the private containerd's socket", timeout=60)
        ctr = ["ctr", "-a", str(socket), "--namespace=k8s.io", "images"]
        with operator_image.open("rb") as archive:
            subprocess.run(
                [*ctr, "import", "--all-platforms", "--digests", "--snapshotter=native", "-"],
                stdin=archive, check=True, capture_output=True, timeout=300,
            )  # fmt: skip
        names = subprocess.run(
            [*ctr, "ls", "-q"], check=True, capture_output=True, text=True, timeout=60
        ).stdout.split()
        assert f"docker.io/takoform/takoform-operator:{tag.strip()}" in names, names
    finally:
        containerd.terminate()
        containerd.wait(timeout=30)
        log.close()
        shutil.rmtree(state, ignore_errors=True)
