#!/usr/bin/env python3
"""A census of the operator's heap: what each CR it serves costs, and where.

The operator runs as in `hack/bench_operator.py` (a real kube-apiserver, the reference host,
the chart's ServiceAccount), under tracemalloc, on one namespace. Once it is idle (no CRs) the
heap is counted, then N CRs (plain, or `--bloated`: about 100 KB of foreign metadata each) are
created while it runs, and once all are Ready and a few polls have passed it is counted again.
With `--backlog` the CRs are created while no operator runs, and a second operator starts on
them (the benchmark's backlog row); the idle count is then the first operator's, stopped before
the CRs were created. Printed: the RSS at each count, the allocators' figures, the small-object
allocator's blocks in use and free by size class (where freed memory stays), the memory still
allocated per CR grouped by where it was allocated (tracemalloc snapshots diffed, by line and by
traceback), and the objects per CR by type (gc.get_objects(), diffed). Nothing in the
operator changes for this: the process is started through this file (`child`), which takes a
count on SIGUSR1 before it runs the operator's command line.

    .venv/bin/python hack/heap_census.py --n 2000 [--bloated] [--backlog] [--frames 12] [--top 40]

tracemalloc costs time and memory: the RSS printed here is not the benchmark's.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import signal
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests" / "support")]


def child(argv: list[str]) -> int:
    """Run the operator's command line; on SIGUSR1, count the heap into the next numbered files
    of $HEAP_CENSUS_DIR: the tracemalloc snapshot (when tracing), the objects by type, and the
    allocators' figures (`allocators`)."""
    counts = Path(os.environ["HEAP_CENSUS_DIR"])
    taken = [int(os.environ.get("HEAP_CENSUS_FIRST", "0"))]

    def census(_signum: int, _frame: Any) -> None:
        gc.collect()
        index = taken[0]
        taken[0] += 1
        if tracemalloc.is_tracing():
            tracemalloc.take_snapshot().dump(str(counts / f"{index}.snapshot"))
        types = Counter(type(o).__qualname__ for o in gc.get_objects())
        (counts / f"{index}.types.json").write_text(json.dumps(types))
        found, classes = allocators()
        (counts / f"{index}.allocators.json").write_text(json.dumps(found))
        (counts / f"{index}.classes.json").write_text(json.dumps(classes))
        (counts / f"{index}.done").touch()

    signal.signal(signal.SIGUSR1, census)
    from takoform_operator.cli import main

    return main(argv)


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def allocators() -> tuple[dict[str, float], dict[int, tuple[int, int]]]:
    """KiB held by Python's small-object allocator (its arenas, and the blocks in use in them:
    sys._debugmallocstats) and by glibc's malloc (its heap, and the part in use: mallinfo2),
    with the RSS before and after glibc gives its free memory back (malloc_trim); and, by
    size class of the small-object allocator, its blocks in use and free in its pools."""
    import ctypes
    import re

    from glibc_malloc import mallinfo2

    found: dict[str, float] = {"rss": _rss_kib()}
    with tempfile.TemporaryFile() as text:
        saved = os.dup(2)
        os.dup2(text.fileno(), 2)
        try:
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        text.seek(0)
        stats = text.read().decode()
    for key, pattern in (
        ("pymalloc arenas", r"arenas \* \d+ bytes/arena\s+=\s+([\d,]+)"),
        ("pymalloc in use", r"# bytes in allocated blocks\s+=\s+([\d,]+)"),
        ("pymalloc free in pools", r"# bytes in available blocks\s+=\s+([\d,]+)"),
        ("pymalloc unused pools", r"unused pools \* \d+ bytes\s+=\s+([\d,]+)"),
    ):
        match = re.search(pattern, stats)
        found[key] = int(match.group(1).replace(",", "")) / 1024 if match else float("nan")
    classes = {
        int(size): (int(used), int(free))
        for size, used, free in re.findall(
            r"^\s*\d+\s+(\d+)\s+\d+\s+(\d+)\s+(\d+)\s*$", stats, re.MULTILINE
        )
    }
    info = mallinfo2()
    found["glibc heap"] = info.arena / 1024
    found["glibc in use"] = info.uordblks / 1024
    found["glibc mmapped"] = info.hblkhd / 1024
    ctypes.CDLL(None).malloc_trim(0)
    found["rss after malloc_trim"] = _rss_kib()
    return found, classes


def take(operator: Any, counts: Path, index: int) -> float:
    """One count (the child's files `index`.*); returns the RSS (MiB) just before it."""
    rss = operator.peak_rss_mib("VmRSS")
    operator.proc.send_signal(signal.SIGUSR1)
    deadline = time.monotonic() + 600
    while not (counts / f"{index}.done").exists():
        if time.monotonic() > deadline:
            raise SystemExit("the operator took no count")
        time.sleep(0.5)
    return float(rss)


