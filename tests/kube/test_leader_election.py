"""Leader election with a real coordination.k8s.io Lease on the real API server: two operator
processes (replicas), the reference host as a process. Only the leader reconciles; killing it
hands over within the lease duration; a clean stop hands over at once; nothing is done twice."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import cr_status, is_ready, operator_process
from processes import free_port
from tenancy import granted

pytestmark = [pytest.mark.kube, pytest.mark.host]

LEASE = "takoform-operator"
# Long enough that a clean handover (kopf's own graceful stop, about 5 s, then the release) is
# told apart from waiting for the lease to run out.
LEASE_SECONDS = 12.0


@dataclass
class Replica:
    name: str
    process: subprocess.Popen[bytes]
    log: Path
    metrics_port: int
    health_port: int

    def metric(self, name: str) -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics") as page:
            text = page.read().decode()
        return sum(float(m[1]) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))

    def ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/readyz") as page:
                return bool(json.loads(page.read())["ready"])
        except OSError:
            return False


@pytest.fixture
def replicas(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    kube_namespace: str,
    host_factory: Any,
    tmp_path: Path,
) -> Iterator[tuple[dict[str, Replica], Any, str]]:
    host = host_factory(commit_delay=0.05)
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a")
    started: dict[str, Replica] = {}
    with ExitStack() as stack:
        # Deny by default (docs/tenancy.md): the namespace is granted the space it uses.
        stack.enter_context(granted(kube_cluster, kube_namespace, ["team-a"]))
        for name in ("replica-a", "replica-b"):
            metrics_port, health_port = free_port(), free_port()
            log = tmp_path / f"{name}.log"
            process = stack.enter_context(
                operator_process(
                    kube_cluster.kubeconfig, host, kube_namespace, log,
                    METRICS_PORT=str(metrics_port), HEALTH_PORT=str(health_port),
                    BIND_ADDRESS="127.0.0.1", LEADER_ELECTION="true", POD_NAME=name,
                    LEASE_NAMESPACE=kube_namespace, LEASE_NAME=LEASE,
                    LEASE_SECONDS=str(LEASE_SECONDS), LEASE_RENEW_DEADLINE_SECONDS="8",
                    LEASE_RETRY_SECONDS="1", POLL_READY_SECONDS="2", LOG_FORMAT="json",
                )
            )  # fmt: skip
            started[name] = Replica(name, process, log, metrics_port, health_port)
        try:
            for replica in started.values():
                wait_until(replica.ready, f"{replica.name} ready", timeout=30)
            yield started, host, kube_namespace
        except BaseException:
            for replica in started.values():
                print(f"--- {replica.name}:\n{replica.log.read_text(errors='replace')[-3000:]}")
            raise


def _holder(cluster: KubeCluster, namespace: str) -> str | None:
    found = cluster.get_object("lease", LEASE, namespace)
    return found["spec"].get("holderIdentity") if found else None


def _leader_and_standby(
    cluster: KubeCluster, namespace: str, running: dict[str, Replica]
) -> tuple[Replica, Replica]:
    """Once the Lease names a leader among the replicas: the leader, and the other one."""
    wait_until(lambda: _holder(cluster, namespace) in running, "a leader", timeout=30)
    leader = running[str(_holder(cluster, namespace))]
    return leader, next(r for r in running.values() if r is not leader)


def test_only_the_leader_reconciles_and_a_killed_leader_is_replaced_within_the_lease(
    replicas: tuple[dict[str, Replica], Any, str], kube_cluster: KubeCluster
) -> None:
    running, _host, namespace = replicas
    leader, standby = _leader_and_standby(kube_cluster, namespace, running)
    assert leader.metric("takoform_leader") == 1 and standby.metric("takoform_leader") == 0

    kube_cluster.apply(bucket("one"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "one"), "Bucket one Ready", timeout=120)
    uid = cr_status(kube_cluster, namespace, "one")["uid"]
    # Let polls happen (POLL_READY_SECONDS=2): the leader reconciles again, the standby not at all.
    polled = leader.metric("takoform_reconciles_total") + 2
    wait_until(lambda: leader.metric("takoform_reconciles_total") >= polled, "two more polls")
    assert standby.metric("takoform_reconciles_total") == 0, "the standby reconciled"

    # The leader dies without releasing the Lease (a killed pod, a lost node).
    leader.process.send_signal(signal.SIGKILL)
    leader.process.wait(timeout=10)
    t0 = time.monotonic()
    wait_until(lambda: _holder(kube_cluster, namespace) == standby.name, "takeover", timeout=30)
    takeover = time.monotonic() - t0
    print(f"takeover after the leader was killed: {takeover:.1f}s (lease {LEASE_SECONDS:.0f}s)")
    assert takeover <= LEASE_SECONDS + 3, "longer than the lease plus a retry period or two"
    assert standby.metric("takoform_leader") == 1

    # The new leader reconciles: a new bucket goes Ready, the old one is left as it was.
    kube_cluster.apply(bucket("two"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "two"), "Bucket two Ready", timeout=60)
    assert standby.metric("takoform_reconciles_total") > 0
    assert cr_status(kube_cluster, namespace, "one")["uid"] == uid, "recreated: a duplicate"
    assert is_ready(kube_cluster, namespace, "one")


def test_a_leader_that_stops_cleanly_hands_over_at_once(
    replicas: tuple[dict[str, Replica], Any, str], kube_cluster: KubeCluster
) -> None:
    running, _host, namespace = replicas
    leader, standby = _leader_and_standby(kube_cluster, namespace, running)
    leader.process.send_signal(signal.SIGTERM)  # a rolling update's or a drain's stop
    t0 = time.monotonic()
    wait_until(lambda: _holder(kube_cluster, namespace) == standby.name, "handover", timeout=30)
    handover = time.monotonic() - t0
    print(f"handover after a clean stop: {handover:.1f}s")
    assert leader.process.wait(timeout=15) == 0
    assert handover < LEASE_SECONDS - 3, "the lease was not released"
