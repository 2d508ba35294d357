"""The status write held until the next look: which outcomes may wait (core), the patch that
later writes a held status together with the next look's news (kube.crs.status_diff), and the
two rules of the held write (kube.cr_step.CrSteps.look): it applies only to the
body it was made for, and it is held at most once per operation."""

from __future__ import annotations

import copy
import gc
import itertools
import sys
from dataclasses import replace as dc_replace
from typing import Any

import pytest
from builders import REGISTRY, cr_body, desired
from core_steps import decided
from hypothesis import given
from hypothesis import strategies as st
from looks import MemoryCr, steps_over
from memory_bindings import MemoryBindings
from one_host import OneHost

from takoform_operator.core.actions import Action, Create, Delete, Target, Update
from takoform_operator.core.binding import Phase
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.decide import Decision, Observation
from takoform_operator.core.host_answer import accepted
from takoform_operator.core.state import OperationView, OpState, ResourceView, State
from takoform_operator.kube.cr_step import HeldStatus, Looked
from takoform_operator.kube.crs import merged_status, status_diff


def _create() -> Decision:
    decision: Decision = decided(desired(), State(), Observation(), REGISTRY)
    assert decision.action is not None
    return decision


def test_a_running_operation_under_our_key_may_wait_for_the_next_look() -> None:
    decision = _create()
    assert decision.action is not None
    running = OperationView(OpState.RUNNING, "uid-1", idempotency_key=decision.action.key)
    outcome = accepted(decision, "op-1", running, desired())
    assert outcome.replayable
    assert outcome.state.pending is not None and outcome.state.uid == "uid-1"


@pytest.mark.parametrize(
    ("state", "key"),
    [
        (OpState.RUNNING, None),  # a host that does not record keys: a replay may not find it
        (OpState.RUNNING, "someone-else:create:0"),
        (OpState.SUCCEEDED, "ours"),  # a replayed key answered with a settled operation
    ],
)
def test_anything_else_the_host_accepted_is_written_at_once(
    state: OpState, key: str | None
) -> None:
    decision = _create()
    assert decision.action is not None
    ours = decision.action.key if key == "ours" else key
    outcome = accepted(
        decision, "op-1", OperationView(state, "uid-1", idempotency_key=ours), desired()
    )
    assert not outcome.replayable
    assert outcome.state.pending is not None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=3),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abcd"), inner, max_size=3)
    ),
    max_leaves=12,
)


