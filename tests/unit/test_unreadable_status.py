"""A CR status the operator cannot read (edited by hand, restored from an old backup) is a
condition, never an exception: Blocked StateUnreadable with its remedies, Ready no longer True,
nothing sent to the host, and the recorded fields left as they are for a restore. Driven through
kube.cr_step.CrSteps.look, the look the kopf handlers and the model checker run,
over in-memory bindings and a host that records every call."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Mapping
from typing import Any

import pytest
from builders import BUCKET_REF, bound, cr_body, desired
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from looks import MemoryCr, steps_over
from memory_bindings import MemoryBindings
from one_host import OneHost

from takoform_operator.core.actions import Action, Target
from takoform_operator.core.binding import Binding, ClaimRef, Identity, Phase
from takoform_operator.core.conditions import Condition, ConditionType, Reason
from takoform_operator.core.state import (
    DEFAULT_HOST,
    OperationView,
    OpState,
    Requested,
    ResourceView,
    state_from_status,
    state_to_status,
)
from takoform_operator.kube.cr_step import Looked
from takoform_operator.kube.crs import merged_status

CR_UID = "cr-1"
#: The fields of the status that hold the state (core.state.state_to_status), plus the ones
#: written beside it.
STATE_KEYS = tuple(state_to_status(bound()))
STATUS_KEYS = (*STATE_KEYS, "conditions", "observedGeneration", "remedies")
WRITTEN_BESIDE_THE_STATE = {"conditions", "observedGeneration", "remedies"}


class RecordingHost:
    """A host that holds nothing and accepts every mutation (HostPort), recording each call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def get_operation(self, operation_id: str) -> OperationView:
        self.calls.append(f"get_operation {operation_id}")
        return OperationView(OpState.NOT_FOUND)

    async def read(self, target: Target) -> ResourceView | None:
        self.calls.append(f"read {target.name}")
        return None

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        self.calls.append(f"list_operations {target.name}")
        return []

    async def execute(self, action: Action) -> tuple[str, OperationView]:
        self.calls.append(f"{action.verb} {action.target.name}")
        target = action.target
        running = OperationView(
            OpState.RUNNING,
            "uid-new",
            idempotency_key=action.key,
            verb=action.verb,
            space=target.space,
            form_ref=target.form_ref,
            name=target.name,
        )
        return "op-new", running


def _bound_status() -> dict[str, Any]:
    """A status as the operator writes it for a Ready Bucket (nulls are no members)."""
    written = {k: v for k, v in state_to_status(bound()).items() if v is not None}
    ready = {"type": "Ready", "status": "True", "reason": "Available", "message": "up to date"}
    return {**written, "conditions": [ready], "observedGeneration": 1}


def _our_binding() -> Binding:
    """The TakoformBinding of the bound Bucket, held by the CR under test."""
    identity = Identity("team-a", BUCKET_REF.line, "logs", DEFAULT_HOST)
    return Binding(
        identity,
        Phase.BOUND,
        ClaimRef("demo", "logs", CR_UID),
        form_ref=BUCKET_REF,
        requested=Requested.of(desired()),
        uid="u-1",
    )


def _look(
    status: Mapping[str, Any],
    *,
    deleting: bool = False,
    bindings: MemoryBindings | None = None,
    host: RecordingHost | None = None,
    **spec: Any,
) -> tuple[Looked, dict[str, Any]]:
    """One look at the Bucket `logs` with `status`, as the handlers run it, and the status it
    leaves: its write, or the write it holds for the next look."""
    body = cr_body(status=dict(status), deleting=deleting, **spec)
    cr = MemoryCr(body)
    steps = steps_over(cr, OneHost(host or RecordingHost()), bindings)
    looked = asyncio.run(steps.look(copy.deepcopy(cr.body)))
    memory = steps.memory.get(body["metadata"]["uid"])
    held = memory.held.patch if memory is not None and memory.held is not None else {}
    return looked, merged_status(cr.status, held)


