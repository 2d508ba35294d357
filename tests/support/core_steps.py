"""The pure core's steps of one reconcile, for unit tests of the rules behind it: the target
claimed as a fresh binding records it (core.ownership), then the plan (core.plan)."""

from __future__ import annotations

from takoform_operator.core.decide import Decision, Observation, decide
from takoform_operator.core.outcome import Outcome
from takoform_operator.core.ownership import claimed
from takoform_operator.core.plan import Plan, plan, target_of
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import Desired, State


def planned(want: Desired, state: State, registry: Registry) -> tuple[State, Plan | Outcome]:
    """The state a CR goes on with (its target claimed, as by a binding nobody else holds) and
    what the plan says for it."""
    target = target_of(want, state, registry)
    if isinstance(target, Outcome):
        return state, target
    state = claimed(state, target, want)
    return state, plan(want, state, registry)


def decided(want: Desired, state: State, seen: Observation, registry: Registry) -> Decision:
    """planned(), then decide on what was seen."""
    state, step = planned(want, state, registry)
    assert isinstance(step, Plan), step
    return decide(want, state, step, seen, registry)
