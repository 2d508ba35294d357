"""The operator acts on what a CR says now, not on kopf's memory of it, and not at the next poll.

The operator here re-observes only every 10 minutes, longer than any wait in these tests, so
whatever converges below converged because the CR itself called for a reconcile.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from admission import refused_status_writes
from fixtures_kube import KubeCluster, wait_until
from operator_process import Operator, condition_of, cr_status, is_ready

pytestmark = [
    pytest.mark.kube,
    pytest.mark.host,
    pytest.mark.operator_settings(POLL_READY_SECONDS="600"),
]

WAIT = 45  # seconds; far below the 600 s poll and kopf's former 60 s back-off


#: A pin this build does not have: the operator sends nothing for a CR that carries it.
UNKNOWN_PIN = {"definitionVersion": "9.9.9", "schemaDigest": "sha256:" + "0" * 64}


def _bucket(
    name: str,
    size: int = 10,
    annotations: dict[str, str] | None = None,
    pin: dict[str, str] | None = None,
) -> str:
    spec: dict[str, Any] = {
        "space": "team-a",
        "parameters": {"region": "eu-west-1", "sizeGiB": size},
    }
    if pin:
        spec["formRef"] = pin
    return json.dumps(
        {
            "apiVersion": "storage.takoform.io/v1",
            "kind": "Bucket",
            "metadata": {"name": name, "annotations": annotations or {}},
            "spec": spec,
        }
    )


@pytest.fixture
def status_writes_refused(kube_cluster: KubeCluster, kube_namespace: str) -> Iterator[str]:
    """Every status write to a Bucket of this namespace is refused until the binding goes."""
    with refused_status_writes(
        kube_cluster,
        kube_namespace,
        group="storage.takoform.io",
        plural="buckets",
        expression="false",
        message="status writes refused",
        probe=json.loads(_bucket("probe", pin=UNKNOWN_PIN)),
        probe_status={"observedGeneration": 1},
    ) as binding:
        yield binding


def test_a_refused_status_write_is_retried_soon(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster, status_writes_refused: str
) -> None:
    running, _host, namespace = operator
    kube_cluster.kubectl("apply", "-f", "-", input=_bucket("refused"), namespace=namespace)
    wait_until(
        lambda: "did not land" in running.log.read_text(errors="replace"),
        "the operator's first status write refused",
        timeout=WAIT,
    )
    assert cr_status(kube_cluster, namespace, "refused") == {}, "nothing landed"
    kube_cluster.kubectl("delete", "validatingadmissionpolicybinding", status_writes_refused)
    wait_until(lambda: is_ready(kube_cluster, namespace, "refused"), "Ready", timeout=WAIT)


def test_a_restored_cr_with_kopf_annotations_and_no_status_is_reconciled_now(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _running, _host, namespace = operator
    spec = {"space": "team-a", "parameters": {"region": "eu-west-1", "sizeGiB": 10}}
    # What kopf (in earlier releases of this operator) left on every CR it had handled.
    annotations = {
        "takoform.io/last-handled-configuration": json.dumps({"spec": spec}),
        "takoform.io/reconcile": json.dumps({"success": True}),
    }
    manifest = _bucket("restored", annotations=annotations)
    kube_cluster.kubectl("apply", "-f", "-", input=manifest, namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "restored"), "Ready", timeout=WAIT)


def test_the_accept_uid_annotation_is_acted_on_at_once(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _running, host, namespace = operator
    kube_cluster.kubectl("apply", "-f", "-", input=_bucket("rebound"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "rebound"), "Ready", timeout=WAIT)
    target = {"space": "team-a", "apiVersion": "storage.takoform.io/v1", "kind": "Bucket"}
    replacement = host.admin(
        "POST", "/admin/v1/resources/recreate", {**target, "name": "rebound"}
    ).json()["metadata"]["uid"]
    # A spec edit makes the operator look (the poll is 10 minutes away): Blocked.
    patch = json.dumps({"spec": {"parameters": {"region": "eu-west-1", "sizeGiB": 11}}})
    kube_cluster.kubectl("patch", "bucket", "rebound", "--type=merge", "-p", patch,
                         namespace=namespace)  # fmt: skip

    def blocked_reason() -> str:
        blocked = condition_of(cr_status(kube_cluster, namespace, "rebound"), "Blocked")
        return str(blocked.get("reason")) if blocked.get("status") == "True" else ""

    wait_until(lambda: blocked_reason() == "UidMismatch", "Blocked UidMismatch", timeout=WAIT)
    kube_cluster.kubectl("annotate", "bucket", "rebound",
                         f"takoform.io/accept-uid={replacement}", namespace=namespace)  # fmt: skip
    wait_until(
        lambda: (
            is_ready(kube_cluster, namespace, "rebound")
            and cr_status(kube_cluster, namespace, "rebound").get("uid") == replacement
        ),
        "rebound to the accepted incarnation and Ready",
        timeout=WAIT,
    )
