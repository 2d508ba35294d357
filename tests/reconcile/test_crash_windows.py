"""Crash windows (docs/crash-safety.md): a death after each step leaves no duplicate, no orphan.

A "death" is a reconcile whose outcome is never persisted: its host calls happened, its status
write did not. Afterwards the host, a real process, is asked what exists.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest

from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.identity import FormLine
from takoform_operator.core.reconcile import Create
from takoform_operator.core.state import Desired
from takoform_operator.host_client.client import HostClient
from takoform_operator.registry_data import load_registry

from .harness import SimulatedCr, SpyPort, condition

pytestmark = pytest.mark.host

BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
REGISTRY = load_registry()
CREATE_REF = REGISTRY.default_create_ref(BUCKET)
SPEC = {"region": "eu-west-1", "sizeGiB": 10}


def desired(name: str) -> Desired:
    return Desired(
        cr_uid=f"cr-{uuid.uuid4()}",
        cr_generation=1,
        line=BUCKET,
        space="crash",
        name=name,
        parameters=SPEC,
    )


@pytest.fixture
async def shared(reference_host: Any) -> AsyncIterator[HostClient]:
    async with HostClient(reference_host.url, reference_host.token) as http:
        await http.ensure_space("crash")
        yield http


async def operations_for(client: HostClient, name: str) -> list[Any]:
    assert CREATE_REF is not None
    return await client.list_operations("crash", CREATE_REF, name)


async def lifecycle(cr: SimulatedCr, port: SpyPort, crash_at: int) -> None:
    """Create, update, delete; the reconcile numbered `crash_at` dies before its status write."""
    step = 0

    async def run_until(done: Any) -> None:
        nonlocal step
        for _ in range(80):
            persist = step != crash_at
            step += 1
            outcome = await cr.reconcile(port, REGISTRY, persist=persist)
            if persist and done(outcome):
                return
            await asyncio.sleep(0.03)
        raise AssertionError(f"did not converge: {cr.outcomes[-1]}")

    def ready(outcome: Any) -> bool:
        return condition(outcome, ConditionType.READY) is Reason.AVAILABLE

    await run_until(ready)
    cr.change(parameters={**SPEC, "sizeGiB": 20})
    await run_until(lambda o: ready(o) and cr.state.generation == "2")
    cr.desired = replace(cr.desired, deleting=True)
    await run_until(lambda o: o.finalized)


@pytest.mark.parametrize("crash_at", range(12))
async def test_death_after_any_reconcile_leaves_no_duplicate_and_no_orphan(
    shared: HostClient, crash_at: int
) -> None:
    name = f"life-{crash_at}"
    cr = SimulatedCr(desired(name))
    port = SpyPort(shared)
    await lifecycle(cr, port, crash_at)
    verbs = [op.verb for op in await operations_for(shared, name)]
    assert verbs.count("create") == 1, f"no duplicate create: {verbs}"
    assert verbs.count("update") == 1, f"one update for one spec change: {verbs}"
    assert verbs.count("delete") == 1, f"one delete: {verbs}"
    assert CREATE_REF is not None
    assert await shared.find_resource("crash", CREATE_REF, name) is None, "no orphan"


@pytest.fixture
def host(host_factory: Any) -> Any:
    return host_factory(commit_delay=0.05)


@pytest.fixture
async def client(host: Any) -> AsyncIterator[HostClient]:
    async with HostClient(host.url, host.token) as http:
        await http.ensure_space("crash")
        yield http


async def test_lost_202_while_the_create_still_runs_replays_the_same_operation(
    host: Any, client: HostClient
) -> None:
    cr = SimulatedCr(desired("lost-running"))
    port = SpyPort(client)
    host.set_faults(stuckOperations=True)
    try:
        await cr.reconcile(port, REGISTRY, persist=False)  # died after the host's 202
        assert cr.state.pending is None
        outcome = await cr.reconcile(port, REGISTRY)
        assert cr.state.pending is not None
        assert condition(outcome, ConditionType.RECONCILING) is not None
    finally:
        host.set_faults(stuckOperations=False)
    outcome = await cr.converge(port, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    operations = await operations_for(client, "lost-running")
    assert [op.verb for op in operations] == ["create"], "the replay returned the original"
    creates = [m for m in port.mutations if isinstance(m, Create)]
    assert len(creates) == 2 and creates[0].key == creates[1].key


async def test_lost_202_and_expired_record_adopts_by_creation_key(
    host: Any, client: HostClient
) -> None:
    cr = SimulatedCr(desired("lost-expired"))
    port = SpyPort(client)
    first = await cr.reconcile(port, REGISTRY, persist=False)
    operation_id = next(iter(op.id for op in await operations_for(client, "lost-expired")))
    assert first.state.pending is not None and first.state.pending.operation_id == operation_id
    for _ in range(100):
        if (await client.get_operation(operation_id)).state != "running":
            break
        await asyncio.sleep(0.02)
    host.admin("POST", "/admin/v1/operations/expire", {"ids": [operation_id]})
    outcome = await cr.converge(port, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert CREATE_REF is not None
    served = await client.get_resource("crash", CREATE_REF, "lost-expired")
    assert served.metadata.uid == cr.state.uid
    assert len([m for m in port.mutations if isinstance(m, Create)]) == 1, "adopted, not re-sent"


async def test_cr_deleted_after_a_lost_202_waits_for_the_create_then_deletes(
    host: Any, client: HostClient
) -> None:
    cr = SimulatedCr(desired("lost-then-deleted"))
    port = SpyPort(client)
    host.set_faults(stuckOperations=True)
    try:
        await cr.reconcile(port, REGISTRY, persist=False)
        cr.desired = replace(cr.desired, deleting=True)
        outcome = await cr.reconcile(port, REGISTRY)
        assert not outcome.finalized, "an accepted create of ours is never orphaned"
        assert cr.state.pending is not None
    finally:
        host.set_faults(stuckOperations=False)
    outcome = await cr.converge(port, REGISTRY)
    assert outcome.finalized
    assert CREATE_REF is not None
    assert await client.find_resource("crash", CREATE_REF, "lost-then-deleted") is None


async def test_death_before_the_failed_create_is_recorded_retries_with_a_fresh_key(
    host: Any, client: HostClient
) -> None:
    cr = SimulatedCr(desired("fails"))
    port = SpyPort(client)
    host.set_faults(failNextOperations=1)
    await cr.reconcile(port, REGISTRY)  # accepted, recorded
    await asyncio.sleep(0.2)
    await cr.reconcile(port, REGISTRY, persist=False)  # saw the failure, died before writing
    outcome = await cr.converge(port, REGISTRY)  # sees it again, bumps, creates anew
    if condition(outcome, ConditionType.DEGRADED):
        outcome = await cr.converge(port, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    verbs = [(op.verb, op.state) for op in await operations_for(client, "fails")]
    assert sorted(verbs) == [("create", "failed"), ("create", "succeeded")]


async def test_restored_cr_without_status_never_adopts_silently(client: HostClient) -> None:
    original = SimulatedCr(desired("restored"))
    port = SpyPort(client)
    await original.converge(port, REGISTRY)
    restored = SimulatedCr(replace(original.desired, cr_uid=f"cr-{uuid.uuid4()}"))
    outcome = await restored.converge(port, REGISTRY)
    assert condition(outcome, ConditionType.BLOCKED) is Reason.NAME_TAKEN
    assert restored.state.uid is None, "never bound: only its claim is recorded"


async def test_host_without_creation_keys_falls_back_to_blocked_not_adoption(
    host_factory: Any,
) -> None:
    """A host that records no keys cannot prove a resource is ours: after a lost 202 and an
    expired record the operator blocks with the import remedy instead of adopting by name."""
    host = host_factory(commit_delay=0.05, misbehaviours=("drop-idempotency-key",))
    async with HostClient(host.url, host.token) as client:
        await client.ensure_space("crash")
        cr = SimulatedCr(desired("keyless"))
        port = SpyPort(client)
        await cr.reconcile(port, REGISTRY, persist=False)  # died after the host's 202
        operations = await operations_for(client, "keyless")
        for _ in range(100):
            if (await client.get_operation(operations[0].id)).state != "running":
                break
            await asyncio.sleep(0.02)
        host.admin("POST", "/admin/v1/operations/expire", {"ids": [operations[0].id]})
        outcome = await cr.converge(port, REGISTRY)
        assert condition(outcome, ConditionType.BLOCKED) is Reason.OWNERSHIP_UNPROVABLE
        assert cr.state.uid is None, "never bound by name alone"
        assert len([m for m in port.mutations if isinstance(m, Create)]) == 1, "no duplicate"
