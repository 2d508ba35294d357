#!/usr/bin/env python3
"""Benchmark shards: one operator process against two on the same machine, same API server,
same reference host, same N CRs (backlog mode: the CRs exist before the operators start).

- one:   one process watching one namespace with N CRs;
- ns2:   two processes, each watching its own namespace with N/2 CRs (`--namespace`);
- sel2:  two processes on one namespace with N CRs labelled shard=a / shard=b alternately,
         each with its TAKOFORM_SHARD_SELECTOR (each still receives every watch event);
- hashK: K replicas on one namespace with N CRs, TAKOFORM_SHARDING=hash (a Lease each, the CRs
         split by the consistent hash ring of the live replicas), e.g. hash1, hash2, hash4;
- rebalance: three hash replicas; once half the CRs are Ready one replica is SIGKILLed. Prints
         how long its CRs that were not Ready yet waited (from the kill until the first and the
         last of them is Ready: the survivors take them once its Lease ran out), the host
         operations beyond the first for one resource (duplicate mutations: must be 0), and the
         creates replayed under their idempotency key (answered with the original operation).

For each it prints the time until all N are Ready, CRs/s, the speed-up over `one`, the
operators' CPU seconds (summed and each) and each process's peak RSS, and for the hash rows
each replica's CPU and peak RSS against the `one` row's, and the CRs each replica's watch
delivers and keeps against those it serves (its share: the two are equal once settled). The
pieces (control plane, host, operator process, CR manifests, the Ready watcher) are
hack/bench_operator.py's.

`--restart` adds, for `one` and the hash modes, a row of the same processes restarted once
every CR is Ready (SIGTERM, then started again): the steady state, where each hash replica
lists and keeps only its share (before it, in backlog mode, every replica is sent every CR not
labelled yet). It measures from the start until every CR has had a look (the start spread).

`--before REV` runs every mode a second time with the operator of git revision REV (its
`operator/` tree, taken with git archive, first on PYTHONPATH), in the same run: before and
after side by side.

    .venv/bin/python hack/bench_shards.py [--sizes 300,1000] [--modes one,ns2,sel2]
    .venv/bin/python hack/bench_shards.py --sizes 10000 --modes hash1,hash2,hash4,rebalance
    .venv/bin/python hack/bench_shards.py --sizes 3000 --modes one,hash3 --restart --before main

Figures are printed, never asserted. docs/scaling.md has the method and the figures measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
import bench_operator as bench  # noqa: E402


@dataclass
class Result:
    mode: str
    n: int
    processes: int
    seconds: float
    cpu_seconds: float
    rss_mib: list[float]
    #: Each process's CPU seconds.
    cpu_each: list[float] = field(default_factory=list)
    #: "before" / "after" with --before, else "".
    source: str = ""
    #: rebalance only: seconds from the kill to the first and the last of the victim's CRs Ready
    #: (of those not Ready at the kill), operations the host holds beyond the first for one
    #: resource, and creates replayed under their key (the original operation answered again).
    handover: tuple[float, float] | None = None
    duplicates: int | None = None
    replays: int | None = None


def _operator(kube: Any, host: Any, namespace: str, workdir: Path, poll: float,
              settings: dict[str, str]) -> Any:  # fmt: skip
    """bench_operator.OperatorProcess copies the environment when it starts: extra settings go
    in through it (OperatorProcess has no parameter for them)."""
    previous = {name: os.environ.get(name) for name in settings}
    os.environ.update(settings)
    try:
        return bench.OperatorProcess(kube, host, namespace, workdir, poll)
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _hash_settings(ring: str, namespace: str, member: str) -> dict[str, str]:
    return {
        "TAKOFORM_SHARDING": "hash",
        "TAKOFORM_LEASE_NAME": ring,
        "TAKOFORM_LEASE_NAMESPACE": namespace,
        "TAKOFORM_POD_NAME": member,
    }


def duplicate_mutations(host: Any, items: list[dict[str, Any]]) -> tuple[int, int]:
    """Operations the host holds beyond the first for one resource of `items` (every CR of the
    bench is created once and never changed, so any second operation is a duplicate), and the
    creates it answered 202 more often than that (a replayed idempotency key: the host answers
    with the original operation, so it mutates nothing; from the access log)."""
    names = {item["metadata"]["name"] for item in items}
    listing = httpx.get(
        f"{host.url}/v1alpha3/operations",
        params={"space": bench.SPACE},
        headers={"Authorization": f"Bearer {bench.TOKEN}"},
        timeout=120,
    )
    listing.raise_for_status()
    operations = Counter(op["name"] for op in listing.json()["items"] if op["name"] in names)
    accepted = Counter(
        name
        for path in _ACCEPTED.findall(host.log.read_text(errors="replace"))
        if (name := path.rsplit("/", 1)[-1]) in names
    )
    duplicates = sum(count - 1 for count in operations.values() if count > 1)
    replays = sum(max(0, accepted[name] - operations[name]) for name in accepted)
    return duplicates, replays


_ACCEPTED = re.compile(
    r'"(?:POST|PUT|DELETE) /v1alpha3/\S*/resources/([^?\s]+)\S* HTTP/[\d.]+" 202'
)


def measure(kube: Any, host: Any, workdir: Path, mode: str, n: int, args: Any) -> list[Result]:
    stamp = f"{mode}-{n}-{int(time.time())}"
    if mode == "ns2":
        namespaces = [f"shard-{stamp}-a", f"shard-{stamp}-b"]
        batches = {ns: bench.manifests(n // 2 + (i < n % 2), ns) for i, ns in enumerate(namespaces)}
        selectors: list[tuple[str, dict[str, str]]] = [(ns, {}) for ns in namespaces]
    else:
        namespace = f"shard-{stamp}"
        items = bench.manifests(n, namespace)
        if mode == "sel2":
            for i, item in enumerate(items):
                item["metadata"]["labels"] = {"shard": "ab"[i % 2]}
            selectors = [
                (namespace, {"TAKOFORM_SHARD_SELECTOR": "shard=a"}),
                (namespace, {"TAKOFORM_SHARD_SELECTOR": "shard=b"}),
            ]
        elif mode.startswith("hash") or mode == "rebalance":
            replicas = 3 if mode == "rebalance" else int(mode.removeprefix("hash"))
            ring = f"bench-{stamp}"
            members = [f"{ring}-{i}" for i in range(replicas)]
            selectors = [(namespace, _hash_settings(ring, namespace, m)) for m in members]
        else:
            selectors = [(namespace, {})]
        batches = {namespace: items}
    for namespace, items in batches.items():
        bench.create_namespace(kube, namespace)
        asyncio.run(bench.create_all(kube, namespace, items, None, {}))

    def started(life: str) -> list[Any]:
        found = []
        for i, (namespace, settings) in enumerate(selectors):
            logdir = workdir / f"{stamp}-{i}{life}"
            logdir.mkdir()
            found.append(_operator(kube, host, namespace, logdir, args.poll, settings))
        return found

    operators = started("")
    start = time.monotonic()
    try:
        if mode == "rebalance":
            return [_rebalance(kube, host, namespace, items, operators, selectors, start, n, args)]

        async def all_ready() -> None:
            await asyncio.gather(
                *(
                    bench.watch_ready(kube, namespace, len(items), {}, args.timeout)
                    for namespace, items in batches.items()
                )
            )

        asyncio.run(all_ready())
        results = [_result(mode, n, operators, time.monotonic() - start)]
        if args.restart and (mode == "one" or mode.startswith("hash")):
            for op in operators:
                op.stop()
            operators = started("-restart")
            start = time.monotonic()
            _await_looks(operators, n, args.timeout)
            results.append(_result(f"{mode}-rs", n, operators, time.monotonic() - start))
        return results
    finally:
        for op in operators:
            if op.proc.poll() is None:
                op.stop()


def _result(mode: str, n: int, operators: list[Any], seconds: float) -> Result:
    cpu_each = [op.cpu_seconds() for op in operators]
    rss_each = [op.peak_rss_mib() for op in operators]
    if len(operators) > 1:
        # What each replica's watch delivers and keeps, against what it serves: its share.
        shares = ["/".join(_gauges(op._metrics(), ("watched", "serving"))) for op in operators]
        print(f"    {mode}: CRs watched/served by each replica {', '.join(shares)}", flush=True)
    return Result(mode, n, len(operators), seconds, sum(cpu_each), rss_each, cpu_each)


def _gauges(metrics: str, names: tuple[str, ...]) -> list[str]:
    """takoform_shard_<name>_crs of each name in an operator's `metrics` ("?" when absent)."""
    found = [re.search(rf"^takoform_shard_{name}_crs(?:{{.*}})? (\S+)$", metrics, re.M)
             for name in names]  # fmt: skip
    return [f"{float(match.group(1)):.0f}" if match else "?" for match in found]


