"""The operator as users run it: a `takoform-operator run` process, a real kube-apiserver, the
reference host as a real process. CRs go in with kubectl; what comes out is read back from the
API server and the host."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fixtures_helm import render, rule_file
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from monitoring import (
    Process,
    ksm_config,
    ksm_grant,
    kube_state_metrics_binary,
    running_kube_state_metrics,
    running_prometheus,
)
from operator_process import Operator, condition_of, cr_status, is_ready
from processes import free_port
from prometheus_client.parser import text_string_to_metric_families

pytestmark = [pytest.mark.kube, pytest.mark.host]

BUCKET_110 = "1.1.0"


def _host_read(host: Any, name: str, schema_digest: str) -> httpx.Response:
    with host.api() as api:
        return api.get(
            f"/v1alpha3/spaces/team-a/forms/storage.takoform.io/v1/Bucket/resources/{name}",
            params={"definitionVersion": BUCKET_110, "schemaDigest": schema_digest},
        )


def test_operator_creates_updates_blocks_remedies_and_deletes(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    running, host, namespace = operator
    kube_cluster.apply(bucket("logs"), namespace=namespace)

    def ready() -> bool:
        return is_ready(kube_cluster, namespace, "logs")

    wait_until(ready, "Bucket logs Ready", timeout=60)
    status = cr_status(kube_cluster, namespace, "logs")
    assert status["formRef"]["definitionVersion"] == BUCKET_110, "created under the default"
    digest = status["formRef"]["schemaDigest"]
    served = _host_read(host, "logs", digest).json()
    assert served["metadata"]["uid"] == status["uid"]
    assert status.get("pendingOperationId") is None
    columns = kube_cluster.kubectl("get", "takoform", namespace=namespace).stdout
    assert "logs" in columns and "Available" in columns, "kubectl get takoform lists it"

    # A spec change becomes one fenced update under the recorded ref.
    kube_cluster.kubectl(
        "patch", "bucket", "logs", "--type=merge", "-p",
        '{"spec":{"parameters":{"sizeGiB":20}}}', namespace=namespace,
    )  # fmt: skip
    wait_until(
        lambda: _host_read(host, "logs", digest).json()["spec"]["sizeGiB"] == 20,
        "the host spec updated",
    )
    wait_until(lambda: cr_status(kube_cluster, namespace, "logs").get("generation") == "2", "gen 2")

    # Out-of-band delete+recreate: Blocked, with both uids, an Event and the metric.
    original = status["uid"]
    replacement = host.admin(
        "POST",
        "/admin/v1/resources/recreate",
        {
            "space": "team-a",
            "apiVersion": "storage.takoform.io/v1",
            "kind": "Bucket",
            "name": "logs",
        },
    ).json()["metadata"]["uid"]

    def blocked() -> bool:
        condition = condition_of(cr_status(kube_cluster, namespace, "logs"), "Blocked")
        return condition.get("status") == "True"

    wait_until(blocked, "Blocked", timeout=60)
    condition = condition_of(cr_status(kube_cluster, namespace, "logs"), "Blocked")
    assert condition["reason"] == "UidMismatch"
    assert original in condition["message"] and replacement in condition["message"]
    assert cr_status(kube_cluster, namespace, "logs")["uid"] == original, "state kept"
    # The Event is posted in the background once the status write has landed.
    wait_until(
        lambda: any(
            e["reason"] == "UidMismatch" and e["type"] == "Warning"
            for e in kube_cluster.kubectl_json("get", "events", namespace=namespace)["items"]
        ),
        "the UidMismatch Warning Event",
    )
    wait_until(
        lambda: 'takoform_resource_blocked{kind="Bucket",name="logs"' in running.metrics(),
        "the Blocked metric",
    )

    # Remedy: import the new incarnation explicitly.
    kube_cluster.kubectl(
        "annotate", "bucket", "logs", f"takoform.io/accept-uid={replacement}", namespace=namespace
    )
    wait_until(
        lambda: ready() and cr_status(kube_cluster, namespace, "logs").get("uid") == replacement,
        "rebound to the accepted incarnation",
    )
    # The metrics follow the status write that made it Ready, a moment after it lands.
    wait_until(
        lambda: "takoform_resource_blocked{" not in running.metrics(), "the Blocked series gone"
    )
    scraped = running.metrics()
    assert 'takoform_build_info{kopf="' in scraped, "the running build is exported"
    _assert_controller_metrics(scraped)

    # Deletion under the Delete policy removes exactly the bound incarnation.
    kube_cluster.kubectl("delete", "bucket", "logs", "--timeout=60s", namespace=namespace)
    assert _host_read(host, "logs", digest).status_code == 404
    wait_until(
        lambda: _samples(running.metrics()).get(("takoform_resources", READY_BUCKETS)) == 0,
        "the deleted Bucket left the Ready count",
    )


READY_BUCKETS = (("kind", "Bucket"), ("ready", "True"))


def _samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _assert_controller_metrics(text: str) -> None:
    """The queue, the slots, the host requests and the Ready counts, with values that fit what
    the test did: one Bucket, Ready, created then updated on the implicit host."""
    samples = _samples(text)
    workers_max = samples[("takoform_reconcile_workers_max", ())]
    assert workers_max == 16, "the default TAKOFORM_MAX_CONCURRENT_RECONCILES"
    assert 0 <= samples[("takoform_reconcile_workers_active", ())] <= workers_max
    assert samples[("takoform_reconcile_queue_depth", ())] >= 0
    assert samples[("takoform_resources", READY_BUCKETS)] == 1, "the one Bucket, Ready"

    def requests(verb: str, ok: bool) -> float:
        return sum(
            value
            for (name, labels), value in samples.items()
            if name == "takoform_host_requests_total"
            and dict(labels)["host"] == "default"
            and dict(labels)["verb"] == verb
            and dict(labels)["code"].startswith("2") == ok
        )

    for verb in ("create", "update", "read"):
        assert requests(verb, ok=True) >= 1, f"a {verb} answered 2xx"
    assert requests("create", ok=False) == 0, "the create was accepted at once"
    sent = sum(v for (n, _), v in samples.items() if n == "takoform_host_requests_total")
    timed = sum(
        v for (n, _), v in samples.items() if n == "takoform_host_request_duration_seconds_count"
    )
    assert sent == timed > 0, "every request is timed"


def test_a_cr_gone_without_its_finalize_leaves_no_series(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    """`kubectl delete` then a patch removing the finalizers: the operator never finalizes the
    CR, and still no per-CR series (Blocked, Ready count) outlives it."""
    running, host, namespace = operator
    kube_cluster.apply(bucket("gone"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "gone"), "Bucket gone Ready", timeout=60)
    host.admin(
        "POST",
        "/admin/v1/resources/recreate",
        {"space": "team-a", "apiVersion": "storage.takoform.io/v1", "kind": "Bucket",
         "name": "gone"},
    )  # fmt: skip
    blocked = 'takoform_resource_blocked{kind="Bucket",name="gone"'
    wait_until(lambda: blocked in running.metrics(), "the Blocked series", timeout=60)
    kube_cluster.kubectl("delete", "bucket", "gone", "--wait=false", namespace=namespace)
    kube_cluster.kubectl(
        "patch", "bucket", "gone", "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
        namespace=namespace,
    )  # fmt: skip
    wait_until(lambda: blocked not in running.metrics(), "the Blocked series gone", timeout=60)
    counted = {
        sample.labels["ready"]: sample.value
        for family in text_string_to_metric_families(running.metrics())
        if family.name == "takoform_resources"
        for sample in family.samples
        if sample.labels.get("kind") == "Bucket"
    }
    assert sum(counted.values()) == 0, counted


FIELD_MANAGER_LEASE = "takoform-e2e-field-manager"


@pytest.mark.operator_settings(
    POLL_READY_SECONDS="2", LEADER_ELECTION="true", LEASE_NAME=FIELD_MANAGER_LEASE
)
def test_every_write_names_the_operator_as_its_field_manager(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    """`managedFields` (and audit logs) say who wrote what: the finalizer, the status and the
    binding (the operator's own HTTP client) and its Lease (the official client) are written by
    `takoform-operator`, never by the name of a client library."""
    _running, _host, namespace = operator
    kube_cluster.apply(bucket("named"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "named"), "Bucket named Ready", timeout=60)

    def managers(*args: str, namespace: str | None = None) -> dict[str, set[str]]:
        found = kube_cluster.kubectl_json(*args, "--show-managed-fields", namespace=namespace)
        by_manager: dict[str, set[str]] = {}
        for entry in found["metadata"]["managedFields"]:
            fields = by_manager.setdefault(entry["manager"], set())
            fields |= set(entry.get("fieldsV1", {})) | {f"sub:{entry.get('subresource', '')}"}
        return by_manager

    cr = managers("get", "bucket", "named", namespace=namespace)
    assert "f:metadata" in cr["takoform-operator"], cr  # the finalizer
    assert "sub:status" in cr["takoform-operator"], cr
    bindings = kube_cluster.kubectl_json("get", "takoformbindings")["items"]
    ours = [b for b in bindings if (b["spec"].get("claimRef") or {}).get("namespace") == namespace]
    assert len(ours) == 1, bindings
    assert set(managers("get", "takoformbinding", ours[0]["metadata"]["name"])) == {
        "takoform-operator"
    }
    lease = managers("get", "lease", FIELD_MANAGER_LEASE, namespace="default")
    assert set(lease) == {"takoform-operator"}, lease


def test_a_create_settled_by_the_next_look_costs_one_status_write(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    """The write recording a just-accepted operation waits for the next look (its key replays
    it if the process dies meanwhile: docs/crash-safety.md); an operation settled by then is
    never written as pending: the CR's status is written once, Ready, with its uid."""
    _running, host, namespace = operator
    host.set_faults(commitDelayMs=0)
    client = kube_cluster.http()
    assert client is not None
    path = f"/apis/storage.takoform.io/v1/namespaces/{namespace}/buckets"
    version = client.get(path).raise_for_status().json()["metadata"]["resourceVersion"]
    kube_cluster.apply(bucket("quick"), namespace=namespace)
    statuses: list[dict[str, Any]] = []
    params = {
        "watch": "1",
        "resourceVersion": version,
        "fieldSelector": "metadata.name=quick",
        "timeoutSeconds": "60",
    }
    with client.stream("GET", path, params=params, timeout=None) as events:
        for line in events.iter_lines():
            body = json.loads(line)["object"]
            status = body.get("status") or {}
            if status and (not statuses or statuses[-1] != status):
                statuses.append(status)
            if condition_of(status, "Ready").get("status") == "True":
                break
    assert statuses, "the watch ended before Bucket quick was Ready"
    assert condition_of(statuses[-1], "Ready").get("status") == "True", statuses
    assert [s.get("pendingOperationId") for s in statuses] == [None], statuses
    assert statuses[-1]["uid"], statuses


@pytest.fixture
def prometheus(
    operator: tuple[Operator, Any, str],
    helm: Any,
    kube_tools: Any,
    kube_cluster: KubeCluster,
    tmp_path: Path,
) -> Iterator[Process]:
    """A real Prometheus with the chart's alert rules (durations shortened through the chart's
    values) scraping, every second, the operator and a real kube-state-metrics with the chart's
    CustomResourceStateMetrics (the source of the resource alerts: the CRs)."""
    assert kube_tools.prometheus, "prometheus missing: run `make tools`"
    running, _host, namespace = operator
    values = [
        "alerts.blockedFor=2s",
        "alerts.stuckOperationFor=1h",
        "alerts.kubeStateMetrics.serviceAccount.name=ksm",
        f"alerts.kubeStateMetrics.serviceAccount.namespace={namespace}",
    ]
    rules = rule_file(helm, tmp_path, *values)
    docs = render(helm, "metrics.prometheusRule.enabled=true", *values, namespace=namespace)
    kubeconfig = ksm_grant(kube_cluster, namespace, docs)
    config = ksm_config(docs, tmp_path / "custom-resource-state.yaml")
    ksm_port = free_port()
    target = running.metrics_url.removeprefix("http://").removesuffix("/metrics")
    scrape = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [
            {"job_name": "takoform-operator", "static_configs": [{"targets": [target]}]},
            {
                "job_name": "kube-state-metrics",
                "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{ksm_port}"]}],
            },
        ],
    }
    ksm = kube_state_metrics_binary()
    with (
        running_kube_state_metrics(ksm, kubeconfig, config, tmp_path, ksm_port),
        running_prometheus(kube_tools.prometheus, tmp_path / "prom", scrape) as prom,
    ):
        yield prom


