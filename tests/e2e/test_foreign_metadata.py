"""What a CR carries that the operator does not read stays on it, on the real API server with
the real operator process and the reference host.

The operator keeps of each CR only what it reads (core.trim): a few metadata fields, the
annotations it acts on, the labels its shard selector reads. Nothing it writes may be computed
from that trimmed form in a way that drops the rest: a Bucket with hundreds of foreign labels
and annotations, and a foreign finalizer, keeps every one of them after the operator made it
Ready, paused and unpaused it, and finalized its deletion.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import Operator, condition_of, cr_status, is_ready

pytestmark = [
    pytest.mark.kube,
    pytest.mark.host,
    # The one label the operator reads: its shard selector's.
    pytest.mark.operator_settings(SHARD_SELECTOR="tier=gold"),
]

FINALIZER = "takoform.io/finalizer"
HOLD = "foreign.example.org/hold"
PAUSED = "takoform.io/paused"
LABELS = {
    "tier": "gold",
    **{f"foreign.example.org/label-{i:03d}": f"v{i:03d}".ljust(63, "x") for i in range(300)},
}
ANNOTATIONS = {f"foreign.example.org/note-{i:02d}": f"n{i:02d}" * 250 for i in range(40)}


def _metadata(cluster: KubeCluster, namespace: str) -> dict[str, Any]:
    found = cluster.kubectl_json("get", "bucket", "bloated", namespace=namespace)
    return dict(found["metadata"])


def _assert_foreign_kept(cluster: KubeCluster, namespace: str, when: str) -> dict[str, Any]:
    metadata = _metadata(cluster, namespace)
    labels, annotations = metadata.get("labels") or {}, metadata.get("annotations") or {}
    assert labels == LABELS, f"{when}: labels changed"
    lost = {k for k, v in ANNOTATIONS.items() if annotations.get(k) != v}
    assert not lost, f"{when}: {len(lost)} foreign annotations lost or changed"
    assert HOLD in (metadata.get("finalizers") or ()), f"{when}: the foreign finalizer lost"
    return metadata


def _reconciling(cluster: KubeCluster, namespace: str) -> tuple[str, str]:
    condition = condition_of(cr_status(cluster, namespace, "bloated"), "Reconciling")
    return str(condition.get("status")), str(condition.get("reason"))


def test_foreign_labels_annotations_and_finalizers_survive_the_operator(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _running, _host, namespace = operator
    manifest = json.loads(bucket("bloated"))
    manifest["metadata"].update(labels=LABELS, annotations=ANNOTATIONS, finalizers=[HOLD])
    kube_cluster.apply(json.dumps(manifest), namespace=namespace)
    wait_until(
        lambda: is_ready(kube_cluster, namespace, "bloated"), "Bucket bloated Ready", timeout=60
    )
    metadata = _assert_foreign_kept(kube_cluster, namespace, "Ready")
    assert FINALIZER in metadata["finalizers"], "the operator's finalizer beside the foreign one"

    kube_cluster.kubectl("annotate", "bucket", "bloated", f"{PAUSED}=true", namespace=namespace)
    wait_until(lambda: _reconciling(kube_cluster, namespace) == ("False", "Paused"), "paused")
    _assert_foreign_kept(kube_cluster, namespace, "paused")
    kube_cluster.kubectl("annotate", "bucket", "bloated", f"{PAUSED}-", namespace=namespace)
    wait_until(lambda: _reconciling(kube_cluster, namespace)[1] != "Paused", "unpaused")
    wait_until(lambda: is_ready(kube_cluster, namespace, "bloated"), "Ready again")
    _assert_foreign_kept(kube_cluster, namespace, "unpaused")

    # The foreign finalizer holds the CR after the operator let go of it.
    kube_cluster.kubectl("delete", "bucket", "bloated", "--wait=false", namespace=namespace)
    wait_until(
        lambda: FINALIZER not in (_metadata(kube_cluster, namespace).get("finalizers") or ()),
        "the operator's finalizer removed",
    )
    metadata = _assert_foreign_kept(kube_cluster, namespace, "finalized")
    assert metadata["finalizers"] == [HOLD] and metadata.get("deletionTimestamp")
    kube_cluster.kubectl(
        "patch", "bucket", "bloated", "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
        namespace=namespace,
    )  # fmt: skip
    wait_until(
        lambda: kube_cluster.get_object("bucket", "bloated", namespace) is None, "the CR gone"
    )
