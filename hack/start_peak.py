#!/usr/bin/env python3
"""Where an operator's peak RSS comes from at a start: what code ran when its RSS grew.

The operator runs as in `hack/bench_operator.py` (a real kube-apiserver, the reference host,
one namespace) through this file (`child`), on N CRs created before it starts (a backlog,
`--bloated`: each with about 100 KB of foreign metadata), or `--restart`: started again once
they are Ready. A thread reads its RSS every 2 ms and charges each rise of its peak by 64 KiB or
more to the main thread's stack at that moment (memory given back and taken again counts
once). Printed: its peak RSS (when, and what the imports
had reached), and the growth past the imports by the innermost frame of the operator's code
(or kopf's, else the innermost one). A sample, not an account: a growth is charged to whatever
the main thread ran when it was seen, so read the large figures only. Nothing in the operator
changes for it (docs/performance.md, "The start's peak").

    .venv/bin/python hack/start_peak.py --n 3000 --restart [--seconds 15] [--top 25]
    .venv/bin/python hack/start_peak.py --n 1000 --bloated
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "tests" / "support")]
#: A growth smaller than this is left to the next sample.
STEP = 64 * 1024
SAMPLE_SECONDS = 0.002


def child(argv: list[str]) -> int:
    """Run the operator's command line under the sampler; on SIGUSR1 (and at exit) write what
    it charged to $START_PEAK_OUT."""
    page = os.sysconf("SC_PAGE_SIZE")
    main_thread = threading.main_thread().ident
    started = time.monotonic()
    charged: Counter[tuple[str, ...]] = Counter()
    timeline: list[tuple[float, int, list[str]]] = []

    def rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * page

    def sample() -> None:
        peak = rss()
        while True:
            time.sleep(SAMPLE_SECONDS)
            now = rss()
            if now - peak >= STEP:
                frame = sys._current_frames().get(main_thread or 0)
                stack = _stack(frame)
                charged[stack] += now - peak
                timeline.append((time.monotonic() - started, now, list(stack[:3])))
                peak = now

    def write(*_: object) -> None:
        found = {"charged": [[list(k), v] for k, v in charged.most_common()], "timeline": timeline}
        Path(os.environ["START_PEAK_OUT"]).write_text(json.dumps(found))

    signal.signal(signal.SIGUSR1, write)
    threading.Thread(target=sample, daemon=True).start()
    from takoform_operator.cli import main

    return main(argv)


def _stack(frame: FrameType | None) -> tuple[str, ...]:
    found = []
    while frame is not None:
        code = frame.f_code
        where = code.co_filename.split("site-packages/")[-1].split("/operator/")[-1]
        found.append(f"{where}:{code.co_name}:{frame.f_lineno}")
        frame = frame.f_back
    return tuple(found) or ("?",)


def _charged_to(stack: list[str]) -> str:
    """The innermost frame of the operator's code or kopf's, else the innermost one; the event
    loop waiting for I/O when the rise came from another thread, or from a page touched last."""
    if "selectors.py:select:" in stack[0]:
        return "(the event loop waiting: another thread, or a page touched late)"
    ours = (f for f in stack if f.startswith(_OURS) and not f.startswith(_ENTRY))
    return next(ours, stack[0])


def _importing(stack: list[str]) -> bool:
    return any("importlib" in frame for frame in stack)


_OURS = ("takoform_operator/", "kopf/")
#: The frames every stack of the running operator has: its command line and main.
_ENTRY = ("takoform_operator/cli.py:", "takoform_operator/main.py:main:")


def report(found: dict[str, list[Any]], imported_at: float, top: int) -> None:
    timeline = found["timeline"]
    peak = max(timeline, key=lambda t: t[1]) if timeline else (0.0, 0, [])
    imported = next((rss for t, rss, _ in timeline if t >= imported_at), 0)
    print(f"\npeak {peak[1] / 2**20:.1f} MiB at {peak[0]:.2f} s; "
          f"{imported / 2**20:.1f} MiB at {imported_at:.2f} s (the imports done)")  # fmt: skip
    print(f"\nrises of the peak RSS, MiB, charged to the code that ran (top {top}):")
    by_frame: Counter[str] = Counter()
    for stack, grown in found["charged"]:
        if not _importing(stack):
            by_frame[_charged_to(stack)] += grown
    for frame, grown in by_frame.most_common(top):
        print(f"{grown / 2**20:>7.2f}  {frame}")


def main() -> int:
    if sys.argv[1:2] == ["child"]:
        return child(sys.argv[2:])
    import bench_operator as bench
    import bench_shards

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=3000)
    parser.add_argument("--bloated", action="store_true")
    parser.add_argument("--restart", action="store_true")
    parser.add_argument("--seconds", type=float, default=15.0, help="sampled after all Ready")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="takoform-start-peak-"))
    out = workdir / "charged.json"
    os.environ["START_PEAK_OUT"] = str(out)
    sampled = (str(Path(__file__).resolve()), "child")
    with bench_shards._stack(workdir / "stack") as (kube, host):
        namespace = f"peak-{args.n}"
        bench.create_namespace(kube, namespace)
        items = bench.manifests(args.n, namespace, bloated=args.bloated)
        asyncio.run(bench.create_all(kube, namespace, items, None, {}))
        if args.restart:
            first = bench.OperatorProcess(kube, host, namespace, workdir, 60.0)
            try:
                asyncio.run(bench.watch_ready(kube, namespace, args.n, {}, 3600))
                print(f"... {args.n} CRs Ready; peak RSS {first.peak_rss_mib():.0f} MiB",
                      file=sys.stderr)  # fmt: skip
            finally:
                first.stop()
        logs = workdir / "sampled"
        logs.mkdir()
        operator = bench.OperatorProcess(kube, host, namespace, logs, 60.0, command=sampled)
        try:
            asyncio.run(bench.watch_ready(kube, namespace, args.n, {}, 3600))
            time.sleep(args.seconds)
            print(f"... sampled: peak RSS {operator.peak_rss_mib():.1f} MiB, now "
                  f"{operator.peak_rss_mib('VmRSS'):.1f}", file=sys.stderr)  # fmt: skip
            operator.proc.send_signal(signal.SIGUSR1)
            deadline = time.monotonic() + 30
            while not out.exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            operator.stop()
        found = json.loads(out.read_text())
        imported_at = max((t for t, _, top in found["timeline"] if _importing(top)), default=0.0)
        report(found, imported_at, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