def _conditions(status: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {c["type"]: c for c in status.get("conditions") or ()}


def _unreadable(status: Mapping[str, Any]) -> bool:
    try:
        state_from_status(status)
    except Exception:  # the test's question is only whether it reads; the reconcile's is how
        return True
    return False


def _assert_a_valid_condition_set(status: Mapping[str, Any]) -> None:
    """Every condition of the closed set, once, True or False, with a reason the operator
    writes on that type (core.conditions.Condition enforces the table)."""
    conditions = status.get("conditions")
    assert isinstance(conditions, list), conditions
    types = [c["type"] for c in conditions]
    assert len(types) == len(set(types)), types
    for condition in conditions:
        assert condition["status"] in ("True", "False"), condition
        Condition(
            ConditionType(condition["type"]),
            condition["status"] == "True",
            Reason(condition["reason"]),
            condition["message"],
        )


def _assert_blocked_unreadable(status: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    conditions = _conditions(after)
    blocked = conditions["Blocked"]
    assert (blocked["status"], blocked["reason"]) == ("True", "StateUnreadable"), blocked
    assert conditions["Ready"]["status"] == "False", "a stale Ready must not stay True"
    # The recorded fields stay as they were: they are what a restore starts from.
    for key in set(status) - WRITTEN_BESIDE_THE_STATE:
        assert after.get(key) == status[key], key


# -- examples ------------------------------------------------------------------------------------


def test_a_partial_form_ref_blocks_the_cr_instead_of_raising() -> None:
    status = {**_bound_status(), "formRef": {"kind": "X"}}
    host = RecordingHost()
    _, after = _look(status, host=host)
    _assert_blocked_unreadable(status, after)
    _assert_a_valid_condition_set(after)
    assert host.calls == []
    does = [remedy["does"] for remedy in after["remedies"]]
    assert any("restore the status" in text for text in does), does
    commands = [remedy.get("command", "") for remedy in after["remedies"]]
    assert "kubectl edit buckets.storage.takoform.io/logs -n demo --subresource=status" in commands
    assert "Remedies:" in _conditions(after)["Blocked"]["message"]


def test_a_pending_operation_without_a_form_ref_blocks_and_sends_nothing() -> None:
    status = {"pendingOperationId": "op-7", "pendingOperationVerb": "Create"}
    host = RecordingHost()
    _, after = _look(status, host=host)
    _assert_blocked_unreadable(status, after)
    assert host.calls == []


@pytest.mark.parametrize(
    ("key", "value"),
    [("host", ["default"]), ("uid", 7), ("generation", 1), ("space", None), ("name", None)],
    ids=["host a list", "uid a number", "generation a number", "no space", "no name"],
)
def test_a_field_the_operator_never_writes_so_blocks_and_sends_nothing(
    key: str, value: object
) -> None:
    status = {k: v for k, v in {**_bound_status(), key: value}.items() if v is not None}
    host = RecordingHost()
    _, after = _look(status, host=host)
    _assert_blocked_unreadable(status, after)
    assert key in _conditions(after)["Blocked"]["message"]
    assert host.calls == []


def test_a_deleting_cr_with_an_unreadable_status_stays_blocked() -> None:
    # The status may have recorded a resource: the CR is never let go on a guess.
    status = {**_bound_status(), "requested": {"name": "logs"}}
    bindings = MemoryBindings()
    bindings.objects[_our_binding().name] = _our_binding()
    host = RecordingHost()
    looked, after = _look(status, deleting=True, bindings=bindings, host=host)
    assert not looked.outcome.finalized
    _assert_blocked_unreadable(status, after)
    assert _conditions(after)["Deleting"]["status"] == "True"
    assert host.calls == [] and bindings.writes == []
    commands = [remedy.get("command", "") for remedy in after["remedies"]]
    assert any("deletionPolicy" in command for command in commands), commands


def test_an_orphan_deletion_with_an_unreadable_status_lets_go_without_a_host_call() -> None:
    # deletionPolicy Orphan sends nothing whatever the status says: the CR goes, its binding
    # Released for an import to take over.
    status = {**_bound_status(), "attempt": "many"}
    bindings = MemoryBindings()
    bindings.objects[_our_binding().name] = _our_binding()
    host = RecordingHost()
    looked, _ = _look(status, deleting=True, bindings=bindings, host=host, deletionPolicy="Orphan")
    assert looked.outcome is not None and looked.outcome.finalized and looked.wrote is None
    assert host.calls == []
    (released,) = bindings.objects.values()
    assert released.phase is Phase.RELEASED and released.uid == "u-1"


# -- properties ----------------------------------------------------------------------------------

_HUGE_TEXT = st.integers(min_value=60_000, max_value=70_000).map(lambda size: "x" * size)
_ODD_TEXT = _HUGE_TEXT | st.sampled_from(
    [
        "",
        " ",
        "\x00",
        "\u202egnp.exe",
        "Create",
        "Explode",
        "True",
        "Available",
        "StateUnreadable",
        "1.0.0",
        "sha256:" + "0" * 64,
        "storage.takoform.io/v1",
        "Bucket",
        "-1",
    ]
)
_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=8)
    | _ODD_TEXT
)
_KEYS = (
    st.sampled_from(STATUS_KEYS)
    | st.sampled_from(tuple(BUCKET_REF.to_json()))
    | st.text(max_size=6)
)
_JSON = st.recursive(
    _SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_KEYS, inner, max_size=4),
    max_leaves=16,
)
_CONDITION = st.fixed_dictionaries(
    {
        "type": st.sampled_from([str(t) for t in ConditionType]) | _JSON,
        "status": st.sampled_from(["True", "False", "Unknown"]) | _JSON,
        "reason": st.sampled_from([str(r) for r in Reason]) | _JSON,
    },
    optional={"message": _JSON, "lastTransitionTime": _JSON, "observedGeneration": _JSON},
)
_FORM_REF = st.dictionaries(
    st.sampled_from(tuple(BUCKET_REF.to_json())),
    st.sampled_from(tuple(BUCKET_REF.to_json().values())) | _JSON,
    max_size=4,
)