def _await_looks(operators: list[Any], n: int, timeout: float) -> None:
    """Until the operators together have looked at `n` CRs (takoform_reconciles_total)."""
    deadline = time.monotonic() + timeout
    while True:
        looked = 0.0
        for op in operators:
            with contextlib.suppress(httpx.HTTPError):  # not serving its metrics yet
                url = f"http://127.0.0.1:{op.metrics_port}/metrics"
                text = httpx.get(url, timeout=5).text
                looked += sum(
                    float(v)
                    for v in re.findall(r"^takoform_reconciles_total\{.*\} (\S+)$", text, re.M)
                )
        if looked >= n:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{looked:.0f} of {n} CRs looked at after the restart")
        time.sleep(1)


def _rebalance(kube: Any, host: Any, namespace: str, items: list[dict[str, Any]],
               operators: list[Any], selectors: list[tuple[str, dict[str, str]]], start: float,
               n: int, args: Any) -> Result:  # fmt: skip
    """Kill one of three replicas once half the CRs are Ready; time its CRs' handover."""
    from takoform_operator.core.shard_ring import owner, shard_key, slot_key, slot_of, view_of

    seen: dict[str, float] = {}
    asyncio.run(bench.watch_ready(kube, namespace, n // 2, seen, args.timeout))
    members = [settings["TAKOFORM_POD_NAME"] for _, settings in selectors]
    victim = operators[0]
    cpu_before_kill = victim.cpu_seconds()
    rss_victim = victim.peak_rss_mib()
    victim.proc.send_signal(signal.SIGKILL)
    victim.proc.wait(timeout=30)
    killed_at = time.monotonic()
    # The watch above stopped at N/2: CRs Ready since then, before the kill, waited for nothing.
    seen.update(dict.fromkeys(asyncio.run(bench.ready_now(kube, namespace)) - set(seen), killed_at))
    view = view_of(members)
    orphaned = {
        f"{item['kind']}/{item['metadata']['name']}"
        for item in items
        if owner(slot_key(slot_of(shard_key(namespace, item["metadata"]["name"]))), view)
        == members[0]
    } - set(seen)
    asyncio.run(bench.watch_ready(kube, namespace, n, seen, args.timeout))
    seconds = time.monotonic() - start
    waited = sorted(seen[key] - killed_at for key in orphaned)
    duplicates, replays = duplicate_mutations(host, items)
    survivors = operators[1:]
    return Result(
        "rebalance",
        n,
        len(operators),
        seconds,
        cpu_before_kill + sum(op.cpu_seconds() for op in survivors),
        [rss_victim, *(op.peak_rss_mib() for op in survivors)],
        handover=(waited[0], waited[-1]) if waited else (0.0, 0.0),
        duplicates=duplicates,
        replays=replays,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="300,1000")
    parser.add_argument("--modes", default="one,ns2,sel2")
    parser.add_argument("--poll", type=float, default=60.0, help="the operators' ready poll (s)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--before", help="a git revision to run every mode with as well")
    parser.add_argument("--restart", action="store_true", help="add a row after a restart")
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="takoform-bench-shards-"))
    sources: list[tuple[str, str | None]] = [("", None)]
    if args.before:
        sources = [("before", _checkout(args.before, workdir)), ("after", None)]
    results: list[Result] = []
    for n in [int(s) for s in args.sizes.split(",")]:
        for mode, (source, path) in [(m, s) for m in args.modes.split(",") for s in sources]:
            print(f"... {mode} {source} N={n}", file=sys.stderr, flush=True)
            # A control plane and a host of its own: what an earlier row left (its CRs, and the
            # TakoformBindings every replica lists) weighs on none of the next.
            with (
                _stack(workdir / f"{mode}-{source or 'now'}-{n}") as (kube, host),
                _pythonpath(path),
            ):
                measured = measure(kube, host, workdir, mode, n, args)
            for r in measured:
                r.source = source
                print(f"    {r.mode}: {r.seconds:.1f} s ({r.n / r.seconds:.1f} CRs/s), CPU "
                      f"{r.cpu_seconds:.1f} s {r.cpu_each}, peak RSS {r.rss_mib}; handover "
                      f"{r.handover}, duplicates {r.duplicates}",
                      file=sys.stderr, flush=True)  # fmt: skip
            results.extend(measured)
    print(f"{'mode':9} {'N':>5} {'procs':>5} {'all Ready s':>11} {'CRs/s':>7} {'speed-up':>8} "
          f"{'CPU s':>7} {'peak RSS MiB (each)':>20}")  # fmt: skip
    for r in results:
        restarted = r.mode.endswith("-rs")
        base = next(
            (b for b in results
             if b.n == r.n and b.mode.removesuffix("-rs") in ("one", "hash1")
             and b.mode.endswith("-rs") == restarted and b.source == r.source), None
        )  # fmt: skip
        speedup = base.seconds / r.seconds if base else float("nan")
        rss = "/".join(f"{m:.0f}" for m in r.rss_mib)
        print(f"{r.mode + (' ' + r.source if r.source else ''):9} {r.n:>5} {r.processes:>5} "
              f"{r.seconds:>11.1f} {r.n / r.seconds:>7.1f} "
              f"{speedup:>8.2f} {r.cpu_seconds:>7.1f} {rss:>20}  "
              f"{r.n / r.seconds / r.processes:>6.1f} CRs/s per replica")  # fmt: skip
        if base is not None and base is not r and r.cpu_each:
            cpu = "/".join(f"{c:.1f}" for c in r.cpu_each)
            print(f"{'':9} each replica: CPU {cpu} s, "
                  f"{max(r.cpu_each) / base.cpu_seconds:.0%} of `{base.mode}`'s at most; "
                  f"peak RSS {max(r.rss_mib) / max(base.rss_mib):.0%} of `{base.mode}`'s "
                  f"at most")  # fmt: skip
        if r.handover is not None:
            print(f"{'':9} one of 3 SIGKILLed at N/2 Ready: its CRs Ready again "
                  f"{r.handover[0]:.1f} s (first) to {r.handover[1]:.1f} s (last) after the kill; "
                  f"duplicate host mutations {r.duplicates}, creates replayed under their key "
                  f"{r.replays}")  # fmt: skip
    print(
        f"\n{os.cpu_count()} CPUs; host commit delay 0.05 s; the operators' ready poll "
        f"{args.poll:.0f} s; {bench.CONCURRENCY} concurrent reconciles per process."
    )
    return 0


