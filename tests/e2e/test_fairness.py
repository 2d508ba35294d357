"""A throttling host does not hold the reconcile slots: on the real API server, with two real
reference hosts, one answering every request `429` with `Retry-After: 120`, the CRs of the other
host's namespace still become Ready promptly, and the throttled CRs are looked at again after
the capped back-off (TAKOFORM_BACKOFF_CAP_SECONDS), one request per look, never in a slot."""

from __future__ import annotations

import re
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest
from fixtures_host import HostProcess
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import condition_of, cr_status, is_ready, policy_operator
from tenancy import grant_manifest, host_manifest, token_secret

pytestmark = [pytest.mark.kube, pytest.mark.usefixtures("kube_crds")]

CAP = 3.0  # the back-off cap: a Retry-After of 120 s is honoured for this long
BUSY = 8  # throttled CRs: four times the slots
LABEL = "takoform.io/test"


def requests_by_name(host: HostProcess, names: set[str]) -> dict[str, list[float]]:
    """CR name -> times of the host requests for its resource (a read, or the listing of its
    operations that comes first in the looks of a CR not bound yet), from the host's access
    log."""
    seen: dict[str, list[float]] = defaultdict(list)
    pattern = re.compile(
        r"^(\S+ \S+) INFO uvicorn\.access: "
        r".*(?:/resources/([\w.-]+)[?\s]|/operations\?\S*\bname=([\w.-]+)[&\s])"
    )
    for line in host.log_path.read_text(errors="replace").splitlines():
        match = pattern.match(line)
        name = match and (match[2] or match[3])
        if match and name in names:
            stamp = datetime.strptime(match[1], "%Y-%m-%d %H:%M:%S,%f").timestamp()
            seen[name].append(stamp)
    return seen


def test_a_host_answering_429_retry_after_holds_no_slot_and_its_crs_back_off_capped(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    namespaces: Callable[[str], str],
    policy: Callable[[str], None],
    host_factory: Any,
    tmp_path: Path,
) -> None:
    ops, busy, quiet = kube_namespace, namespaces("busy"), namespaces("quiet")
    throttled = host_factory(extra_args=("--access-log",), spaces=["team-a"])
    healthy = host_factory(spaces=["team-a"])
    run = uuid.uuid4().hex[:8]
    for role, host, namespace in (("throttled", throttled, busy), ("healthy", healthy, quiet)):
        token_secret(kube_cluster, ops, f"{role}-token", host.token, {f"{role}-{run}": host.url})
        policy(host_manifest(f"{role}-{run}", host.url, f"{role}-token"))
        policy(grant_manifest(f"{namespace}-{role}", f"{role}-{run}", ["team-a"], [namespace]))
    throttled.set_faults(throttleRetryAfterSeconds=120)

    log = tmp_path / "operator.log"
    names = {f"busy-{i}" for i in range(BUSY)}
    with policy_operator(
        kube_cluster.kubeconfig,
        ops,
        log,
        SHARD_SELECTOR=f"{LABEL}={run}",  # every namespace, this test's CRs only
        # Two slots, both of which the throttled host may hold: only not sleeping on its
        # Retry-After inside a slot leaves one for the other host.
        MAX_CONCURRENT_RECONCILES="2",
        MAX_RECONCILES_PER_HOST="2",
        BACKOFF_BASE_SECONDS="1",
        BACKOFF_CAP_SECONDS=str(CAP),
    ) as process:
        for name in sorted(names):
            manifest = bucket(name, labels={LABEL: run}, hostRef=f"throttled-{run}")
            kube_cluster.apply(manifest, namespace=busy)
        wait_until(
            lambda: len(requests_by_name(throttled, names)) == BUSY,
            "every throttled CR to have asked the host once",
            timeout=60,
        )
        started = time.monotonic()
        kube_cluster.apply(
            bucket("quiet", labels={LABEL: run}, hostRef=f"healthy-{run}"), namespace=quiet
        )
        wait_until(lambda: is_ready(kube_cluster, quiet, "quiet"), "the quiet CR Ready")
        to_ready = time.monotonic() - started
        print(f"quiet CR Ready {to_ready:.1f} s after it was created")
        # Held slots would keep it waiting for the Retry-After (120 s) at least.
        assert to_ready < 30

        # Each throttled CR is looked at again and again, CAP seconds apart (not 120 s, and
        # not sooner: no retry of the read within a look, which would sit in the slot).
        # Counted from now: at start-up the first listing of hosts, grants and namespaces
        # may wake every CR once, which is not a retry.
        since = time.time()

        def looks() -> dict[str, list[float]]:
            found = requests_by_name(throttled, names)
            return {name: [t for t in times if t >= since] for name, times in found.items()}

        wait_until(
            lambda: all(len(t) >= 3 for t in looks().values()),
            "three more looks at each throttled CR",
            timeout=60,
        )
        gaps = [later - earlier for times in looks().values() for earlier, later in pairwise(times)]
        print(f"gaps between looks at a throttled CR: {min(gaps):.2f}-{max(gaps):.2f} s")
        assert min(gaps) >= CAP - 0.1, gaps
        assert max(gaps) < 120 / 4, gaps
        degraded = condition_of(cr_status(kube_cluster, busy, "busy-0"), "Degraded")
        assert (degraded.get("status"), degraded.get("reason")) == ("True", "HostUnavailable")
        assert "429" in degraded.get("message", ""), degraded

        # The host stops throttling: every throttled CR becomes Ready within a back-off.
        throttled.set_faults(throttleRetryAfterSeconds=0)
        for name in sorted(names):
            wait_until(
                lambda n=name: is_ready(kube_cluster, busy, n),  # type: ignore[misc]
                f"{name} Ready once the host answers",
                timeout=60,
            )
        assert process.poll() is None
        assert "Traceback" not in log.read_text(errors="replace")