def _one_field_broken(value: Any, key: str) -> dict[str, Any]:
    return {**_bound_status(), key: value}


_STATUSES = st.one_of(
    # JSON-ish garbage under the status' own keys and others.
    st.dictionaries(_KEYS, _JSON, max_size=6),
    # A formRef with some members, some of them wrong; a pending operation beside it or alone.
    st.fixed_dictionaries(
        {},
        optional={
            "formRef": _FORM_REF,
            "pendingOperationId": _SCALARS,
            "pendingOperationVerb": _SCALARS,
        },
    ),
    # A status the operator wrote, with one field replaced by anything, or one field dropped.
    st.builds(_one_field_broken, _JSON, st.sampled_from(STATUS_KEYS)),
    st.sampled_from(STATUS_KEYS).map(
        lambda key: {k: v for k, v in _bound_status().items() if k != key}
    ),
    # Conditions that are anything at all, beside a state that reads.
    st.lists(_CONDITION | _JSON, max_size=4).map(
        lambda conditions: {**_bound_status(), "conditions": conditions}
    ),
)

_PROPERTY = settings(
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.large_base_example],
)


@_PROPERTY
@given(
    status=_STATUSES,
    deleting=st.booleans(),
    policy=st.sampled_from(["Delete", "Orphan"]),
    held=st.booleans(),
)
def test_no_status_makes_a_look_raise_or_write_a_condition_outside_the_set(
    status: dict[str, Any], deleting: bool, policy: str, held: bool
) -> None:
    bindings = MemoryBindings()
    if held:
        bindings.objects[_our_binding().name] = _our_binding()
    host = RecordingHost()
    looked, after = _look(
        status, deleting=deleting, bindings=bindings, host=host, deletionPolicy=policy
    )
    outcome = looked.outcome
    if outcome.finalized:
        assert deleting, "only a deletion lets a CR go"
    else:
        _assert_a_valid_condition_set(after)
    if _unreadable(status):
        assert host.calls == [], "nothing is sent for a status that does not read"
        if outcome.finalized:
            assert policy == "Orphan", "an unreadable status is never let go on a guess"
        else:
            _assert_blocked_unreadable(status, after)


def test_conditions_the_operator_never_writes_are_dropped_not_carried() -> None:
    # A paused CR keeps its conditions as they were: only those the operator could have written.
    hand_made = {"type": "Drifted", "status": "True", "reason": "LooksFine"}
    ready = _bound_status()["conditions"][0]
    status = {**_bound_status(), "conditions": [hand_made, "Ready", ready, {"type": 5}]}
    _, after = _look(status, annotations={"takoform.io/paused": "true"})
    _assert_a_valid_condition_set(after)
    assert _conditions(after)["Ready"] == ready
    assert "Drifted" not in _conditions(after)
