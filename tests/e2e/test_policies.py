"""Pause and spec.managementPolicy as users run them: a `takoform-operator run` process, a real
kube-apiserver, the reference host as a real process with its request log on. What the operator
sent is counted in the host's request log, never taken from the operator's word.

The pause is wired here (the annotation, the Events, the metric, not one request); its rules, a
paused deletion and an Orphan one among them, are tables in tests/unit/test_policy.py."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import Operator, condition_of, cr_status, is_ready

from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

pytestmark = [
    pytest.mark.kube,
    pytest.mark.host,
    pytest.mark.host_args("--access-log"),
]

REF = load_registry().default_create_ref(FormLine("storage.takoform.io/v1", "Bucket"))
assert REF is not None
EXACT = {"definitionVersion": REF.definition_version, "schemaDigest": REF.schema_digest}
RESOURCES = "/v1alpha3/spaces/team-a/forms/storage.takoform.io/v1/Bucket/resources"
PAUSED = "takoform.io/paused"


class RequestLog:
    """The host's request log, read from a mark on."""

    def __init__(self, host: Any) -> None:
        self._path = Path(host.log_path)
        self._mark = 0

    def mark(self) -> None:
        self._mark = len(self._path.read_text(errors="replace"))

    def requests(self, name: str, methods: str = "GET|PUT|POST|PATCH|DELETE") -> list[str]:
        """Request lines since the mark naming resource `name` (any operation lookup too:
        operations are named by id, so every one counts)."""
        text = self._path.read_text(errors="replace")[self._mark :]
        pattern = rf'"(?:{methods}) (?:[^" ]*/resources/{re.escape(name)}[?/ ]|[^" ]*/operations)'
        return [line for line in text.splitlines() if re.search(pattern, line)]

    def mutations(self, name: str) -> list[str]:
        return self.requests(name, "PUT|POST|PATCH|DELETE")


def host_spec(host: Any, name: str) -> dict[str, Any] | None:
    with host.api() as api:
        answer = api.get(f"{RESOURCES}/{name}", params=EXACT)
    if answer.status_code == 404:
        return None
    answer.raise_for_status()
    return dict(answer.json()["spec"])


def reason_of(cluster: KubeCluster, namespace: str, name: str, kind: str) -> tuple[str, str]:
    condition = condition_of(cr_status(cluster, namespace, name), kind)
    return str(condition.get("status")), str(condition.get("reason"))


def events(cluster: KubeCluster, namespace: str, name: str) -> list[tuple[str, str]]:
    items = cluster.kubectl_json("get", "events", namespace=namespace)["items"]
    return [(e["type"], e["reason"]) for e in items if e["involvedObject"]["name"] == name]


