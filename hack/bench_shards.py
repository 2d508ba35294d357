#!/usr/bin/env python3
"""Benchmark shards: one operator process against two on the same machine, same API server,
same reference host, same N CRs (backlog mode: the CRs exist before the operators start).

- one:   one process watching one namespace with N CRs;
- ns2:   two processes, each watching its own namespace with N/2 CRs (`--namespace`);
- sel2:  two processes on one namespace with N CRs labelled shard=a / shard=b alternately,
         each with its TAKOFORM_SHARD_SELECTOR (each still receives every watch event).

For each it prints the time until all N are Ready, CRs/s, the speed-up over `one`, the
operators' CPU seconds (summed) and each process's peak RSS. The pieces (control plane, host,
operator process, CR manifests, the Ready watcher) are hack/bench_operator.py's.

    .venv/bin/python hack/bench_shards.py [--sizes 300,1000] [--modes one,ns2,sel2]

Figures are printed, never asserted. docs/scaling.md has the method and the figures measured.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def _operator(kube: Any, host: Any, namespace: str, workdir: Path, poll: float,
              selector: str | None) -> Any:  # fmt: skip
    """bench_operator.OperatorProcess copies the environment when it starts: the selector
    goes in through it (OperatorProcess has no parameter for extra settings)."""
    previous = os.environ.pop("TAKOFORM_SHARD_SELECTOR", None)
    if selector:
        os.environ["TAKOFORM_SHARD_SELECTOR"] = selector
    try:
        return bench.OperatorProcess(kube, host, namespace, workdir, poll)
    finally:
        os.environ.pop("TAKOFORM_SHARD_SELECTOR", None)
        if previous is not None:
            os.environ["TAKOFORM_SHARD_SELECTOR"] = previous


def measure(kube: Any, host: Any, workdir: Path, mode: str, n: int, args: Any) -> Result:
    stamp = f"{mode}-{n}-{int(time.time())}"
    if mode == "ns2":
        namespaces = [f"shard-{stamp}-a", f"shard-{stamp}-b"]
        batches = {ns: bench.manifests(n // 2 + (i < n % 2), ns) for i, ns in enumerate(namespaces)}
        selectors: list[tuple[str, str | None]] = [(ns, None) for ns in namespaces]
    else:
        namespace = f"shard-{stamp}"
        items = bench.manifests(n, namespace)
        if mode == "sel2":
            for i, item in enumerate(items):
                item["metadata"]["labels"] = {"shard": "ab"[i % 2]}
            selectors = [(namespace, "shard=a"), (namespace, "shard=b")]
        else:
            selectors = [(namespace, None)]
        batches = {namespace: items}
    for namespace, items in batches.items():
        bench.create_namespace(kube, namespace)
        asyncio.run(bench.create_all(kube, namespace, items, None, {}))

    operators = []
    for i, (namespace, selector) in enumerate(selectors):
        logdir = workdir / f"{stamp}-{i}"
        logdir.mkdir()
        operators.append(_operator(kube, host, namespace, logdir, args.poll, selector))
    start = time.monotonic()
    try:

        async def all_ready() -> None:
            await asyncio.gather(
                *(
                    bench.watch_ready(kube, namespace, len(items), {}, args.timeout)
                    for namespace, items in batches.items()
                )
            )

        asyncio.run(all_ready())
        seconds = time.monotonic() - start
        return Result(
            mode,
            n,
            len(operators),
            seconds,
            sum(op.cpu_seconds() for op in operators),
            [op.peak_rss_mib() for op in operators],
        )
    finally:
        for op in operators:
            op.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="300,1000")
    parser.add_argument("--modes", default="one,ns2,sel2")
    parser.add_argument("--poll", type=float, default=60.0, help="the operators' ready poll (s)")
    parser.add_argument("--timeout", type=float, default=1800.0)
    args = parser.parse_args()

    localcluster = bench.localcluster
    workdir = Path(tempfile.mkdtemp(prefix="takoform-bench-shards-"))
    cluster = localcluster.LocalCluster(workdir / "cluster", die_with_parent=True)
    cluster.start()
    host = None
    results: list[Result] = []
    try:
        kube = bench.kube_from(cluster)
        kube.run("apply", "--server-side", "-f", str(REPO / "crds"))
        kube.run("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        host = bench.Host(workdir)
        for n in [int(s) for s in args.sizes.split(",")]:
            for mode in args.modes.split(","):
                print(f"... {mode} N={n}", file=sys.stderr, flush=True)
                results.append(measure(kube, host, workdir, mode, n, args))
    finally:
        if host is not None:
            host.stop()
        cluster.stop()
    print(f"{'mode':5} {'N':>5} {'procs':>5} {'all Ready s':>11} {'CRs/s':>7} {'speed-up':>8} "
          f"{'CPU s':>7} {'peak RSS MiB (each)':>20}")  # fmt: skip
    for r in results:
        base = next((b for b in results if b.n == r.n and b.mode == "one"), None)
        speedup = base.seconds / r.seconds if base else float("nan")
        rss = "/".join(f"{m:.0f}" for m in r.rss_mib)
        print(f"{r.mode:5} {r.n:>5} {r.processes:>5} {r.seconds:>11.1f} {r.n / r.seconds:>7.1f} "
              f"{speedup:>8.2f} {r.cpu_seconds:>7.1f} {rss:>20}")  # fmt: skip
    print(
        f"\n{os.cpu_count()} CPUs; host commit delay 0.05 s; the operators' ready poll "
        f"{args.poll:.0f} s; {bench.CONCURRENCY} concurrent reconciles per process."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
