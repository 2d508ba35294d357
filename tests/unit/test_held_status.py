"""The status write held until the next look: which outcomes may wait (core), and the patch that
later writes a held status together with the next look's news (kube.crs.status_diff)."""

from __future__ import annotations

from typing import Any

import pytest
from builders import REGISTRY, desired
from core_steps import decided
from hypothesis import given
from hypothesis import strategies as st

from takoform_operator.core.decide import Decision, Observation
from takoform_operator.core.host_answer import accepted
from takoform_operator.core.state import OperationView, OpState, State
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
