"""spec.managementPolicy against the reference host running as a real process (the pause sends
nothing at all, so its rules are unit tables: tests/unit/test_policy.py).

The reconcile runs exactly as in the operator (`service.reconcile` over the real httpx client, one
host granted to every namespace); `SpyPort` counts every request it makes, and the host is read
back to prove nothing changed.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import builders
import pytest
from builders import BUCKET, REGISTRY, SPEC
from waiting import await_settled

from takoform_operator.core.actions import Update
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.state import Desired, ManagementPolicy, State
from takoform_operator.host_client.client import HostClient

from .harness import SimulatedCr, SpyPort, condition, message

pytestmark = pytest.mark.host

REF = REGISTRY.default_create_ref(BUCKET)
assert REF is not None
OBSERVE, FULL = ManagementPolicy.OBSERVE, ManagementPolicy.FULL


def desired(name: str, **changes: Any) -> Desired:
    """A fresh CR (a new uid) wanting the host resource `name`."""
    return builders.desired(cr_uid=f"cr-{uuid.uuid4()}", name=name, **changes)


@pytest.fixture
async def client(host_factory: Any) -> AsyncIterator[HostClient]:
    host = host_factory(commit_delay=0.05)
    async with HostClient(host.url, host.token, read_retries=2) as http:
        await http.ensure_space("team-a")
        yield http


async def existing(client: HostClient, name: str, size: int) -> str:
    """A resource somebody else created on the host; returns its uid."""
    operation = await client.create("team-a", REF, name, {**SPEC, "sizeGiB": size}, key="other:1")
    settled = await await_settled(client, operation.id)
    assert settled.resource_uid is not None
    return settled.resource_uid


async def test_observe_reports_drift_without_a_mutation_then_full_updates_once(
    client: HostClient,
) -> None:
    uid = await existing(client, "shared", size=25)
    spy = SpyPort(client)
    import_id = canonical_import_id("team-a", "shared", REF)
    cr = SimulatedCr(desired("shared", import_id=import_id, management=OBSERVE))
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.DRIFTED) is Reason.SPEC_DRIFT
    assert "sizeGiB" in message(outcome, ConditionType.DRIFTED)
    assert cr.state.uid == uid and cr.state.form_ref == REF, "bound like an import"
    for _ in range(2):
        await cr.reconcile(spy, REGISTRY)
    assert spy.mutations == [], "Observe never mutates"
    assert (await client.get_resource("team-a", REF, "shared")).spec["sizeGiB"] == 25

    cr.change(management=FULL)
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert len(spy.mutations) == 1 and isinstance(spy.mutations[0], Update)
    assert spy.mutations[0].expected_uid == uid
    served = await client.get_resource("team-a", REF, "shared")
    assert served.spec["sizeGiB"] == 10 and served.metadata.uid == uid


async def test_observe_matching_the_host_then_full_sends_nothing(client: HostClient) -> None:
    await existing(client, "same", size=10)
    spy = SpyPort(client)
    cr = SimulatedCr(
        desired("same", import_id=canonical_import_id("team-a", "same", REF), management=OBSERVE)
    )
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    cr.change(management=FULL)
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert spy.mutations == []


async def test_observe_never_creates_and_never_deletes(client: HostClient) -> None:
    spy = SpyPort(client)
    missing = SimulatedCr(desired("absent", management=OBSERVE))
    outcome = await missing.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.DEGRADED) is Reason.OBSERVED_RESOURCE_MISSING
    assert await client.find_resource("team-a", REF, "absent") is None

    made = SimulatedCr(desired("made"))
    await made.converge(spy, REGISTRY)
    created = len(spy.mutations)
    made.change(management=OBSERVE)
    outcome = await made.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    made.desired = replace(made.desired, deleting=True)
    outcome = await made.reconcile(spy, REGISTRY)
    assert outcome.finalized, "deleting an Observe CR lets it go like Orphan"
    assert len(spy.mutations) == created, "no delete sent"
    assert await client.find_resource("team-a", REF, "made") is not None
    assert missing.state != State() and spy.mutations[0].target.name == "made"
