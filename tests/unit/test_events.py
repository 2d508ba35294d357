"""Which of the core's events become Kubernetes Events (kube.events.to_post): each
once -- a Warning stating a condition goes with that condition's transition, any other with the
status write that records what it reports."""

from __future__ import annotations

from takoform_operator.core.conditions import Condition, ConditionType, Reason
from takoform_operator.core.outcome import Event, NextLook, Outcome, degraded, unavailable
from takoform_operator.core.state import State
from takoform_operator.kube.events import to_post

FAILED = Event("Warning", Reason.OPERATION_FAILED, "create operation op-1 failed (x): y")


def _drifted_after_a_failed_create() -> Outcome:
    gone = Condition(ConditionType.DRIFTED, True, Reason.RESOURCE_DELETED, "gone")
    return Outcome(State(), (gone,), NextLook.NOW, events=(FAILED,))


def test_a_warning_that_is_no_condition_is_posted_with_the_write() -> None:
    assert to_post(_drifted_after_a_failed_create(), {}, {}) == [FAILED]
    assert to_post(_drifted_after_a_failed_create(), {}, None) == []


def test_a_warning_stating_a_condition_is_left_to_the_transition() -> None:
    outage = unavailable(State(), "host unavailable while reading: refused", 1.0)
    assert to_post(outage, {}, {}) == []
    failed = degraded(State(), Reason.OPERATION_FAILED, "failed", 30.0)
    assert to_post(failed, {}, {}) == []


def test_normal_events_are_posted_except_the_quiet_ones() -> None:
    imported = Event("Normal", Reason.IMPORTED, "imported")
    accepted = Event("Normal", Reason.CREATE_PENDING, "Create accepted as op-1")
    outcome = Outcome(State(), (), 0.0, events=(imported, accepted))
    assert to_post(outcome, {}, None) == [imported]
