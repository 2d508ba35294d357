"""An idle CR costs fewer and fewer host reads; a spec change is still acted on at once.

A `takoform-operator run` process, a real kube-apiserver and the reference host as a real
process with its request log on: the reads are counted, and timed, in the host's log. The
ready poll is 1 s, and each look that changes nothing doubles it up to 16 s
(core.backoff.idle_delay)."""

from __future__ import annotations

import datetime
import re
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import Operator, is_ready

pytestmark = [
    pytest.mark.kube,
    pytest.mark.host,
    pytest.mark.host_args("--access-log"),
    pytest.mark.operator_settings(POLL_READY_SECONDS="1", POLL_IDLE_MAX_SECONDS="16"),
]

#: 2026-12-04 13:06:59,760 INFO uvicorn.access: 127.0.0.1:52462 - "GET /v1alpha3/... HTTP/1.1" 200
_LINE = re.compile(r'^(\S+ \S+) INFO uvicorn\.access: \S+ - "(\w+) (\S+) ', re.M)


def _requests(host: Any, name: str, methods: tuple[str, ...]) -> list[datetime.datetime]:
    """When the host was sent each request of `methods` naming resource `name`."""
    text = Path(host.log_path).read_text(errors="replace")
    return [
        datetime.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f")
        for stamp, method, path in _LINE.findall(text)
        if method in methods and re.search(rf"/resources/{re.escape(name)}(?:\?|$)", path)
    ]


def test_an_idle_cr_is_read_less_and_less_often_and_a_spec_change_acts_at_once(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _running, host, namespace = operator
    kube_cluster.apply(bucket("idle"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "idle"), "Bucket idle Ready", timeout=60)
    ready = len(_requests(host, "idle", ("GET",)))

    # The look that wrote Ready changed something: the next comes 1 s later, then 2, 4 and 8 s
    # apart (each up to a fifth less: jitter). A fixed 1 s poll would read four times in 4 s.
    def reads() -> list[datetime.datetime]:
        return _requests(host, "idle", ("GET",))[ready:]

    wait_until(lambda: len(reads()) >= 4, "four reads after Ready", timeout=60)
    times = reads()[:4]
    gaps = [(later - earlier).total_seconds() for earlier, later in pairwise(times)]
    assert all(later > 1.3 * earlier for earlier, later in pairwise(gaps)), gaps
    assert 5.0 < gaps[-1] <= 17.0, f"the poll grew to 8 s or more: {gaps}"

    # The next poll is 16 s away (at least 12.8 s): the spec change goes out long before it.
    writes = len(_requests(host, "idle", ("PUT",)))  # the create's
    kube_cluster.kubectl(
        "patch", "bucket", "idle", "--type=merge", "-p",
        '{"spec":{"parameters":{"sizeGiB":20}}}', namespace=namespace,
    )  # fmt: skip
    wait_until(
        lambda: len(_requests(host, "idle", ("PUT",))) > writes, "the update sent", timeout=30
    )
    sent = _requests(host, "idle", ("PUT",))[writes]
    assert (sent - times[-1]).total_seconds() < 8.0, "acted on at once, not at the next poll"
    wait_until(lambda: is_ready(kube_cluster, namespace, "idle"), "Ready after the update")
