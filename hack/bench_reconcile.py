#!/usr/bin/env python3
"""Benchmark the reconcile against the reference host: what it costs over the host alone.

Starts `takoform-host serve` (commit delay 0) and brings N Buckets to a settled state twice, with
the same concurrency, side by side:

- host alone: the minimum any client needs: create, poll the operation until it settles, read;
- reconcile: `service.reconcile` (core + httpx client, exactly as the operator runs it) repeated per
  resource until Ready, with its exact-ref reads, rule-7 consultation and status bookkeeping.

Prints resources/s, host requests per resource, p50/p99 time-to-ready, and the ratio of the two.
Kubernetes is not in the loop: this measures the operator's own cost per resource.

    .venv/bin/python hack/bench_reconcile.py [--resources 200] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
# The tests' support modules (waiting, processes) are shared with these scripts.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from one_host import reconcile_with_one_host
from waiting import await_for, await_settled

from bench_host import SPACE, start_host
from takoform_operator.core.conditions import ConditionType
from takoform_operator.core.state import Desired, State
from takoform_operator.host_client.client import HostClient
from takoform_operator.host_client.port import HostClientPort
from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
SPEC = {"region": "eu-west-1", "sizeGiB": 10}


class CountingTransport(httpx.AsyncHTTPTransport):
    def __init__(self) -> None:
        super().__init__()
        self.requests = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        self.requests += 1
        return await super().handle_async_request(request)


async def host_alone(client: HostClient, name: str) -> None:
    ref = load_registry().default_create_ref(BUCKET)
    assert ref is not None
    operation = await client.create(SPACE, ref, name, SPEC, key=f"bench:{name}")
    await await_settled(client, operation.id, timeout=60, interval=0.005)
    await client.get_resource(SPACE, ref, name)


async def reconciled(client: HostClient, name: str) -> None:
    registry = load_registry()
    port = HostClientPort(client)
    desired = Desired(
        cr_uid=str(uuid.uuid4()),
        cr_generation=1,
        line=BUCKET,
        space=SPACE,
        name=name,
        parameters=SPEC,
    )
    state = State()

    async def ready() -> bool:
        nonlocal state
        outcome = await reconcile_with_one_host(desired, state, port, registry)
        state = outcome.state
        return ConditionType.READY in outcome.asserted()

    await await_for(ready, f"{name} Ready", timeout=60, interval=0.005)


async def phase(
    url: str,
    token: str,
    label: str,
    work: Callable[[HostClient, str], Awaitable[None]],
    resources: int,
    concurrency: int,
) -> dict[str, float]:
    transport = CountingTransport()
    async with HostClient(url, token, transport=transport, max_connections=concurrency) as client:
        latencies: list[float] = []
        queue = [f"{label}-{i}" for i in range(resources)]

        async def worker() -> None:
            while queue:
                name = queue.pop()
                started = time.perf_counter()
                await work(client, name)
                latencies.append(time.perf_counter() - started)

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "per_second": resources / elapsed,
        "requests": transport.requests / resources,
        "p50_ms": statistics.median(latencies) * 1000,
        "p99_ms": latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--resources", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="takoform-bench-") as scratch:
        host = start_host(Path(scratch))
        url, token = host.url, host.token
        try:
            print(f"host {url}; {args.resources} Buckets per phase, concurrency {args.concurrency}")
            alone = asyncio.run(
                phase(url, token, "alone", host_alone, args.resources, args.concurrency)
            )
            core = asyncio.run(
                phase(url, token, "core", reconciled, args.resources, args.concurrency)
            )
        finally:
            host.stop()
    print(f"{'phase':<12}{'ready/s':>10}{'req/res':>10}{'p50 ms':>10}{'p99 ms':>10}")
    for label, figures in (("host alone", alone), ("reconcile", core)):
        print(
            f"{label:<12}{figures['per_second']:>10.1f}{figures['requests']:>10.1f}"
            f"{figures['p50_ms']:>10.1f}{figures['p99_ms']:>10.1f}"
        )
    print(
        f"reconcile / host alone: throughput x{core['per_second'] / alone['per_second']:.2f}, "
        f"requests per resource x{core['requests'] / alone['requests']:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
