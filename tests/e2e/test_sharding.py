"""Active-active shards (TAKOFORM_SHARDING=hash) with real parts: the real API server, one real
reference host, operator processes. Every CR is reconciled by exactly one replica at a time;
a replica killed hands its CRs over within its lease; a replica joining takes each CR of its
share only after the replica serving it published a view including it; nothing is sent to the
host twice.

Which replica served which CR, and when, comes from each process's own log (one debug line
per CR whose loop starts or stops there, kube.shards); what reached the host comes from the
host's access log."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import re
import signal
import time
from collections import Counter
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from operator_process import Operator, cr_status, is_ready, operator_process, serving
from processes import free_port
from tenancy import granted

pytestmark = [pytest.mark.kube, pytest.mark.host]

CRS = [f"cr-{i:02d}" for i in range(30)]
LEASE_SECONDS = 12.0  # generous: the test machine is shared and often loaded
RING = "takoform-shards"


def _bucket(name: str, size: int = 10) -> str:
    return json.dumps({
        "apiVersion": "storage.takoform.io/v1", "kind": "Bucket", "metadata": {"name": name},
        "spec": {"space": "team-a", "deletionPolicy": "Delete",
                 "parameters": {"region": "eu-west-1", "sizeGiB": size}},
    })  # fmt: skip


@dataclass
class Replica:
    name: str
    operator: Operator
    gone_at: float | None = None
    lines: list[dict[str, Any]] = field(default_factory=list)

    def metric(self, name: str) -> float:
        text = self.operator.metrics()
        return sum(float(m[1]) for m in re.finditer(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M))

    def read_log(self) -> list[dict[str, Any]]:
        found = []
        for raw in self.operator.log.read_text(errors="replace").splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and str(line.get("logger", "")).startswith(
                "takoform_operator"
            ):
                line["t"] = dt.datetime.fromisoformat(line["time"]).timestamp()
                found.append(line)
        self.lines = found
        return found

    def served_now(self) -> set[str]:
        """The CRs whose last line here says this replica serves them."""
        state: dict[str, bool] = {}
        for line in self.read_log():
            if line["message"].startswith(("serving ", "not serving ")):
                state[line["name"]] = line["message"].startswith("serving ")
        return {name for name, on in state.items() if on}

    def published(self) -> list[tuple[float, tuple[str, ...]]]:
        """(when the write that published it was sent, view) of each view published here. The
        line itself comes after the write landed, and on a loaded machine after another replica
        read it: only the send is a bound on when that replica can have seen it."""
        return [
            (_sent(line), tuple(line["message"].split(": ", 1)[1].split(", ")))
            for line in self.read_log()
            if line["message"].startswith("shard view published: ")
        ]

    def intervals(self, end: float) -> dict[str, list[tuple[float, float]]]:
        """CR name -> the times this replica may have acted on it: from its `serving` line to
        the send of the first view it published after its `not serving` line (a view is sent
        only once what it takes away has drained), or to the deletion of its Lease at a clean
        stop, or to its death, or to `end`."""
        lines = self.read_log()
        stop = self.gone_at if self.gone_at is not None else end
        found: dict[str, list[tuple[float, float]]] = {}
        opened: dict[str, float] = {}
        closing: dict[str, float] = {}
        for line in lines:
            message = line["message"]
            if message.startswith("serving "):
                opened[line["name"]] = line["t"]
            elif message.startswith("not serving "):
                closing[line["name"]] = opened.pop(line["name"])
            elif message.startswith("shard view published: "):
                for name, began in closing.items():
                    found.setdefault(name, []).append((began, _sent(line)))
                closing.clear()
            elif message.startswith("shard lease ") and message.endswith(" deleted"):
                # A clean stop deletes the Lease once every reconcile has ended.
                stop = min(stop, line["t"])
        for name, began in [*opened.items(), *closing.items()]:
            found.setdefault(name, []).append((began, stop))
        return found


def _sent(line: dict[str, Any]) -> float:
    """When the Lease write a `shard view published` line reports was sent."""
    return dt.datetime.fromisoformat(line["sent"]).timestamp()


def _mutations(host: Any) -> Counter[str]:
    """Resource name -> mutating requests the host received for it (its access log)."""
    log = Path(host.log_path).read_text(errors="replace")
    return Counter(
        re.findall(r'"(?:PUT|PATCH|POST|DELETE) /v1alpha3/\S*/resources/([a-z0-9-]+)', log)
    )


def test_replicas_share_the_crs_and_hand_them_over_without_acting_twice(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    kube_namespace: str,
    host_factory: Any,
    tmp_path: Path,
) -> None:
    host = host_factory(commit_delay=0.05, extra_args=["--access-log"])
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a").raise_for_status()
    for name in CRS:
        kube_cluster.apply(_bucket(name), namespace=kube_namespace)
    replicas: dict[str, Replica] = {}

    def start(stack: ExitStack, name: str) -> Replica:
        port = free_port()
        log = tmp_path / f"{name}.log"
        process = stack.enter_context(
            operator_process(
                kube_cluster.kubeconfig, host, kube_namespace, log,
                METRICS_PORT=str(port), BIND_ADDRESS="127.0.0.1", SHARDING="hash",
                POD_NAME=name, LEASE_NAMESPACE=kube_namespace, LEASE_NAME=RING,
                LEASE_SECONDS=str(LEASE_SECONDS), LEASE_RENEW_DEADLINE_SECONDS="8",
                LEASE_RETRY_SECONDS="1", POLL_READY_SECONDS="2", LOG_FORMAT="json",
                LOG_LEVEL="DEBUG",
            )
        )  # fmt: skip
        replica = replicas[name] = Replica(
            name, Operator(process, log, f"http://127.0.0.1:{port}/metrics")
        )
        wait_until(lambda: serving(replica.operator), f"{name}'s metrics", timeout=30)
        return replica

    def alive() -> list[Replica]:
        return [r for r in replicas.values() if r.gone_at is None]

    def settled(count: int) -> bool:
        """Every live replica sees `count` members, none sees an unclaimed CR, and their
        shares add up to every CR."""
        live = alive()
        return (
            all(r.metric("takoform_shard_members") == count for r in live)
            and all(r.metric("takoform_shard_unclaimed_crs") == 0 for r in live)
            and sum(r.metric("takoform_shard_serving_crs") for r in live) == len(CRS)
        )

    generations: dict[str, int] = {}
    uids: dict[str, str] = {}

    def edit(name: str, size: int) -> int:
        """A spec change (a new generation) the CR's replica must act on; its generation."""
        kube_cluster.apply(_bucket(name, size=size), namespace=kube_namespace)
        found = kube_cluster.get_object("bucket", name, kube_namespace)
        assert found is not None, f"{name} is gone"
        return int(found["metadata"]["generation"])

    def reconciled(name: str) -> bool:
        status = cr_status(kube_cluster, kube_namespace, name)
        return status.get("observedGeneration") == generations[name] and is_ready(
            kube_cluster, kube_namespace, name
        )

    def taken_over(names: list[str], since: float) -> float:
        """Seconds from `since` until the last of these CRs was served by a live replica."""
        starts = {}
        for replica in alive():
            for line in replica.read_log():
                name = line.get("name")
                if line["message"].startswith("serving ") and name in names and line["t"] > since:
                    starts[name] = min(starts.get(name, line["t"]), line["t"])
        assert sorted(starts) == sorted(names), f"never served again: {set(names) - set(starts)}"
        return max(starts.values()) - since

    with ExitStack() as stack:
        stack.enter_context(granted(kube_cluster, kube_namespace, ["team-a"]))
        try:
            for name in ("shard-a", "shard-b", "shard-c"):
                start(stack, name)
            for name in CRS:
                wait_until(
                    lambda n=name: is_ready(kube_cluster, kube_namespace, n),
                    f"Bucket {name} Ready",
                    timeout=120,
                )
            wait_until(lambda: settled(3), "three members sharing every CR", timeout=60)
            uids.update({n: cr_status(kube_cluster, kube_namespace, n)["uid"] for n in CRS})
            shares = {name: r.served_now() for name, r in replicas.items()}
            print("shares:", {name: len(share) for name, share in shares.items()})
            assert sorted(n for share in shares.values() for n in share) == CRS
            assert all(shares.values()), f"a replica serves nothing: {shares}"
            # Polls run (2 s) on every replica: each CR is looked at again by its owner only.
            counts = {n: r.metric("takoform_reconciles_total") for n, r in replicas.items()}
            wait_until(
                lambda: all(
                    r.metric("takoform_reconciles_total") >= counts[n] + len(shares[n])
                    for n, r in replicas.items()
                ),
                "a poll of every CR",
                timeout=60,
            )

            # SIGKILL the replica with the largest share: no Lease deleted, no drain.
            victim = replicas[max(shares, key=lambda n: len(shares[n]))]
            orphans = sorted(shares[victim.name])
            killed = time.time()
            victim.operator.process.send_signal(signal.SIGKILL)
            victim.operator.process.wait(timeout=10)
            victim.gone_at = time.time()
            generations.update({name: edit(name, 20) for name in orphans})
            for name in orphans:
                wait_until(
                    lambda n=name: reconciled(n),
                    f"Bucket {name} reconciled again after its replica died",
                    timeout=LEASE_SECONDS + 60,
                )
            takeover = taken_over(orphans, killed)
            print(f"the {len(orphans)} CRs of the killed replica had a new replica "
                  f"{takeover:.1f}s after the kill (lease {LEASE_SECONDS:.0f}s)")  # fmt: skip
            # The lease runs out on the others' clocks, then a round or two (1 s each).
            assert takeover <= LEASE_SECONDS + 5
            wait_until(lambda: settled(2), "two members sharing every CR", timeout=30)

            # A new member joins and takes its share: each CR only after the replica that
            # served it published a view naming the joiner (which it does once that CR's
            # reconciles drained). The other survivor's view does not hold it back: a view
            # claims a CR only for its own replica.
            holders = {name: r for r in alive() for name in r.served_now()}
            joiner = start(stack, "shard-d")
            wait_until(lambda: settled(3), "the joiner sharing every CR", timeout=60)
            handed = sorted(joiner.served_now())
            assert handed, "the joiner took no share"
            first: dict[str, float] = {}
            for line in joiner.read_log():
                if line["message"].startswith("serving "):
                    first.setdefault(line["name"], line["t"])
            for name in handed:
                holder = holders[name]
                named = min(t for t, view in holder.published() if joiner.name in view)
                assert first[name] >= named, (name, holder.name, first[name], named)

            # A clean stop (SIGTERM: a rolling update) deletes the joiner's Lease after its
            # reconciles ended: the others take its CRs without waiting for the lease to run out.
            stopped = time.time()
            joiner.operator.process.send_signal(signal.SIGTERM)
            assert joiner.operator.process.wait(timeout=30) == 0
            joiner.gone_at = time.time()
            generations.update({name: edit(name, 30) for name in handed})
            for name in handed:
                wait_until(
                    lambda n=name: reconciled(n), f"Bucket {name} after a clean stop", timeout=60
                )
            handover = taken_over(handed, stopped)
            print(f"the {len(handed)} CRs of the stopped replica had a new replica "
                  f"{handover:.1f}s after SIGTERM")  # fmt: skip
            assert handover < LEASE_SECONDS, "its CRs waited for its Lease to run out"
            # A CR whose finalizer is removed by hand goes without releasing its host resource:
            # its binding becomes Lost, written by the replica that served it, by no other.
            gone = handed[0]
            # Paused first, so that its replica does not start the deletion meanwhile.
            kube_cluster.kubectl("annotate", "bucket", gone, "takoform.io/paused=true",
                                 namespace=kube_namespace)  # fmt: skip
            kube_cluster.kubectl("delete", "bucket", gone, "--wait=false", namespace=kube_namespace)
            kube_cluster.kubectl(
                "patch", "bucket", gone, "--type=merge", "-p", '{"metadata":{"finalizers":null}}',
                namespace=kube_namespace,
            )  # fmt: skip

            def lost() -> list[dict[str, Any]]:
                found = kube_cluster.kubectl("get", "takoformbindings.operator.takoform.io",
                                             "-o", "json")  # fmt: skip
                return [b for b in json.loads(found.stdout)["items"]
                        if b["spec"].get("phase") == "Lost"
                        and (b["spec"].get("lastOwner") or {}).get("name") == gone]  # fmt: skip

            wait_until(lambda: bool(lost()), f"the binding of {gone} Lost", timeout=60)
            noted = [
                r.name
                for r in alive()
                for line in r.read_log()
                if "without releasing its host resource" in line["message"]
                or "could not be marked Lost" in line["message"]
            ]
            assert len(noted) == 1, noted
        except BaseException:
            for replica in replicas.values():
                print(f"--- {replica.name}:\n{replica.operator.log_tail(40)}")
            raise
        end = time.time()
        intervals = {name: r.intervals(end) for name, r in replicas.items()}

    # Nothing failed on the way: a loop the membership starts reconciles (and posts Events)
    # like one a watch event starts.
    for name, replica in replicas.items():
        errors = [line["message"] for line in replica.read_log() if line["level"] == "ERROR"]
        assert not errors, f"{name}: {errors}"
    # No CR was ever served by two replicas at once.
    for name in CRS:
        spans = sorted(
            (began, ended, replica)
            for replica, found in intervals.items()
            for began, ended in found.get(name, [])
        )
        latest, holder = float("-inf"), ""
        for began, ended, replica in spans:
            assert began >= latest, f"{name}: {holder} and {replica} overlap: {spans}"
            latest, holder = max((latest, holder), (ended, replica))
    # Exactly one create per CR, with the CR's uid, and one update per edit: nothing twice.
    with host.api() as api:
        for name in CRS:
            listing = api.get(
                "/v1alpha3/operations", params={"space": "team-a", "name": name}
            ).json()
            creates = [op for op in listing["items"] if op["verb"] == "create"]
            assert len(creates) == 1, (name, listing)
            assert creates[0]["resourceUid"] == uids[name]
    mutations = _mutations(host)
    expected = {name: 1 + (name in orphans) + (name in handed) for name in CRS}
    assert dict(mutations) == expected, mutations