@contextlib.contextmanager
def _stack(workdir: Path) -> Iterator[tuple[Any, Any]]:
    """A new control plane with the CRDs, and a new reference host, under `workdir`."""
    workdir.mkdir(parents=True)
    cluster = bench.localcluster.LocalCluster(workdir / "cluster", die_with_parent=True)
    cluster.start()
    host = None
    try:
        kube = bench.kube_from(cluster)
        kube.run("apply", "--server-side", "-f", str(REPO / "crds"))
        kube.run("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        host = bench.Host(workdir)
        yield kube, host
    finally:
        if host is not None:
            host.stop()
        cluster.stop()


def _checkout(revision: str, workdir: Path) -> str:
    """The `operator/` tree of `revision`, unpacked under `workdir`: its path."""
    target = workdir / f"operator-{re.sub(r'[^A-Za-z0-9._-]', '_', revision)}"
    target.mkdir()
    archive = subprocess.run(["git", "-C", str(REPO), "archive", revision, "operator"],
                             check=True, capture_output=True).stdout  # fmt: skip
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return str(target / "operator")


@contextlib.contextmanager
def _pythonpath(path: str | None) -> Any:
    """The operator processes started inside import takoform_operator from `path` first."""
    previous = os.environ.get("PYTHONPATH")
    if path is not None:
        os.environ["PYTHONPATH"] = path + (os.pathsep + previous if previous else "")
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = previous


if __name__ == "__main__":
    sys.exit(main())
