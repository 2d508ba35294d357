#!/usr/bin/env python3
"""Benchmark the reference host on loopback: create and read throughput, p50/p99 latency.

Starts `takoform-host serve` (commit delay 0, fresh database in a temporary directory), then runs
four bounded phases: sequential creates, sequential reads, and the same with 16 concurrent
clients. Prints one line per phase. A create is `PUT ... If-None-Match: *` answered 202 (one
fsync'ed SQLite transaction); a read is `GET` of a committed resource answered 200.

    .venv/bin/python hack/bench_host.py [--clients 16] [--creates 400] [--reads 800]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

# The tests' support modules (waiting, processes) are shared with these scripts.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from processes import HostProcess
from waiting import wait_for

API = "/v1alpha3"
SPACE = "bench"
SPEC = {"spec": {"region": "eu-west-1", "sizeGiB": 10}}


def start_host(workdir: Path) -> HostProcess:
    """The host under benchmark: commit delay 0, a quiet log, the bench space created."""
    host = HostProcess(
        workdir, commit_delay=0, extra_args=("--log-level", "warning", "--space", SPACE)
    )
    host.start()
    return host


def bucket_ref(client: httpx.Client) -> dict[str, str]:
    for item in client.get(f"{API}/forms").json()["items"]:
        ref = item["formRef"]
        if ref["kind"] == "Bucket" and ref["definitionVersion"] == "1.1.0":
            return dict(ref)
    raise SystemExit("Bucket 1.1.0 is not installed")


class Phase:
    def __init__(self, name: str) -> None:
        self.name = name
        self.latencies: list[float] = []
        self.elapsed = 0.0

    def line(self) -> str:
        lat = sorted(self.latencies)
        n = len(lat)
        p50 = statistics.median(lat) * 1000
        p99 = lat[min(n - 1, int(n * 0.99))] * 1000
        rate = n / self.elapsed if self.elapsed else float("nan")
        return f"{self.name:<26} {n:>6} {self.elapsed:>8.2f} {rate:>9.0f} {p50:>8.2f} {p99:>8.2f}"


def timed_sync(phase: Phase, call: Callable[[], httpx.Response], expect: int) -> None:
    started = time.perf_counter()
    response = call()
    phase.latencies.append(time.perf_counter() - started)
    if response.status_code != expect:
        raise SystemExit(f"{phase.name}: {response.status_code} {response.text[:300]}")


async def timed_async(
    phase: Phase, call: Callable[[], Awaitable[httpx.Response]], expect: int
) -> None:
    started = time.perf_counter()
    response = await call()
    phase.latencies.append(time.perf_counter() - started)
    if response.status_code != expect:
        raise SystemExit(f"{phase.name}: {response.status_code} {response.text[:300]}")


def sequential(
    url: str, headers: dict[str, str], ref: dict[str, str], n_create: int, n_read: int
) -> list[Phase]:
    params = {"definitionVersion": ref["definitionVersion"], "schemaDigest": ref["schemaDigest"]}
    base = f"{API}/spaces/{SPACE}/forms/{ref['apiVersion']}/{ref['kind']}/resources"
    creates, reads = Phase("create, sequential"), Phase("read, sequential")
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        started = time.perf_counter()
        for i in range(n_create):
            timed_sync(
                creates,
                lambda i=i: client.put(
                    f"{base}/seq-{i}", params=params, json=SPEC, headers={"If-None-Match": "*"}
                ),
                202,
            )
        creates.elapsed = time.perf_counter() - started
        started = time.perf_counter()
        for i in range(n_read):
            timed_sync(
                reads, lambda i=i: client.get(f"{base}/seq-{i % n_create}", params=params), 200
            )
        reads.elapsed = time.perf_counter() - started
    return [creates, reads]


async def concurrent(
    url: str, headers: dict[str, str], ref: dict[str, str], clients: int, n_create: int, n_read: int
) -> list[Phase]:
    params = {"definitionVersion": ref["definitionVersion"], "schemaDigest": ref["schemaDigest"]}
    base = f"{API}/spaces/{SPACE}/forms/{ref['apiVersion']}/{ref['kind']}/resources"
    creates = Phase(f"create, {clients} concurrent")
    reads = Phase(f"read, {clients} concurrent")
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(
        base_url=url, headers=headers, timeout=30, limits=limits
    ) as client:

        async def create_worker(worker: int) -> None:
            for i in range(worker, n_create, clients):
                await timed_async(
                    creates,
                    lambda i=i: client.put(
                        f"{base}/conc-{i}", params=params, json=SPEC, headers={"If-None-Match": "*"}
                    ),
                    202,
                )

        async def read_worker(worker: int) -> None:
            for i in range(worker, n_read, clients):
                await timed_async(
                    reads, lambda i=i: client.get(f"{base}/conc-{i % n_create}", params=params), 200
                )

        for phase, worker in ((creates, create_worker), (reads, read_worker)):
            started = time.perf_counter()
            await asyncio.gather(*(worker(w) for w in range(clients)))
            phase.elapsed = time.perf_counter() - started
    return [creates, reads]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--creates", type=int, default=400, help="creates per phase")
    parser.add_argument("--reads", type=int, default=800, help="reads per phase")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-host-") as tmp:
        host = start_host(Path(tmp))
        url, headers = host.url, {"Authorization": f"Bearer {host.token}"}
        try:
            with httpx.Client(base_url=url, headers=headers) as client:
                ref = bucket_ref(client)
            phases = sequential(url, headers, ref, args.creates, args.reads)
            phases += asyncio.run(
                concurrent(url, headers, ref, args.clients, args.creates, args.reads)
            )
            with httpx.Client(base_url=url, headers=headers) as client:

                def all_settled() -> list[dict[str, Any]] | None:
                    ops = client.get(f"{API}/operations", params={"space": SPACE}).json()["items"]
                    return ops if ops and all(op["state"] != "running" for op in ops) else None

                ops = wait_for(all_settled, "every benchmark operation to settle")
            settled = sum(1 for op in ops if op["state"] == "succeeded")
        finally:
            host.stop()
    print(
        f"takoform-host benchmark on loopback (commit delay 0, SQLite WAL synchronous=FULL, "
        f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]})"
    )
    print(f"{'phase':<26} {'reqs':>6} {'seconds':>8} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8}")
    for phase in phases:
        print(phase.line())
    print(f"operations settled: {settled} of {2 * args.creates} creates")
    return 0 if settled == 2 * args.creates else 1


if __name__ == "__main__":
    sys.exit(main())
