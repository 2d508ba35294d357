"""Two replicas of the chart on two real nodes (127.0.0.1 and 127.0.0.2), leader election with
the chart's Lease, the reference host as a process with its request log on. Only the leader
reconciles (each pod's own metrics, scraped at its own address); deleting the leader's pod hands
the Lease to the other within the lease duration; no host resource is created twice (the host's
request log)."""

from __future__ import annotations

import json
import os
import re
import signal
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fixtures_helm import CHART
from fixtures_kube import wait_until
from node_support import NodeCluster, assert_loopback_only
from processes import free_port
from tenancy import granted

pytestmark = [pytest.mark.kube, pytest.mark.host, pytest.mark.node, pytest.mark.slow]

RELEASE = "tko"
DEPLOYMENT = f"{RELEASE}-takoform-operator"
LEASE = DEPLOYMENT  # the chart names the Lease after the release
LEASE_SECONDS = 12
RESOURCES = "/v1alpha3/spaces/team-a/forms/storage.takoform.io/v1/Bucket/resources"


@dataclass
class Release:
    node: NodeCluster
    namespace: str
    host: Any
    metrics_port: int

    def kubectl(self, *args: str, check: bool = True) -> Any:
        return self.node.kube.kubectl(*args, namespace=self.namespace, check=check)

    def pods(self) -> list[dict[str, Any]]:
        found = self.node.kube.list_objects(
            "pods", self.namespace, selector=f"app.kubernetes.io/instance={RELEASE}"
        )
        return [p for p in found if not p["metadata"].get("deletionTimestamp")]

    def holder(self) -> str | None:
        found = self.node.kube.get_object("lease", LEASE, self.namespace)
        return found["spec"].get("holderIdentity") if found else None

    @contextmanager
    def diagnosed(self) -> Iterator[None]:
        """On failure, print the pods' descriptions and logs."""
        try:
            yield
        except BaseException:
            print(self.kubectl("describe", "pods", check=False).stdout[-4000:])
            for pod in self.pods():
                name = pod["metadata"]["name"]
                logs = self.kubectl("logs", name, "--tail=40", check=False).stdout
                print(f"--- {name}:\n{logs}")
            raise

    def metric(self, pod: dict[str, Any], name: str) -> float:
        """A metric summed over its labels, from the pod's own endpoint at its own address."""
        url = f"http://{pod['status']['podIP']}:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=5) as page:
            text = page.read().decode()
        return sum(float(m[1]) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _bucket(name: str) -> str:
    return json.dumps({
        "apiVersion": "storage.takoform.io/v1", "kind": "Bucket", "metadata": {"name": name},
        "spec": {"space": "team-a", "deletionPolicy": "Delete",
                 "parameters": {"region": "eu-west-1", "sizeGiB": 10}},
    })  # fmt: skip


def _status(release: Release, name: str) -> dict[str, Any]:
    found = release.node.kube.get_object("bucket", name, release.namespace) or {}
    return dict(found.get("status") or {})


def _bucket_ready(release: Release, name: str) -> bool:
    conditions = _status(release, name).get("conditions", [])
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _creates(host: Any, name: str) -> list[str]:
    """PUTs of resource `name` in the host's request log: a create (If-None-Match: *) or an
    update; these Buckets never change, so each must have exactly one."""
    text = Path(host.log_path).read_text(errors="replace")
    pattern = rf'"PUT {re.escape(RESOURCES)}/{re.escape(name)}[? ]'
    return [line for line in text.splitlines() if re.search(pattern, line)]


@pytest.fixture
def release(
    helm: Any, second_node: NodeCluster, node_namespace: str, host_factory: Any
) -> Iterator[Release]:
    """The chart with two replicas, one per node (required anti-affinity), leader election,
    health and metrics on each pod's own address (bindAddress left empty: status.podIP)."""
    node, kube, namespace = second_node, second_node.kube, node_namespace
    host = host_factory(commit_delay=0.05, extra_args=("--access-log",))
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a").raise_for_status()
    kube.kubectl(
        "create", "secret", "generic", "takoform-host-token", f"--from-literal=token={host.token}",
        namespace=namespace,
    )  # fmt: skip
    kube.kubectl(
        "annotate", "secret", "takoform-host-token",
        f"takoform.io/host-credential-for=default={host.url}",
        namespace=namespace,
    )  # fmt: skip
    metrics_port, health_port = free_port(), free_port()
    image, _, tag = node.image.rpartition(":")
    with granted(kube, namespace, ["team-a"]):
        t0 = time.monotonic()
        helm(
            "install", RELEASE, str(CHART), f"--kubeconfig={kube.kubeconfig}",
            "--namespace", namespace,
            "--set", f"image.repository={image}", "--set", f"image.tag={tag}",
            "--set", "image.pullPolicy=Never",
            "--set", f"host.url={host.url}", "--set", "host.insecure=true",
            "--set", "hostNetwork=true",
            "--set", f"metrics.port={metrics_port}", "--set", f"health.port={health_port}",
            # Scraped by the test without a token (the reviews: tests/helm/test_chart.py).
            "--set", "metrics.auth.enabled=false",
            "--set", "pollReadySeconds=2",
            "--set", f"watchNamespace={namespace}",
            "--set", "replicaCount=2", "--set", "replicaAntiAffinity=required",
            "--set", "leaderElection.enabled=true",
            "--set", f"leaderElection.leaseSeconds={LEASE_SECONDS}",
            "--set", "leaderElection.renewDeadlineSeconds=8",
            "--set", "leaderElection.retrySeconds=1",
            "--set", "extraEnv[0].name=KUBERNETES_SERVICE_HOST",
            "--set", "extraEnv[0].value=127.0.0.1",
            "--set", "extraEnv[1].name=KUBERNETES_SERVICE_PORT",
            "--set-string", f"extraEnv[1].value={node.api_port}",
            "--wait", "--timeout=150s",
        )  # fmt: skip
        installed = Release(node, namespace, host, metrics_port)
        try:
            # helm's --wait settles for replicas - maxUnavailable (1 with hostNetwork).
            with installed.diagnosed():
                wait_until(
                    lambda: len([p for p in installed.pods() if _ready(p)]) == 2,
                    "both replicas Ready",
                    timeout=120,
                )
            print(f"helm install: both replicas Ready in {time.monotonic() - t0:.1f}s")
            yield installed
            # Finalizers need a running operator: delete the Buckets before uninstalling.
            installed.kubectl("delete", "buckets", "--all", "--timeout=90s")
        finally:
            helm(
                "uninstall", RELEASE, f"--kubeconfig={kube.kubeconfig}", "--namespace",
                namespace, "--wait", "--timeout=60s", check=False,
            )  # fmt: skip


def test_two_replicas_on_two_nodes_only_the_leader_reconciles_and_a_deleted_leader_is_replaced(
    release: Release,
) -> None:
    with release.diagnosed():
        _only_the_leader_reconciles_and_a_deleted_leader_is_replaced(release)


def _only_the_leader_reconciles_and_a_deleted_leader_is_replaced(release: Release) -> None:
    pods = release.pods()
    assert len(pods) == 2 and all(_ready(p) for p in pods)
    # One per node, each listening on its node's address (the pod IP, from the downward API).
    assert {p["spec"]["nodeName"] for p in pods} == {"127.0.0.1", "127.0.0.2"}
    assert all(p["status"]["podIP"] == p["spec"]["nodeName"] for p in pods)

    by_name = {p["metadata"]["name"]: p for p in pods}
    wait_until(lambda: release.holder() in by_name, "a replica holding the Lease", timeout=60)
    leader = by_name[str(release.holder())]
    standby = next(p for p in pods if p is not leader)
    print(f"leader {leader['metadata']['name']} on {leader['spec']['nodeName']}")
    assert release.metric(leader, "takoform_leader") == 1
    assert release.metric(standby, "takoform_leader") == 0

    for name in ("one", "two"):
        release.node.kube.apply(_bucket(name), namespace=release.namespace)
    for name in ("one", "two"):
        wait_until(lambda n=name: _bucket_ready(release, n), f"Bucket {name} Ready", 90)
    uids = {name: _status(release, name)["uid"] for name in ("one", "two")}
    # Polls happen every 2 s: the leader reconciles again and again, the standby not once.
    polled = release.metric(leader, "takoform_reconciles_total") + 4
    wait_until(lambda: release.metric(leader, "takoform_reconciles_total") >= polled, "polls")
    assert release.metric(standby, "takoform_reconciles_total") == 0, "the standby reconciled"

    # The leader's pod is deleted (a drain, a rollout): the other replica takes the Lease over.
    t0 = time.monotonic()
    release.kubectl("delete", "pod", leader["metadata"]["name"], "--wait=false")
    wait_until(
        lambda: release.holder() == standby["metadata"]["name"],
        "the standby holding the Lease",
        timeout=LEASE_SECONDS * 3,
    )
    takeover = time.monotonic() - t0
    print(f"leader pod deleted -> standby holds the Lease after {takeover:.1f}s")
    assert takeover <= LEASE_SECONDS + 3, f"longer than the lease ({LEASE_SECONDS}s) plus retries"
    wait_until(lambda: release.metric(standby, "takoform_leader") == 1, "the standby leading")

    release.node.kube.apply(_bucket("three"), namespace=release.namespace)
    wait_until(lambda: _bucket_ready(release, "three"), "Bucket three Ready", 90)
    assert release.metric(standby, "takoform_reconciles_total") > 0

    # The Deployment's replacement lands on the freed node and stands by, reconciling nothing.
    replaced: list[dict[str, Any]] = []

    def replacement_ready() -> bool:
        replaced[:] = [
            p for p in release.pods() if p["metadata"]["name"] not in by_name and _ready(p)
        ]
        return len(replaced) == 1

    wait_until(replacement_ready, "the replacement pod Ready", timeout=120)
    assert replaced[0]["spec"]["nodeName"] == leader["spec"]["nodeName"]
    assert release.metric(replaced[0], "takoform_leader") == 0
    polled = release.metric(standby, "takoform_reconciles_total") + 3
    wait_until(lambda: release.metric(standby, "takoform_reconciles_total") >= polled, "polls")
    assert release.metric(replaced[0], "takoform_reconciles_total") == 0, "a standby reconciled"
    for name, uid in uids.items():
        assert _status(release, name)["uid"] == uid, f"{name} was recreated"
        assert _bucket_ready(release, name)

    # No duplicate: each Bucket was sent to the host exactly once, across the handover.
    sent = {name: _creates(release.host, name) for name in ("one", "two", "three")}
    assert {name: len(lines) for name, lines in sent.items()} == {"one": 1, "two": 1, "three": 1}, (
        sent
    )
    assert_loopback_only(release.node)


def _container_pid(release: Release, pod: dict[str, Any]) -> int:
    """The host pid of the pod's operator process, from its node's containerd."""
    container_id = pod["status"]["containerStatuses"][0]["containerID"].split("://", 1)[1]
    node = pod["spec"]["nodeName"]
    tasks = release.node.local._ctr("tasks", "ls", check=True, node=node).stdout.splitlines()
    for line in tasks[1:]:
        task, pid, *_ = line.split()
        if task == container_id:
            return int(pid)
    raise AssertionError(f"no task {container_id} on node {node}:\n" + "\n".join(tasks))


def _restarted_and_ready(release: Release, name: str) -> bool:
    found = release.node.kube.get_object("pod", name, release.namespace)
    statuses = found["status"].get("containerStatuses", [])
    return bool(statuses) and statuses[0]["restartCount"] >= 1 and _ready(found)


def test_a_frozen_leader_is_replaced_once_its_lease_runs_out_and_comes_back_standing_by(
    release: Release,
) -> None:
    """The leader stops without releasing anything (SIGSTOP: a hung process, a partitioned
    node): the replica on the other node takes the Lease once it has gone unrenewed for the lease
    duration; the kubelet's liveness probe restarts the frozen one, which then stands by."""
    with release.diagnosed():
        pods = {p["metadata"]["name"]: p for p in release.pods()}
        wait_until(lambda: release.holder() in pods, "a replica holding the Lease", timeout=60)
        leader = pods[str(release.holder())]
        other = next(p for p in pods.values() if p is not leader)
        release.node.kube.apply(_bucket("before"), namespace=release.namespace)
        wait_until(lambda: _bucket_ready(release, "before"), "Bucket before Ready", 90)

        pid = _container_pid(release, leader)
        t0 = time.monotonic()
        os.kill(pid, signal.SIGSTOP)
        try:
            wait_until(
                lambda: release.holder() == other["metadata"]["name"],
                "the other replica holding the Lease",
                timeout=LEASE_SECONDS * 3,
            )
            takeover = time.monotonic() - t0
            print(f"leader frozen -> the other holds the Lease after {takeover:.1f}s")
            # Not before the lease ran out (nothing was released), and not much later.
            assert LEASE_SECONDS - 2 <= takeover <= LEASE_SECONDS + 3
            release.node.kube.apply(_bucket("after"), namespace=release.namespace)
            wait_until(lambda: _bucket_ready(release, "after"), "Bucket after Ready", 90)
            assert release.metric(other, "takoform_leader") == 1
            wait_until(
                lambda: _restarted_and_ready(release, leader["metadata"]["name"]),
                "the kubelet to restart the frozen leader",
                timeout=150,
            )
        finally:
            if _exists(pid):
                os.kill(pid, signal.SIGCONT)
        print(f"frozen leader restarted and Ready again after {time.monotonic() - t0:.1f}s")
        restarted = release.node.kube.kubectl_json(
            "get", "pod", leader["metadata"]["name"], namespace=release.namespace
        )
        assert release.holder() == other["metadata"]["name"], "the Lease stayed where it went"
        assert release.metric(restarted, "takoform_leader") == 0
        assert release.metric(restarted, "takoform_reconciles_total") == 0, "a standby reconciled"
        sent = {name: len(_creates(release.host, name)) for name in ("before", "after")}
        assert sent == {"before": 1, "after": 1}, "a Bucket sent to the host twice"


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True