def report(counts: Path, n: int, top: int) -> None:
    """The second count against the first, per CR."""
    before, after = (json.loads((counts / f"{i}.allocators.json").read_text()) for i in (0, 1))
    print(f"\nN={n}, KiB: idle -> all Ready (per CR)")
    for key in before:
        print(f"{key:>24} {before[key]:>10.0f} -> {after[key]:>10.0f} "
              f"({(after[key] - before[key]) / n:>6.2f})")  # fmt: skip
    classes = [json.loads((counts / f"{i}.classes.json").read_text()) for i in (0, 1)]
    print(f"\nthe small-object allocator by size class, KiB per CR (top {top // 2} by free):")
    print(f"{'size':>6} {'in use':>8} {'free':>8}")
    rows = []
    for size in classes[1]:
        (used, free), (used_idle, free_idle) = classes[1][size], classes[0].get(size, (0, 0))
        rows.append((int(size), (used - used_idle) * int(size), (free - free_idle) * int(size)))
    for size, used, free in sorted(rows, key=lambda row: -row[2])[: top // 2]:
        print(f"{size:>6} {used / 1024 / n:>8.3f} {free / 1024 / n:>8.3f}")
    if (counts / "1.snapshot").exists():
        idle, loaded = (tracemalloc.Snapshot.load(str(counts / f"{i}.snapshot")) for i in (0, 1))
        print(f"\nstill allocated, by line, bytes per CR (top {top}):")
        for stat in loaded.compare_to(idle, "lineno")[:top]:
            frame = stat.traceback[0]
            print(f"{stat.size_diff / n:>9.1f} B {stat.count_diff / n:>6.2f} blocks  "
                  f"{_short(frame.filename)}:{frame.lineno}")  # fmt: skip
        print(f"\nby traceback, bytes per CR (top {top // 2}):")
        for stat in loaded.compare_to(idle, "traceback")[: top // 2]:
            print(f"{stat.size_diff / n:>9.1f} B {stat.count_diff / n:>6.2f} blocks")
            for frame in stat.traceback[-8:]:
                print(f"      {_short(frame.filename)}:{frame.lineno}")
    types = [Counter(json.loads((counts / f"{i}.types.json").read_text())) for i in (0, 1)]
    grown = types[1]
    grown.subtract(types[0])
    print(f"\nobjects the collector tracks, per CR (top {top}):")
    for name, count in grown.most_common(top):
        print(f"{count / n:>8.2f}  {name}")


def _short(filename: str) -> str:
    for marker in ("site-packages/", "operator/"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def main() -> int:
    if sys.argv[1:2] == ["child"]:
        return child(sys.argv[2:])
    from waiting import wait_until

    import bench_operator as bench
    import localcluster

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--bloated", action="store_true")
    parser.add_argument(
        "--backlog",
        action="store_true",
        help="the CRs exist before the operator starts (as the benchmark's backlog row): the "
        "idle count is an operator's with no CRs, stopped before they are created",
    )
    parser.add_argument(
        "--frames", type=int, default=12, help="tracemalloc's frames kept (0: no tracemalloc)"
    )
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--poll", type=float, default=5.0)
    parser.add_argument("--steady-polls", type=int, default=3)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="takoform-census-"))
    counts = workdir / "counts"
    counts.mkdir()
    cluster = localcluster.LocalCluster(workdir / "cluster", die_with_parent=True)
    cluster.start()
    host = None
    try:
        kube = bench.kube_from(cluster)
        kube.run("apply", "--server-side", "-f", str(bench.REPO / "crds"))
        kube.run("wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")
        bench.run_as_service_account(kube, cluster.tools.helm, workdir)
        host = bench.Host(workdir)
        namespace = f"census-{args.n}-{int(time.time())}"
        bench.create_namespace(kube, namespace)
        os.environ["HEAP_CENSUS_DIR"] = str(counts)
        tracing = (f"-Xtracemalloc={args.frames}",) if args.frames else ()
        command = (*tracing, str(Path(__file__).resolve()), "child")
        operator = bench.OperatorProcess(kube, host, namespace, workdir, args.poll, command=command)
        try:
            wait_until(lambda: not math.isnan(operator.loop_lag_max()), "its metrics", timeout=120)
            time.sleep(2 * args.poll)
            idle = take(operator, counts, 0)
            print(f"... idle: RSS {idle:.0f} MiB; creating {args.n} CRs", file=sys.stderr)
            items = bench.manifests(args.n, namespace, bloated=args.bloated)
            if args.backlog:
                operator.stop()
            asyncio.run(bench.create_all(kube, namespace, items, None, {}))
            if args.backlog:
                os.environ["HEAP_CENSUS_FIRST"] = "1"
                operator = bench.OperatorProcess(
                    kube, host, namespace, workdir, args.poll, command=command
                )
            asyncio.run(bench.watch_ready(kube, namespace, args.n, {}, 3600))
            time.sleep(args.poll * args.steady_polls)
            loaded = take(operator, counts, 1)
            print(f"... all Ready: RSS {loaded:.0f} MiB (peak {operator.peak_rss_mib():.0f})",
                  file=sys.stderr)  # fmt: skip
        finally:
            operator.stop()
        report(counts, args.n, args.top)
    finally:
        if host is not None:
            host.stop()
        cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