def _alerts(prometheus: Process, name: str, namespace: str) -> list[dict[str, Any]]:
    """The alerts `name` of `namespace`: kube-state-metrics reads every namespace, and earlier
    tests leave Blocked CRs in namespaces still terminating."""
    found = prometheus.get("/api/v1/alerts") or {}
    alerts = found.get("data", {}).get("alerts", []) if isinstance(found, dict) else []
    return [
        a
        for a in alerts
        if a["labels"].get("alertname") == name and a["labels"].get("namespace") == namespace
    ]


def test_prometheus_fires_and_resolves_the_blocked_alert(
    operator: tuple[Operator, Any, str], prometheus: Process, kube_cluster: KubeCluster
) -> None:
    _running, host, namespace = operator
    kube_cluster.apply(bucket("watched"), namespace=namespace)
    wait_until(
        lambda: is_ready(kube_cluster, namespace, "watched"),
        "Bucket watched Ready",
        timeout=60,
    )
    assert _alerts(prometheus, "TakoformResourceBlocked", namespace) == []
    target = {"space": "team-a", "apiVersion": "storage.takoform.io/v1", "kind": "Bucket"}
    host.admin("POST", "/admin/v1/resources/recreate", {**target, "name": "watched"})

    def firing() -> bool:
        alerts = _alerts(prometheus, "TakoformResourceBlocked", namespace)
        return any(
            a["state"] == "firing"
            and a["labels"]["name"] == "watched"
            and a["labels"]["reason"] == "UidMismatch"
            and a["labels"]["severity"] == "warning"
            for a in alerts
        )

    wait_until(firing, "TakoformResourceBlocked firing in Prometheus", timeout=60)
    # Remedy 3: delete the host-side replacement; the operator re-creates, the alert resolves.
    host.admin("POST", "/admin/v1/resources/delete", {**target, "name": "watched"})
    wait_until(
        lambda: _alerts(prometheus, "TakoformResourceBlocked", namespace) == [],
        "the alert resolved",
        timeout=120,  # re-create, status, kube-state-metrics' watch, scrape and rule: a chain
    )
    assert condition_of(cr_status(kube_cluster, namespace, "watched"), "Blocked").get("status") in (
        None,
        "False",
    )
