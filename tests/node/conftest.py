"""Fixtures of the tests that run pods: a local cluster with a node, and the operator image.

- ``operator_image`` (session): the OCI archive `hack/image.sh` (`make image`) builds; built once
  per session (seconds when warm).
- ``node_cluster`` (session): a local control plane with one node (kube-scheduler, containerd,
  kubelet; hostNetwork pods only), the project's CRDs, and the operator image loaded into the
  node. Stopped, and everything the node left behind removed, at the end.
- ``second_node`` (module): the same cluster with a second node, 127.0.0.2 (its own containerd,
  kubelet and cgroup root; the operator image loaded into it too), removed again after the module
  so the other tests see one node.
- ``node_namespace`` (function): a fresh namespace on it.

Tests using them are marked ``@pytest.mark.node``; they need root (CI runs as root).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_kube import (
    KubeCluster,
    KubeTools,
    apply_crds,
    crd_files,
    drop_namespace,
    localcluster,
    wait_until,
)
from node_support import NodeCluster

REPO = Path(__file__).resolve().parents[2]


def _need_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("the node (kubelet, containerd) and buildah need root; CI runs as root")


@pytest.fixture(scope="session")
def operator_image() -> Path:
    _need_root()
    proc = subprocess.run(
        [str(REPO / "hack" / "image.sh")], capture_output=True, text=True, timeout=1800
    )
    assert proc.returncode == 0, f"hack/image.sh failed:\n{proc.stderr[-4000:]}"
    archive = Path(proc.stdout.strip().splitlines()[-1])
    assert archive.is_file(), proc.stdout
    return archive


@pytest.fixture(scope="session")
def node_cluster(
    tmp_path_factory: pytest.TempPathFactory, kube_tools: KubeTools, operator_image: Path
) -> Iterator[NodeCluster]:
    _need_root()
    try:
        local = localcluster.LocalCluster(
            tmp_path_factory.mktemp("node-cluster"), die_with_parent=True, node=True
        )
        local.start()
    except localcluster.ClusterError as exc:
        pytest.fail(f"could not start the local cluster with a node: {exc}", pytrace=False)
    try:
        image = local.load_image(operator_image)
        kube = KubeCluster(
            local.kubeconfig,
            local.server,
            kube_tools.kubectl,
            False,
            tmp_path_factory.mktemp("node-scratch"),
        )
        apply_crds(kube, crd_files())
        yield NodeCluster(kube, local, image)
    finally:
        local.stop()


SECOND_NODE = "127.0.0.2"


@pytest.fixture(scope="module")
def second_node(node_cluster: NodeCluster, operator_image: Path) -> Iterator[NodeCluster]:
    local = node_cluster.local
    try:
        local.add_node(SECOND_NODE)
    except localcluster.ClusterError as exc:
        pytest.fail(f"could not start the second node: {exc}", pytrace=False)
    try:
        assert local.load_image(operator_image, node=SECOND_NODE) == node_cluster.image
        yield node_cluster
    finally:
        local.remove_node(SECOND_NODE)


@pytest.fixture
def node_namespace(node_cluster: NodeCluster) -> Iterator[str]:
    name = f"t-node-{uuid.uuid4().hex[:8]}"
    kube = node_cluster.kube
    kube.create_namespace(name)
    wait_until(
        lambda: kube.get_object("serviceaccount", "default", name) is not None,
        f"the default ServiceAccount in {name}",
    )
    yield name
    drop_namespace(kube, name)