def test_a_member_that_cannot_renew_stops_before_another_takes_its_crs(
    kube_cluster: KubeCluster, kube_namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two memberships (kube.shards) in one process on the real API server, each with real
    reconcile loops. They split 20 CRs without ever both serving one; then one of them loses the
    API server (its client points at a closed port): it stops acting on everything at its renew
    deadline and raises LostLease, and the other takes its CRs only after that, once its Lease
    ran out, and deletes the expired Lease later."""
    from waiting import await_for

    from takoform_operator.core.shard_round import Verdict
    from takoform_operator.kube.api import ApiConnection, KubeApi
    from takoform_operator.kube.client_config import load_connection
    from takoform_operator.kube.leader import LeaseTiming, LostLease
    from takoform_operator.kube.loops import ReconcileLoops
    from takoform_operator.kube.shard_leases import ShardConfig, ShardLeases, lease_name
    from takoform_operator.kube.shards import BySelector, ShardMembership

    bodies = {
        f"uid-{i}": {
            "metadata": {"namespace": kube_namespace, "name": f"cr-{i}", "uid": f"uid-{i}",
                         "resourceVersion": "1"},
        }
        for i in range(20)
    }  # fmt: skip
    monkeypatch.setenv("KUBECONFIG", str(kube_cluster.kubeconfig))
    connection = load_connection()
    violations: list[str] = []
    members: dict[str, ShardMembership] = {}

    def check(_: ShardMembership) -> None:
        a, b = members.get("m1"), members.get("m2")
        if a is None or b is None:
            return
        if a.member.serving & b.member.serving:
            violations.append(f"both serve {sorted(a.member.serving & b.member.serving)}")
        if b.lost and b.member.serving:
            violations.append("m2 serves after it lost its Lease")

    async def run(body: Any) -> float:
        return 60.0

    def member(identity: str) -> ShardMembership:
        found = members[identity] = ShardMembership(
            ShardLeases(ShardConfig(
                namespace=kube_namespace, ring="ring", identity=identity,
                timing=LeaseTiming(lease_seconds=6, renew_deadline_seconds=3, retry_seconds=0.5),
            ), KubeApi(lambda: connection)),
            observe=check,
        )  # fmt: skip
        loops = ReconcileLoops(run, concurrency=4, watched_annotations=(), finalizer="f")
        found.attach(BySelector(), loops, lambda body: None)
        for uid, body in bodies.items():
            assert found.admit(uid, body) is Verdict.STOP, "acts before it published a view"
        return found

    async def scenario() -> float:
        one = member("m1")
        first = asyncio.create_task(one.run())

        async def alone() -> bool:
            return one.member.serving == set(bodies)

        await await_for(alone, "m1 serving every CR", timeout=30)
        two = member("m2")
        second = asyncio.create_task(two.run())

        async def split() -> bool:
            both = one.member.serving | two.member.serving
            return both == set(bodies) and bool(one.member.serving) and bool(two.member.serving)

        await await_for(split, "the CRs split between m1 and m2", timeout=30)
        theirs = set(two.member.serving)
        # m2 loses the API server: nothing listens on port 1.
        reachable = two.leases.api
        two.leases.api = KubeApi(lambda: ApiConnection(server="http://127.0.0.1:1"))
        lost_at = 0.0
        try:
            await second
        except LostLease:
            lost_at = time.monotonic()
        assert two.lost and not two.member.serving

        async def taken() -> bool:
            return one.member.serving == set(bodies)

        await await_for(taken, "m1 serving m2's CRs", timeout=30)
        took = time.monotonic() - lost_at
        assert theirs <= one.member.serving

        async def deleted() -> bool:
            return (
                kube_cluster.get_object("lease", lease_name("ring", "m2"), kube_namespace) is None
            )

        await await_for(deleted, "m2's expired Lease deleted", timeout=30)
        first.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await first
        await one.loops.close()  # type: ignore[union-attr]
        await two.loops.close()  # type: ignore[union-attr]
        for api in (one.leases.api, two.leases.api, reachable):
            await api.close()
        return took

    took = asyncio.run(scenario())
    print(f"m1 took m2's CRs {took:.1f}s after m2 stopped acting (lease 6s, deadline 3s)")
    assert not violations, violations
    # m2 stopped at its deadline (3 s after its last write); m1 waited for the lease (6 s
    # after its last sight of a renewal): at least the difference lies between them.
    assert took >= 2.0, took
