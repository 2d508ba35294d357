"""The metrics a controller-runtime user looks for: the reconcile queue and slots, host requests
by host, verb and code, and how many resources of each kind are Ready."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import httpx
from builders import BUCKET_REF, cr_body
from prometheus_client import CollectorRegistry

from takoform_operator.core.conditions import Condition, ConditionType, Reason
from takoform_operator.core.outcome import NextLook, Outcome, finalized, unavailable
from takoform_operator.core.state import State
from takoform_operator.core.tenancy import HostConfig
from takoform_operator.host_client.client import HostClient
from takoform_operator.host_client.pool import HostPool, observer_of
from takoform_operator.host_port import HostUnavailable, ResourceNotFound
from takoform_operator.kube.slots import FairSlots
from takoform_operator.metrics import Metrics

TIMEOUT = 5.0


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


# -- the reconcile queue and its slots -------------------------------------------------------


def test_queue_depth_and_workers_are_read_from_the_slots_when_scraped() -> None:
    metrics = Metrics(CollectorRegistry())
    slots = FairSlots(2, fair=True)
    metrics.watch_slots(slots)

    def seen() -> tuple[float | None, ...]:
        return tuple(
            _value(metrics, name)
            for name in (
                "takoform_reconcile_queue_depth",
                "takoform_reconcile_workers_active",
                "takoform_reconcile_workers_max",
            )
        )

    async def scenario() -> None:
        assert seen() == (0, 0, 2)
        release = asyncio.Event()
        entered: asyncio.Queue[str] = asyncio.Queue()

        async def hold(name: str, namespace: str) -> None:
            async with slots.slot(namespace, "h"):
                await entered.put(name)
                await release.wait()

        tasks = [
            asyncio.create_task(hold(f"cr-{i}", f"ns-{i % 2}"), name=f"cr-{i}") for i in range(5)
        ]
        # Each task asks for its slot when first run, all of them before the first get returns.
        for _ in range(2):
            await asyncio.wait_for(entered.get(), TIMEOUT)
        assert seen() == (3, 2, 2), "two reconciles run, three wait for a slot"
        release.set()
        await asyncio.wait_for(asyncio.gather(*tasks), TIMEOUT)
        assert seen() == (0, 0, 2), "all served: nothing waits, no slot held"

    asyncio.run(scenario())


# -- host requests -------------------------------------------------------------------------------


def test_every_host_request_is_counted_by_host_verb_and_code_retries_included() -> None:
    metrics = Metrics(CollectorRegistry())
    answers = iter([503, 404])

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/forms"):
            raise httpx.ConnectError("refused", request=request)
        code = next(answers)
        body = {
            "error": {
                "code": "unavailable" if code == 503 else "resource_not_found",
                "message": "x",
            }
        }
        return httpx.Response(code, json=body)

    async def no_wait(_: float) -> None:
        return None

    client = HostClient(
        "http://h",
        "t",
        transport=httpx.MockTransport(handler),
        read_retries=1,
        sleep=no_wait,
        observe=observer_of(metrics.host_request, "edge"),
    )

    async def scenario() -> None:
        try:
            await client.get_resource("team-a", BUCKET_REF, "logs")
        except ResourceNotFound:
            pass
        else:
            raise AssertionError("the host said 404")
        try:
            await client.list_forms()
        except HostUnavailable:
            pass
        else:
            raise AssertionError("the host could not be reached")
        await client.aclose()

    asyncio.run(scenario())
    total = "takoform_host_requests_total"
    assert _value(metrics, total, host="edge", verb="read", code="503") == 1
    assert _value(metrics, total, host="edge", verb="read", code="404") == 1, "the retry counts"
    assert _value(metrics, total, host="edge", verb="forms", code="error") == 2, "no answer"
    count = "takoform_host_request_duration_seconds_count"
    assert _value(metrics, count, host="edge", verb="read") == 2
    assert _value(metrics, count, host="edge", verb="forms") == 2


def test_the_pool_names_the_takoform_host_its_requests_went_to() -> None:
    with socket.socket() as probe:  # a port nobody listens on: refused at once
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics = Metrics(CollectorRegistry())
    pool = HostPool(None, read_retries=0, observe=metrics.host_request)
    pool.observe(HostConfig("edge", f"http://127.0.0.1:{port}", None, insecure=True))

    async def scenario() -> None:
        try:
            await pool.port("edge").list_forms()
        except HostUnavailable:
            pass
        else:
            raise AssertionError("nothing listens there")
        await pool.aclose()

    asyncio.run(scenario())
    labels = {"host": "edge", "verb": "forms", "code": "error"}
    assert _value(metrics, "takoform_host_requests_total", **labels) == 1


# -- Ready counts per kind -----------------------------------------------------------------------


def _with_ready(name: str, status: str | None) -> dict[str, Any]:
    body = cr_body(name=name, uid=f"uid-{name}")
    conditions = [] if status is None else [{"type": "Ready", "status": status, "reason": "x"}]
    return {**body, "status": {"conditions": conditions}}


def _ready_outcome() -> Outcome:
    ready = Condition(ConditionType.READY, True, Reason.AVAILABLE)
    return Outcome(State(uid="u"), (ready,), NextLook.POLL)


def test_resources_are_counted_by_kind_and_ready_and_leave_the_count_when_they_go() -> None:
    metrics = Metrics(CollectorRegistry())

    def counts() -> dict[str, float | None]:
        return {
            ready: _value(metrics, "takoform_resources", kind="Bucket", ready=ready)
            for ready in ("True", "False", "Unknown")
        }

    outcome = _ready_outcome()
    metrics.reconciled(_with_ready("a", None), outcome, 0.1)
    metrics.reconciled(_with_ready("b", "True"), outcome, 0.1)
    metrics.reconciled(_with_ready("c", "True"), outcome, 0.1)
    assert counts() == {"True": 2, "False": None, "Unknown": 1}
    metrics.reconciled(_with_ready("b", "True"), outcome, 0.1)
    assert counts() == {"True": 2, "False": None, "Unknown": 1}, "a CR counts once"
    metrics.reconciled(_with_ready("a", "False"), outcome, 0.1)
    metrics.reconciled(_with_ready("b", "False"), outcome, 0.1)
    assert counts() == {"True": 1, "False": 2, "Unknown": 0}
    # An outage keeps the Ready the status holds (core.outcome.unavailable): so does the count.
    metrics.reconciled(_with_ready("c", "True"), unavailable(State(), "down", None), 0.1)
    assert counts() == {"True": 1, "False": 2, "Unknown": 0}
    metrics.forget(_with_ready("a", "False"))
    metrics.reconciled(_with_ready("b", "False"), finalized(State(), "gone"), 0.1)
    metrics.forget(_with_ready("b", "False"))
    metrics.forget(_with_ready("b", "False"))  # twice: counted out once
    assert counts() == {"True": 1, "False": 0, "Unknown": 0}
