"""Watch events that arrive late never make the operator act on an older body of its CR.

An API server under load can deliver the watch event of a write after the writer already moved
on. Here every watch stream reaches the operator LAG seconds late (tests/support/lagging_proxy),
while its own writes answer at once. Each Bucket must reach the host exactly once per change
(the host's request log): the operator follows the bodies its writes return, and drops a late
event's older body (kube/freshness.py) instead of reconciling from it, which used to miss the
recorded target and pending operation and send the create a second time.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from lagging_proxy import STASHED
from manifests import bucket
from operator_process import Operator, condition_of, cr_status

LAG = 1.5
RESOURCES = "/v1alpha3/spaces/team-a/forms/storage.takoform.io/v1/Bucket/resources"
NAMES = [f"late-{index}" for index in range(4)]

pytestmark = [
    pytest.mark.kube,
    pytest.mark.host,
    # Operations run longer than the lag: a late body without the pending operation arrives
    # while the resource does not exist yet, when a reconcile from it would create again.
    pytest.mark.host_args("--access-log", "--commit-delay", str(2 * LAG)),
    # Only the CRs' own events wake a reconcile: no poll can mend a wrong step in time.
    pytest.mark.operator_settings(POLL_READY_SECONDS="600"),
    pytest.mark.lagging_watches(LAG),
]


def _puts(host: Any) -> dict[str, int]:
    """PUTs per Bucket in the host's request log: a create (If-None-Match: *) or an update."""
    text = host.log_path.read_text(errors="replace")
    return {
        name: len(re.findall(rf'"PUT {re.escape(RESOURCES)}/{re.escape(name)}[? ]', text))
        for name in NAMES
    }


def _all_ready(cluster: KubeCluster, namespace: str, generation: int) -> bool:
    for name in NAMES:
        ready = condition_of(cr_status(cluster, namespace, name), "Ready")
        if ready.get("status") != "True" or ready.get("observedGeneration") != generation:
            return False
    return True


def test_late_watch_events_never_send_a_change_twice(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster, request: pytest.FixtureRequest
) -> None:
    _running, host, namespace = operator
    for name in NAMES:
        kube_cluster.apply(bucket(name, 10), namespace=namespace)
    wait_until(lambda: _all_ready(kube_cluster, namespace, 1), "every Bucket Ready", timeout=120)
    assert _puts(host) == dict.fromkeys(NAMES, 1), "a create sent twice"

    for name in NAMES:
        kube_cluster.apply(bucket(name, 20), namespace=namespace)
    wait_until(lambda: _all_ready(kube_cluster, namespace, 2), "every Bucket resized", timeout=120)
    assert _puts(host) == dict.fromkeys(NAMES, 2), "an update sent twice"

    proxy = request.node.stash[STASHED]
    assert proxy.watches > 0 and proxy.late_chunks > 0, "the watch streams were not delayed"