def _without_nulls(value: Any) -> Any:
    """A status as the API server stores it: a null member is no member."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    return value


_status = st.dictionaries(st.sampled_from("abcdef"), _json, max_size=5).map(_without_nulls)


@given(before=_status, after=_status)
def test_the_diff_turns_the_status_written_into_the_one_wanted(
    before: dict[str, Any], after: dict[str, Any]
) -> None:
    patch = status_diff(before, after)
    assert merged_status(before, patch) == after
    assert (patch == {}) == (before == after)


def test_the_diff_names_only_what_changed_and_nulls_what_went() -> None:
    before = {"uid": "u", "formRef": {"kind": "Bucket", "schemaDigest": "d1"}, "attempt": 0}
    after = {"uid": "u", "formRef": {"kind": "Bucket", "schemaDigest": "d2"}, "generation": "1"}
    assert status_diff(before, after) == {
        "attempt": None,
        "formRef": {"schemaDigest": "d2"},
        "generation": "1",
    }


# -- the two rules of the held write, through reconcile_and_persist ------------------------------


class Host:
    """A host as the reconcile sees it through its port: mutations are accepted running, under
    the key they carry (a repeated key answers the ORIGINAL operation, H-28), and commit only
    when the test says so (`commit`). Every request is noted in `calls`."""

    def __init__(self) -> None:
        self.operations: dict[str, tuple[Action, OperationView]] = {}
        self.resources: dict[str, ResourceView] = {}
        self.calls: list[str] = []
        #: Commit right after answering the request numbered so (1: the first of a look).
        self.commit_after: int | None = None
        self._uids = itertools.count(1)

    def _answered(self, call: str) -> None:
        self.calls.append(call)
        if len(self.calls) == self.commit_after:
            self.commit()

    async def get_operation(self, operation_id: str) -> OperationView:
        found = self.operations.get(operation_id)
        self._answered(f"get_operation {operation_id}")
        return found[1] if found is not None else OperationView(OpState.NOT_FOUND)

    async def read(self, target: Target) -> ResourceView | None:
        found = self.resources.get(target.name)
        self._answered(f"read {target.name}")
        return found

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        found = [(i, op) for i, (_, op) in self.operations.items() if op.name == target.name]
        self._answered(f"list_operations {target.name}")
        return found

    async def execute(self, action: Action) -> tuple[str, OperationView]:
        answer = self._execute(action)
        self._answered(f"{action.verb} {action.target.name}")
        return answer

    def _execute(self, action: Action) -> tuple[str, OperationView]:
        for operation_id, (_, operation) in self.operations.items():
            if operation.idempotency_key == action.key:
                return operation_id, operation
        uid = f"u-{next(self._uids)}" if isinstance(action, Create) else action.expected_uid
        target = action.target
        operation = OperationView(
            OpState.RUNNING,
            uid,
            idempotency_key=action.key,
            verb=action.verb,
            space=target.space,
            form_ref=target.form_ref,
            name=target.name,
        )
        operation_id = f"op-{len(self.operations) + 1}"
        self.operations[operation_id] = (action, operation)
        return operation_id, operation

    def commit(self) -> None:
        """Every running operation settles: what it asked for is done."""
        for operation_id, (action, operation) in self.operations.items():
            if operation.state is not OpState.RUNNING:
                continue
            name, current = action.target.name, self.resources.get(action.target.name)
            if isinstance(action, Create):
                self.resources[name] = _representation(action, str(operation.resource_uid))
            elif isinstance(action, Update) and current is not None:
                generation = str(int(current.generation) + 1)
                self.resources[name] = dc_replace(
                    current, spec=action.spec, generation=generation, revision=generation
                )
            elif isinstance(action, Delete):
                self.resources.pop(name, None)
            settled = dc_replace(operation, state=OpState.SUCCEEDED)
            self.operations[operation_id] = (action, settled)


def _representation(create: Create, uid: str) -> ResourceView:
    target = create.target
    return ResourceView(
        target.form_ref,
        target.space,
        target.name,
        uid,
        generation="1",
        revision="1",
        spec=create.spec,
        creation_key=create.key,
    )


class Cluster(MemoryCr):
    """One CR as the API server holds it (every write a new resourceVersion), and one operator
    process looking at it as the handlers do: the status write a look held goes to the next."""

    def __init__(self, host: Host) -> None:
        super().__init__(cr_body())
        self.host = host
        self.bindings = MemoryBindings()
        self.steps = steps_over(self, OneHost(host), self.bindings)
        self.finalized = False

    @property
    def held(self) -> HeldStatus | None:
        memory = self.steps.memory.get(self.body["metadata"]["uid"])
        return memory.held if memory is not None else None

    def someone_writes(self) -> None:
        """Another writer (a label, an annotation, another controller): a new resourceVersion."""
        annotations = self.body["metadata"]["annotations"]
        annotations["example.com/touched"] = str(int(annotations.get("example.com/touched", 0)) + 1)
        self._written()

    def delete(self, policy: str = "Delete") -> None:
        """`kubectl delete`, the deletion policy set first (both writes of the CR)."""
        self.body["spec"]["deletionPolicy"] = policy
        self.body["metadata"]["deletionTimestamp"] = "2026-11-30T11:00:00Z"
        self.body["metadata"]["finalizers"] = ["takoform.io/finalizer"]
        self._written()

    def edit_parameters(self, **parameters: Any) -> None:
        spec = self.body["spec"]
        spec["parameters"] = {**spec["parameters"], **parameters}
        self.body["metadata"]["generation"] += 1
        self._written()

    async def look(self) -> Looked:
        self.host.calls.clear()
        looked = await self.steps.look(copy.deepcopy(self.body))
        if looked.outcome is not None and looked.outcome.finalized:
            self.finalized = True
        return looked


def held_operation(cluster: Cluster) -> str | None:
    """The operation whose pending write the last look held, if any."""
    return cluster.held.patch.get("pendingOperationId") if cluster.held is not None else None


async def _ready(cluster: Cluster) -> None:
    """Created and settled: the create held, committed, written Ready by the next look."""
    await cluster.look()
    cluster.host.commit()
    await cluster.look()
    assert cluster.status.get("uid") and "pendingOperationId" not in cluster.status


async def test_a_held_status_is_written_by_the_next_look_of_the_same_body() -> None:
    """The held write's purpose: nothing else wrote the CR, so the next look reconciles as if
    it had landed (it consults the operation) and writes it with its news, once."""
    cluster = Cluster(Host())
    await cluster.look()
    assert cluster.held is not None and cluster.status_writes == []
    cluster.host.commit()
    await cluster.look()
    assert cluster.host.calls == ["get_operation op-1", "read logs"]
    assert len(cluster.status_writes) == 1 and cluster.status["uid"] == "u-1"
    assert "pendingOperationId" not in cluster.status


async def test_a_held_status_never_applies_to_a_body_written_since() -> None:
    """Rule 1 of the held write: it was made for one body (its resourceVersion). Once anyone
    wrote the CR, the next look reconciles what the API server holds, not the held patch."""
    cluster = Cluster(Host())
    await cluster.look()
    assert cluster.held is not None
    cluster.someone_writes()
    await cluster.look()
    assert "get_operation op-1" not in cluster.host.calls, "the held patch was applied"


async def test_an_update_is_never_held_twice_in_a_row() -> None:
    """Rule 2 of the held write: at most once per operation. Its first look held the update's
    pending write; something else wrote the CR, so the next look replayed the update's key
    and got the same operation back: that look writes it, so the pending operation shows in
    the status within one look whatever else writes the CR (issue 37: 20 looks, 20 replays,
    never in the status)."""
    cluster = Cluster(Host())
    await _ready(cluster)
    cluster.edit_parameters(sizeGiB=20)
    await cluster.look()
    assert held_operation(cluster) == "op-2"
    assert "pendingOperationId" not in cluster.status
    cluster.someone_writes()
    await cluster.look()
    assert cluster.host.calls[-1] == "Update logs", "the key replayed, as the rule's premise"
    assert cluster.held is None, "held twice in a row for op-2"
    assert cluster.status["pendingOperationId"] == "op-2"


@pytest.mark.parametrize("verb", ["create", "update"])
async def test_whatever_writes_the_cr_the_pending_operation_shows_within_one_look(
    verb: str,
) -> None:
    """A write by someone else before every look: the pending write is held by the look that
    sent the mutation and in the status after the next one, never held again."""
    cluster = Cluster(Host())
    if verb == "update":
        await _ready(cluster)
        cluster.edit_parameters(sizeGiB=20)
    holds: list[str | None] = []
    for _ in range(5):
        await cluster.look()
        holds.append(held_operation(cluster))
        cluster.someone_writes()
    pending = "op-2" if verb == "update" else "op-1"
    assert holds == [pending, None, None, None, None]
    assert cluster.status["pendingOperationId"] == pending
    assert len(cluster.host.operations) == (2 if verb == "update" else 1), "no second operation"


# -- deletions and looks inside the window: the operations consulted before the read -----------


async def test_a_deletion_inside_the_window_consults_the_operations_before_the_read() -> None:
    """0017 rule 7: "the operation is consulted first". The CR is deleted while its create's
    pending write is held (the deletion is a write: the held patch is dropped), so the status
    knows no operation; the host's listing of the name stands in for it, before the read."""
    cluster = Cluster(Host())
    await cluster.look()
    cluster.delete()
    await cluster.look()
    assert cluster.host.calls == ["list_operations logs", "read logs"]
    assert not cluster.finalized, "an accepted create of ours is never orphaned"
    assert cluster.status["pendingOperationId"] == "op-1"


