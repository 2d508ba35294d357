"""Sharding by label selector: two operator processes with disjoint selectors on one namespace
never act on the same CR. To tell the processes apart from the outside, each shard talks to a
host of its own: a CR touched by the wrong shard, even by a single read, would show up in the
other host's access log."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import Operator, cr_status, is_ready, operator_process, serving
from processes import free_port
from tenancy import granted

pytestmark = [pytest.mark.kube, pytest.mark.host, pytest.mark.usefixtures("kube_crds")]

SHARDS = {"a": "shard=a", "b": "shard in (b)"}
NAMES = {"a": ["alpha-1", "alpha-2", "alpha-3"], "b": ["beta-1", "beta-2", "beta-3"]}
UNLABELLED = "nobody"


def _touched(host: Any) -> set[str]:
    """Every resource name the host was asked about (any verb), from its access log."""
    log = Path(host.log_path).read_text(errors="replace")
    return set(re.findall(r"/resources/([a-z0-9-]+)", log))


def test_two_shards_never_act_on_the_same_cr(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    host_factory: Any,
    tmp_path: Path,
) -> None:
    hosts = {
        shard: host_factory(extra_args=["--access-log"], spaces=["team-a"]) for shard in SHARDS
    }
    for shard, names in NAMES.items():
        for name in names:
            kube_cluster.apply(bucket(name, labels={"shard": shard}), namespace=kube_namespace)
    kube_cluster.apply(bucket(UNLABELLED), namespace=kube_namespace)

    ports = {shard: free_port() for shard in SHARDS}
    with (
        # The implicit host `default` is each process's own TAKOFORM_HOST_URL.
        granted(kube_cluster, kube_namespace, ["team-a"]),
        operator_process(
            kube_cluster.kubeconfig, hosts["a"], kube_namespace, tmp_path / "a.log",
            METRICS_PORT=str(ports["a"]), POLL_READY_SECONDS="1", SHARD_SELECTOR=SHARDS["a"],
        ) as process_a,
        operator_process(
            kube_cluster.kubeconfig, hosts["b"], kube_namespace, tmp_path / "b.log",
            METRICS_PORT=str(ports["b"]), POLL_READY_SECONDS="1", SHARD_SELECTOR=SHARDS["b"],
        ) as process_b,
    ):  # fmt: skip
        operators = {
            "a": Operator(process_a, tmp_path / "a.log", f"http://127.0.0.1:{ports['a']}/metrics"),
            "b": Operator(process_b, tmp_path / "b.log", f"http://127.0.0.1:{ports['b']}/metrics"),
        }
        try:
            for operator in operators.values():
                wait_until(lambda op=operator: serving(op), "a shard's metrics", timeout=30)
            for names in NAMES.values():
                for name in names:
                    wait_until(
                        lambda n=name: is_ready(kube_cluster, kube_namespace, n),
                        f"Bucket {name} Ready",
                        timeout=60,
                    )
            # Several ready polls of every CR of each shard (1 s each), so a shard that also
            # acted on the other's CRs or on the unlabelled one has had every chance to.
            for shard, operator in operators.items():
                wanted = 4 * len(NAMES[shard])
                wait_until(
                    lambda op=operator, w=wanted: op.reconciles() >= w,
                    f"shard {shard}: {wanted} reconciles",
                    timeout=60,
                )
        except BaseException:
            for shard, operator in operators.items():
                print(f"--- shard {shard}:\n{operator.log_tail()}")
            raise

    for shard, host in hosts.items():
        touched = _touched(host)
        assert touched == set(NAMES[shard]), f"host of shard {shard} was asked about {touched}"
        for name in NAMES[shard]:
            status = cr_status(kube_cluster, kube_namespace, name)
            with host.api() as api:
                listing = api.get(
                    "/v1alpha3/operations", params={"space": "team-a", "name": name}
                ).json()
            creates = [op for op in listing["items"] if op["verb"] == "create"]
            assert len(creates) == 1, (name, listing)
            assert creates[0]["resourceUid"] == status["uid"]
    assert cr_status(kube_cluster, kube_namespace, UNLABELLED) == {}, "no shard reconciled it"
