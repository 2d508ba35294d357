"""Crash windows (docs/crash-safety.md): a death after each step leaves no duplicate, no orphan.

A "death" is a reconcile whose outcome is never persisted: its host calls happened, its status
write did not. Afterwards the host, a real process, is asked what exists.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import builders
import pytest
from builders import BUCKET, REGISTRY, SPEC
from processes import HostProcess
from waiting import await_for, await_settled

from takoform_operator.core.actions import Create, Target
from takoform_operator.core.binding import Phase
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.outcome import Outcome
from takoform_operator.core.state import DeletionPolicy, Desired, OperationView, ResourceView
from takoform_operator.host_client.client import HostClient

from .harness import SimulatedCr, SpyPort, condition

pytestmark = pytest.mark.host

CREATE_REF = REGISTRY.default_create_ref(BUCKET)


def desired(name: str) -> Desired:
    """A fresh CR (a new uid) wanting the host resource `name` in space `crash`."""
    return builders.desired(cr_uid=f"cr-{uuid.uuid4()}", space="crash", name=name)


@pytest.fixture(scope="module")
def lifecycle_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    """A host of this module's own: the lifecycle holds its operations (stuckOperations), which
    the shared reference host must never do."""
    with HostProcess(tmp_path_factory.mktemp("crash-host"), commit_delay=0.05) as host:
        yield host


async def operations_for(client: HostClient, name: str) -> list[Any]:
    assert CREATE_REF is not None
    return await client.list_operations("crash", CREATE_REF, name)


# -- a death after every reconcile of a lifecycle -------------------------------------------------

#: Every reconcile of one crash-free lifecycle (create, update, delete), in order: the mutation it
#: sends (if any) and the reason it reports. Each operation is held running for two reconciles
#: (the one that sends it and one that reads while nothing is committed) and then released and
#: awaited, so the lifecycle is exactly this long and every reconcile is a distinct crash window.
WINDOWS: tuple[tuple[str | None, str], ...] = (
    ("create", Reason.CREATE_PENDING),  # the create accepted; the marker to be recorded
    (None, Reason.OPERATION_RUNNING),  # running, resource absent: absence is not deletion
    (None, Reason.AVAILABLE),  # settled: state bound, marker cleared
    ("update", Reason.UPDATE_PENDING),  # the spec changed: the update accepted
    (None, Reason.OPERATION_RUNNING),  # running: the old representation settles, marker kept
    (None, Reason.AVAILABLE),  # settled at generation 2
    ("delete", Reason.DELETE_PENDING),  # the CR deleted: the delete accepted
    (None, Reason.OPERATION_RUNNING),  # running: still there, marker kept
    (None, "finalized"),  # deleted: the CR may go
)


@dataclass(frozen=True)
class Step:
    sent: str | None
    reported: str
    persisted: bool

    @property
    def window(self) -> tuple[str | None, str]:
        return (self.sent, self.reported)


@dataclass
class Lifecycle:
    """Create, update and delete one CR; the reconcile numbered `crash_at` dies before its
    status write (its host calls happened, its outcome is never persisted)."""

    host: HostProcess
    client: HostClient
    cr: SimulatedCr
    crash_at: int | None = None
    steps: list[Step] = field(default_factory=list)

    async def run(self) -> None:
        await self.phase(self.ready)
        self.cr.change(parameters={**SPEC, "sizeGiB": 20})
        await self.phase(lambda o: self.ready(o) and self.cr.state.generation == "2")
        self.cr.desired = replace(self.cr.desired, deleting=True)
        await self.phase(lambda o: o.finalized)

    async def phase(self, done: Callable[[Outcome], bool]) -> None:
        self.host.set_faults(stuckOperations=True)
        try:
            await self.reconcile()  # sends the mutation (after a death: replays it by its key)
            await self.reconcile()  # reads while the host has committed nothing
        finally:
            self.host.set_faults(stuckOperations=False)
        await await_for(self.nothing_running, f"the operations on {self.cr.desired.name}")
        for _ in range(2):  # a death right after the settling read costs one more reconcile
            outcome = await self.reconcile()
            if self.steps[-1].persisted and done(outcome):
                return
        raise AssertionError(f"did not converge: {self.steps}")

    async def reconcile(self) -> Outcome:
        persist = len(self.steps) != self.crash_at
        sent = len(self.port.mutations)
        outcome = await self.cr.reconcile(self.port, REGISTRY, persist=persist)
        verb = str(self.port.mutations[-1].verb).lower() if self.port.mutations[sent:] else None
        self.steps.append(Step(verb, self.reported(outcome), persist))
        return outcome

    @cached_property
    def port(self) -> SpyPort:
        return SpyPort(self.client)

    async def nothing_running(self) -> bool:
        operations = await operations_for(self.client, self.cr.desired.name)
        return bool(operations) and all(op.state != "running" for op in operations)

    @staticmethod
    def ready(outcome: Outcome) -> bool:
        return condition(outcome, ConditionType.READY) is Reason.AVAILABLE

    @staticmethod
    def reported(outcome: Outcome) -> str:
        if outcome.finalized:
            return "finalized"
        found = outcome.asserted()
        reason = found.get(ConditionType.READY) or found.get(ConditionType.RECONCILING)
        return str(reason)


@pytest.fixture
async def lifecycle_client(lifecycle_host: HostProcess) -> AsyncIterator[HostClient]:
    async with HostClient(lifecycle_host.url, lifecycle_host.token) as http:
        await http.ensure_space("crash")
        yield http


async def test_the_lifecycle_without_a_death_is_exactly_the_listed_windows(
    lifecycle_host: HostProcess, lifecycle_client: HostClient
) -> None:
    """The crash test below kills each of these reconciles in turn: this pins that there are
    exactly len(WINDOWS) of them, so no index points past the end of the lifecycle."""
    life = Lifecycle(lifecycle_host, lifecycle_client, SimulatedCr(desired("no-death")))
    await life.run()
    assert [step.window for step in life.steps] == list(WINDOWS)
    assert all(step.persisted for step in life.steps)


WINDOW_IDS = [f"{i}-{sent or 'read'}-{reported}" for i, (sent, reported) in enumerate(WINDOWS)]


@pytest.mark.parametrize("crash_at", range(len(WINDOWS)), ids=WINDOW_IDS)
async def test_death_after_any_reconcile_leaves_no_duplicate_and_no_orphan(
    lifecycle_host: HostProcess, lifecycle_client: HostClient, crash_at: int
) -> None:
    name = f"life-{crash_at}"
    life = Lifecycle(lifecycle_host, lifecycle_client, SimulatedCr(desired(name)), crash_at)
    await life.run()
    # The death happened, once, in the window it was meant for (the run is the crash-free one
    # up to that reconcile).
    assert [i for i, step in enumerate(life.steps) if not step.persisted] == [crash_at]
    assert life.steps[crash_at].window == WINDOWS[crash_at], life.steps
    verbs = [op.verb for op in await operations_for(lifecycle_client, name)]
    assert verbs.count("create") == 1, f"no duplicate create: {verbs}"
    assert verbs.count("update") == 1, f"one update for one spec change: {verbs}"
    assert verbs.count("delete") == 1, f"one delete: {verbs}"
    assert CREATE_REF is not None
    assert await lifecycle_client.find_resource("crash", CREATE_REF, name) is None, "no orphan"


# -- the lost answer and the expired record -------------------------------------------------------


@pytest.fixture
def host(host_factory: Any) -> Any:
    return host_factory(commit_delay=0.05)


@pytest.fixture
async def client(host: Any) -> AsyncIterator[HostClient]:
    async with HostClient(host.url, host.token) as http:
        await http.ensure_space("crash")
        yield http


async def test_lost_202_while_the_create_still_runs_resumes_the_same_operation(
    host: Any, client: HostClient
) -> None:
    """The next look finds the create in the host's operations (consulted before the read),
    under the key it would send: it records that operation instead of sending the create
    again (were it sent, the key would replay the same operation)."""
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
    assert [op.verb for op in operations] == ["create"], "one operation"
    assert len([m for m in port.mutations if isinstance(m, Create)]) == 1, "resumed, not re-sent"


async def test_lost_202_and_expired_record_adopts_by_creation_key(
    host: Any, client: HostClient
) -> None:
    cr = SimulatedCr(desired("lost-expired"))
    port = SpyPort(client)
    first = await cr.reconcile(port, REGISTRY, persist=False)
    operation_id = next(iter(op.id for op in await operations_for(client, "lost-expired")))
    assert first.state.pending is not None and first.state.pending.operation_id == operation_id
    await await_settled(client, operation_id)
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
    assert cr.state.pending is not None
    assert (await await_settled(client, cr.state.pending.operation_id)).state == "failed"
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
        await await_settled(client, operations[0].id)
        host.admin("POST", "/admin/v1/operations/expire", {"ids": [operations[0].id]})
        outcome = await cr.converge(port, REGISTRY)
        assert condition(outcome, ConditionType.BLOCKED) is Reason.OWNERSHIP_UNPROVABLE
        assert cr.state.uid is None, "never bound by name alone"
        assert len([m for m in port.mutations if isinstance(m, Create)]) == 1, "no duplicate"


# -- the held pending write's window: a create the status does not record (issue 37) ------------


class CommittingPort(SpyPort):
    """The real port, and a host that commits what it holds (stuckOperations) right after the
    request numbered `commit_after` is answered, before the reconcile sends the next one."""

    def __init__(self, client: HostClient, host: Any, name: str) -> None:
        super().__init__(client)
        self._client, self._host, self._name = client, host, name
        self.commit_after: int | None = None
        self.committed_after: str | None = None

    async def _answered(self) -> None:
        if len(self.calls) != self.commit_after:
            return
        self.commit_after = None
        self._host.set_faults(stuckOperations=False)
        for operation in await operations_for(self._client, self._name):
            await await_settled(self._client, operation.id)
        self.committed_after = self.calls[-1]

    async def get_operation(self, operation_id: str) -> OperationView:
        answer = await super().get_operation(operation_id)
        await self._answered()
        return answer

    async def read(self, target: Target) -> ResourceView | None:
        answer = await super().read(target)
        await self._answered()
        return answer

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        answer = await super().list_operations(target)
        await self._answered()
        return answer


async def _accepted_unrecorded(host: Any, cr: SimulatedCr, port: SpyPort) -> None:
    """The create accepted and held running; its pending write never lands (held, then dropped
    by another write to the CR, or lost with the process)."""
    host.set_faults(stuckOperations=True)
    await cr.reconcile(port, REGISTRY, persist=False)
    assert [m.verb for m in port.mutations] == ["Create"] and cr.state.pending is None


@pytest.mark.parametrize("commit_after", [1, 2], ids=["after-1st-request", "after-2nd-request"])
async def test_a_create_committing_between_the_deletions_requests_is_deleted_not_orphaned(
    host: Any, client: HostClient, commit_after: int
) -> None:
    """Issue 37, against the real host: the CR is deleted inside the window and the create
    commits between two requests of the deletion's look. Before, the deletion read (absent),
    then listed (succeeded: only running creates counted), let go, and the resource stayed on
    the host with no owner. The operations are consulted first now, and a settled create of
    ours counts as created."""
    name = f"window-{commit_after}"
    cr = SimulatedCr(desired(name))
    port = CommittingPort(client, host, name)
    try:
        await _accepted_unrecorded(host, cr, port)
        cr.desired = replace(cr.desired, deleting=True)
        port.calls.clear()
        port.commit_after = commit_after
        outcome = await cr.reconcile(port, REGISTRY)
    finally:
        host.set_faults(stuckOperations=False)
    assert port.committed_after is not None, f"the look sent fewer requests: {port.calls}"
    window = list(port.calls)
    if not outcome.finalized:
        outcome = await cr.converge(port, REGISTRY)
    assert outcome.finalized
    assert CREATE_REF is not None
    assert await client.find_resource("crash", CREATE_REF, name) is None, "no orphan"
    assert sorted(op.verb for op in await operations_for(client, name)) == ["create", "delete"]
    assert window[0] == f"list_operations {name}", "the operations are consulted first"


async def test_an_orphan_deletion_inside_the_window_releases_the_uid_its_create_named(
    host: Any, client: HostClient
) -> None:
    """Orphan sends no mutation; inside the window it reads the host's operations first, so the
    Released binding remembers the incarnation the create named (before: `uid: null`)."""
    cr = SimulatedCr(desired("window-orphan"))
    port = SpyPort(client)
    try:
        await _accepted_unrecorded(host, cr, port)
    finally:
        host.set_faults(stuckOperations=False)
    (operation,) = await operations_for(client, "window-orphan")
    cr.desired = replace(cr.desired, deleting=True, deletion_policy=DeletionPolicy.ORPHAN)
    assert (await cr.reconcile(port, REGISTRY)).finalized
    (binding,) = cr.bindings.objects.values()
    assert binding.phase is Phase.RELEASED and binding.uid == operation.resource_uid
    assert [m.verb for m in port.mutations] == ["Create"], "Orphan sends no mutation"