@pytest.mark.parametrize("commit_after", [1, 2], ids=["after-1st-request", "after-2nd-request"])
async def test_a_create_committing_between_the_deletions_requests_is_deleted_not_orphaned(
    commit_after: int,
) -> None:
    """Issue 37: the create commits between two requests of the deletion's look. Before, the
    deletion read (absent: not committed yet), then listed (the create succeeded: not running,
    so not counted), concluded "nothing was created" and let go: the resource stayed on the
    host with no owner. Now whatever the host commits in between, the resource is deleted."""
    host = Host()
    cluster = Cluster(host)
    await cluster.look()
    cluster.delete()
    host.commit_after = commit_after
    await cluster.look()
    host.commit_after = None
    for _ in range(4):
        if cluster.finalized:
            break
        host.commit()
        await cluster.look()
    assert cluster.finalized
    assert host.resources == {}, "orphaned: the resource stayed with no owner"
    assert [str(a.verb) for a, _ in host.operations.values()] == ["Create", "Delete"]


async def test_a_dropped_held_write_keeps_the_incarnation_the_202_named() -> None:
    """The held write dropped (someone wrote the CR), the create committed, and the resource
    was replaced by another client's incarnation: the create the status lacks is read from the
    host's operations, so the look sees another uid than the one its create made: Blocked
    UidMismatch, as if the write had landed (before: NameTaken, the incarnation forgotten)."""
    host = Host()
    cluster = Cluster(host)
    await cluster.look()
    host.commit()
    ours = host.resources["logs"]
    host.resources["logs"] = dc_replace(ours, uid="u-other", creation_key="someone:create:0")
    cluster.someone_writes()
    outcome = (await cluster.look()).outcome
    assert outcome is not None
    assert outcome.asserted().get(ConditionType.BLOCKED) is Reason.UID_MISMATCH
    assert cluster.status["uid"] == ours.uid