def test_a_pause_stops_every_host_request_and_unpausing_resumes(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    running, host, namespace = operator
    log = RequestLog(host)
    kube_cluster.apply(bucket("quiet"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "quiet"), "Bucket quiet Ready", timeout=60)

    kube_cluster.kubectl("annotate", "bucket", "quiet", f"{PAUSED}=true", namespace=namespace)
    wait_until(
        lambda: reason_of(kube_cluster, namespace, "quiet", "Reconciling") == ("False", "Paused"),
        "Reconciling False Paused",
    )
    assert is_ready(kube_cluster, namespace, "quiet"), "Ready keeps its last known value"
    wait_until(
        lambda: ("Normal", "Paused") in events(kube_cluster, namespace, "quiet"), "Paused Event"
    )
    log.mark()
    paused_before = running.reconciles("paused", kind="Bucket")
    # Forced wakes while paused: a spec change (a new generation) and the ready polls after it.
    kube_cluster.kubectl(
        "patch", "bucket", "quiet", "--type=merge", "-p",
        '{"spec":{"parameters":{"sizeGiB":20}}}', namespace=namespace,
    )  # fmt: skip
    wait_until(
        lambda: (
            condition_of(cr_status(kube_cluster, namespace, "quiet"), "Reconciling").get(
                "observedGeneration"
            )
            == 2
        ),
        "the paused reconcile of generation 2",
    )
    wait_until(
        lambda: running.reconciles("paused", kind="Bucket") >= paused_before + 3,
        "three paused reconciles",
    )
    assert log.requests("quiet") == [], "not one host request while paused, reads included"
    assert cr_status(kube_cluster, namespace, "quiet")["observedGeneration"] == 1, (
        "the status does not claim to reflect a generation nothing was done for"
    )
    assert (host_spec(host, "quiet") or {}).get("sizeGiB") == 10

    # Removing the annotation resumes at once: the spec change goes through.
    kube_cluster.kubectl("annotate", "bucket", "quiet", f"{PAUSED}-", namespace=namespace)
    wait_until(lambda: (host_spec(host, "quiet") or {}).get("sizeGiB") == 20, "the update sent")
    wait_until(
        lambda: (
            is_ready(kube_cluster, namespace, "quiet")
            and cr_status(kube_cluster, namespace, "quiet").get("observedGeneration") == 2
        ),
        "Ready for generation 2",
    )
    assert condition_of(cr_status(kube_cluster, namespace, "quiet"), "Reconciling") == {} or (
        reason_of(kube_cluster, namespace, "quiet", "Reconciling")[1] != "Paused"
    ), "the pause leaves no trace in the conditions once over"
    wait_until(
        lambda: ("Normal", "Resumed") in events(kube_cluster, namespace, "quiet"), "Resumed Event"
    )


def test_observe_reports_drift_without_a_mutation_and_full_then_updates_once(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _running, host, namespace = operator
    log = RequestLog(host)
    with host.api() as api:
        api.put(
            f"{RESOURCES}/legacy",
            params=EXACT,
            json={"spec": {"region": "eu-west-1", "sizeGiB": 25}},
            headers={"If-None-Match": "*", "Idempotency-Key": "outside:legacy"},
        ).raise_for_status()
    wait_until(lambda: host_spec(host, "legacy") is not None, "the host resource created")
    with host.api() as api:
        uid = api.get(f"{RESOURCES}/legacy", params=EXACT).json()["metadata"]["uid"]
    log.mark()

    observe = bucket("legacy", importId="team-a/legacy", managementPolicy="Observe")
    kube_cluster.apply(observe, namespace=namespace)
    wait_until(
        lambda: reason_of(kube_cluster, namespace, "legacy", "Drifted") == ("True", "SpecDrift"),
        "Drifted SpecDrift",
        timeout=60,
    )
    status = cr_status(kube_cluster, namespace, "legacy")
    assert status["uid"] == uid and status["formRef"]["schemaDigest"] == REF.schema_digest
    assert "sizeGiB" in condition_of(status, "Drifted")["message"]
    wait_until(
        lambda: ("Warning", "SpecDrift") in events(kube_cluster, namespace, "legacy"),
        "a SpecDrift Warning",
    )
    # Several ready polls later (each one a read of the exact resource): still not one mutation.
    wait_until(lambda: len(log.requests("legacy", "GET")) >= 4, "four observing reads")
    assert log.mutations("legacy") == [], "Observe sends no mutation"
    assert (host_spec(host, "legacy") or {}).get("sizeGiB") == 25

    # The safe import path: switch to Full, and exactly one update goes out.
    kube_cluster.kubectl(
        "patch", "bucket", "legacy", "--type=merge", "-p",
        '{"spec":{"managementPolicy":"Full"}}', namespace=namespace,
    )  # fmt: skip
    wait_until(lambda: is_ready(kube_cluster, namespace, "legacy"), "Ready under Full")
    assert (host_spec(host, "legacy") or {}).get("sizeGiB") == 10
    reads = len(log.requests("legacy", "GET"))
    wait_until(lambda: len(log.requests("legacy", "GET")) >= reads + 2, "two more reads")
    updates = log.mutations("legacy")
    assert len(updates) == 1 and '"PUT ' in updates[0], updates
    assert reason_of(kube_cluster, namespace, "legacy", "Drifted")[0] == "False"


def test_observe_neither_creates_nor_deletes(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _running, host, namespace = operator
    log = RequestLog(host)
    log.mark()
    kube_cluster.apply(bucket("absent", managementPolicy="Observe"), namespace=namespace)
    wait_until(
        lambda: (
            reason_of(kube_cluster, namespace, "absent", "Degraded")
            == ("True", "ObservedResourceMissing")
        ),
        "Degraded ObservedResourceMissing",
        timeout=60,
    )
    assert not is_ready(kube_cluster, namespace, "absent")
    kube_cluster.kubectl("delete", "bucket", "absent", "--timeout=60s", namespace=namespace)

    kube_cluster.apply(bucket("made"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "made"), "Bucket made Ready", timeout=60)
    kube_cluster.kubectl(
        "patch", "bucket", "made", "--type=merge", "-p",
        '{"spec":{"managementPolicy":"Observe"}}', namespace=namespace,
    )  # fmt: skip
    wait_until(
        lambda: cr_status(kube_cluster, namespace, "made").get("observedGeneration") == 2,
        "the Observe generation reconciled",
    )
    created = log.mutations("made")
    kube_cluster.kubectl("delete", "bucket", "made", "--timeout=60s", namespace=namespace)
    assert log.mutations("absent") == [], "a missing resource is not created"
    assert log.mutations("made") == created, "deleting an Observe CR sends no delete"
    assert host_spec(host, "made") is not None and host_spec(host, "absent") is None
