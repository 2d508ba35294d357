"""The CR writes (kube.status.CrWriter) on a real API server: each answer is the whole CR, and
the look goes on with it, so what the writer returns is what the operator holds meanwhile. A
CR with about 60 KB of foreign metadata comes back cut to what the operator reads (core.trim), as
soon as it is decoded, while the API server keeps every foreign field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster

from takoform_operator.kube.client_config import load_connection
from takoform_operator.kube.handlers import cr_trimmer
from takoform_operator.kube.status import CrWriter
from takoform_operator.registry_data import load_registry
from takoform_operator.settings import Settings

pytestmark = pytest.mark.kube

FINALIZER = "takoform.io/finalizer"
LABELS = {f"foreign.example.org/label-{i:03d}": f"v{i:03d}".ljust(63, "x") for i in range(300)}
ANNOTATIONS = {f"foreign.example.org/note-{i:02d}": f"n{i:02d}" * 1000 for i in range(10)}


def _bloated_bucket(cluster: KubeCluster, namespace: str, path: Path) -> dict[str, Any]:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "storage.takoform.io/v1",
                "kind": "Bucket",
                "metadata": {
                    "name": "bloated",
                    "namespace": namespace,
                    "labels": LABELS,
                    "annotations": ANNOTATIONS,
                },
                "spec": {"space": "team-a", "parameters": {"region": "eu-west-1", "sizeGiB": 10}},
            }
        )
    )
    cluster.kubectl("create", "-f", str(path))
    found = cluster.kubectl_json("get", "bucket", "bloated", namespace=namespace)
    assert isinstance(found, dict)
    return found


async def test_an_answer_is_cut_to_what_the_operator_reads_as_it_is_decoded(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    kube_namespace: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    body = _bloated_bucket(kube_cluster, kube_namespace, tmp_path / "bucket.json")
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig))
    settings = Settings()
    writer = CrWriter(keep=cr_trimmer(load_registry(), settings))
    writer.connect(load_connection())
    metadata = body["metadata"]
    where = ("storage.takoform.io", "v1", "buckets", kube_namespace, "bloated")
    try:
        answer = await writer.set_finalizer(
            where, FINALIZER, True, [], str(metadata["resourceVersion"])
        )
        written = await writer.write(*where, {"observedGeneration": 1})
    finally:
        await writer.close()

    for held in (answer, written):
        assert held["metadata"]["uid"] == metadata["uid"]
        assert held["metadata"]["finalizers"] == [FINALIZER]
        assert held["spec"] == body["spec"]
        assert "labels" not in held["metadata"] and "annotations" not in held["metadata"]
        assert "managedFields" not in held["metadata"]
    assert written["status"] == {"observedGeneration": 1}
    # Nothing the API server holds was dropped by the writes.
    stored = kube_cluster.kubectl_json("get", "bucket", "bloated", namespace=kube_namespace)
    assert stored["metadata"]["labels"] == LABELS
    assert stored["metadata"]["annotations"] == ANNOTATIONS