async def test_an_orphan_deletion_inside_the_window_releases_the_incarnation_it_created() -> None:
    """Orphan lets the CR go without a mutation; inside the window it first reads the host's
    operations (no mutation), so the Released binding remembers the uid the create named,
    not `uid: null`: whoever takes it over later is checked against that incarnation."""
    cluster = Cluster(Host())
    await cluster.look()
    cluster.delete(policy="Orphan")
    await cluster.look()
    assert cluster.finalized
    (binding,) = cluster.bindings.objects.values()
    assert binding.phase is Phase.RELEASED
    assert binding.uid == "u-1"


def _deep_size(value: object) -> int:
    """The bytes `value` keeps alive: itself and everything it refers to, once each."""
    seen: set[int] = set()
    pending, total = [value], 0
    while pending:
        item = pending.pop()
        if id(item) in seen or isinstance(item, type):
            continue
        seen.add(id(item))
        total += sys.getsizeof(item)
        pending.extend(gc.get_referents(item))
    return total


async def test_a_held_write_is_kept_small_whatever_the_patch() -> None:
    """In a backlog most CRs hold a write at once, between their first look and their second:
    each is one packed patch, not the tens of dicts and strings the patch is made of."""
    cluster = Cluster(Host())
    await cluster.look()
    held = cluster.held
    assert held is not None and held.patch.get("pendingOperationId")
    patch_size = _deep_size(held.patch)
    assert _deep_size(held) < 600 < patch_size, (_deep_size(held), patch_size)
