"""Back-off after failures (core.backoff) and how the one failure path applies it
(kube.cr_step.CrSteps.next_look): growth, cap, jitter bounds, Retry-After, reset on success;
and the idle poll's steady looks, reset by any change."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from takoform_operator.core.backoff import backoff_delay, next_delay
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.outcome import NextLook, Outcome, degraded, put_off, unavailable
from takoform_operator.core.state import State
from takoform_operator.kube.cr_step import FINALIZER, CrSteps
from takoform_operator.kube.handlers import WATCHED_ANNOTATIONS
from takoform_operator.kube.loops import ReconcileLoops
from takoform_operator.settings import Settings


def _top() -> float:
    """The largest value a random source in [0, 1) can give, near enough."""
    return 0.999999


def test_the_ceiling_doubles_with_every_failure_up_to_the_cap() -> None:
    delays = [backoff_delay(n, base=0.5, cap=10.0, random=_top) for n in range(8)]
    expected = [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0]
    assert delays == pytest.approx([e * _top() for e in expected])


def test_full_jitter_spans_zero_to_the_ceiling() -> None:
    assert backoff_delay(3, base=1.0, cap=60.0, random=lambda: 0.0) == 0.0
    assert backoff_delay(3, base=1.0, cap=60.0, random=lambda: 0.5) == 4.0


@given(
    failures=st.integers(min_value=0, max_value=10_000),
    base=st.floats(min_value=0.01, max_value=10.0),
    cap=st.floats(min_value=10.0, max_value=3600.0),
    draw=st.floats(min_value=0.0, max_value=0.999999),
)
def test_a_delay_is_never_negative_nor_beyond_the_cap_nor_the_ceiling(
    failures: int, base: float, cap: float, draw: float
) -> None:
    delay = backoff_delay(failures, base=base, cap=cap, random=lambda: draw)
    assert 0.0 <= delay <= min(cap, base * 2.0 ** min(failures, 62))


def test_retry_after_is_a_lower_bound_itself_capped() -> None:
    low = lambda: 0.0  # noqa: E731 - the jitter's smallest draw
    assert backoff_delay(0, base=1.0, cap=60.0, random=low, retry_after=7.0) == 7.0
    assert backoff_delay(0, base=1.0, cap=60.0, random=low, retry_after=3600.0) == 60.0
    # A longer jittered delay wins over a short Retry-After.
    assert backoff_delay(5, base=1.0, cap=60.0, random=lambda: 0.5, retry_after=1.0) == 16.0


def test_jitter_spreads_crs_that_failed_together() -> None:
    source = random.Random(12).random
    delays = {round(backoff_delay(4, base=1.0, cap=60.0, random=source), 6) for _ in range(50)}
    assert len(delays) == 50 and max(delays) < 16.0


# -- applied by the one failure path -------------------------------------------------------


SETTINGS = Settings(poll_ready_seconds=60.0, backoff_base_seconds=1.0, backoff_cap_seconds=40.0)


def _runtime() -> CrSteps:
    """Only the delays of the looks (no reconcile is run here)."""
    nothing = None
    return CrSteps(nothing, nothing, nothing, nothing, SETTINGS, str, random=_top)  # type: ignore[arg-type]


def _failure(retry_after: float | None = None) -> Outcome:
    return unavailable(State(), "host unavailable while reading: connection refused", retry_after)


def _ready() -> Outcome:
    return Outcome(State(), (), NextLook.POLL)


def test_failures_in_a_row_grow_the_delay_and_a_success_resets_it() -> None:
    runtime = _runtime()
    grown = [runtime.next_look("cr-1", _failure()) for _ in range(7)]
    assert grown == pytest.approx([x * _top() for x in (1, 2, 4, 8, 16, 32, 40)])
    assert runtime.next_look("cr-1", _ready()) == 60.0
    assert runtime.next_look("cr-1", _failure()) == pytest.approx(_top()), "counted from zero"


def test_every_retry_path_backs_off() -> None:
    """Host unavailable, host refused, a failed operation, a lost status write (no outcome)."""
    refused = degraded(State(), Reason.HOST_REJECTED, "form_unknown", NextLook.BACKOFF)
    operation = degraded(State(), Reason.OPERATION_FAILED, "failed", NextLook.BACKOFF)
    for outcome in (_failure(), refused, operation, None):
        runtime = _runtime()
        first, second = (runtime.next_look("cr", outcome) for _ in range(2))
        assert (first, second) == pytest.approx((_top(), 2 * _top())), outcome
    assert next_delay(refused, SETTINGS, failures=10, jitter=_top) == pytest.approx(40 * _top())


def test_a_look_put_off_by_the_budget_backs_off_no_sooner_than_its_token() -> None:
    # A busy namespace's looks come back ever later, not all at once for its next token.
    runtime = _runtime()
    put = put_off(State(), 3.0)
    assert [runtime.next_look("cr", put) for _ in range(4)] == pytest.approx(
        [3.0, 3.0, 4 * _top(), 8 * _top()]
    )
    assert next_delay(put_off(State(), 0.01), SETTINGS, jitter=lambda: 0.0) == 0.2


def test_the_backoff_is_per_cr() -> None:
    runtime = _runtime()
    for _ in range(4):
        runtime.next_look("a", _failure())
    assert runtime.next_look("b", _failure()) == pytest.approx(_top())


def test_retry_after_of_the_host_is_honoured_and_capped() -> None:
    assert next_delay(_failure(retry_after=5.0), SETTINGS, jitter=lambda: 0.0) == 5.0
    assert next_delay(_failure(retry_after=900.0), SETTINGS, jitter=lambda: 0.0) == 40.0


def test_an_outage_keeps_the_last_known_conditions_and_asserts_degraded() -> None:
    outcome = _failure()
    assert outcome.keeps_last_known
    assert outcome.asserted() == {ConditionType.DEGRADED: Reason.HOST_UNAVAILABLE}


def test_pending_operations_keep_the_fast_to_slow_poll() -> None:
    runtime = _runtime()
    pending = Outcome(State(), (), NextLook.PENDING)
    looks = [runtime.next_look("cr", pending) for _ in range(7)]
    assert looks == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 8.0]


def test_a_cr_goes_on_while_it_waits_on_an_operation_or_backs_off_and_not_once_settled() -> None:
    # Its looks then go before the first looks queued in its namespace (kube.slots).
    runtime = _runtime()
    assert not runtime.going_on("cr"), "a CR new to this process has nothing in progress"
    runtime.next_look("cr", Outcome(State(), (), NextLook.PENDING))
    assert runtime.going_on("cr")
    runtime.next_look("cr", _ready())
    assert not runtime.going_on("cr")
    runtime.next_look("cr", _failure())
    assert runtime.going_on("cr")
    runtime.next_look("cr", _ready())
    assert not runtime.going_on("cr")


def test_a_cap_below_the_base_is_refused() -> None:
    with pytest.raises(ValueError, match="TAKOFORM_BACKOFF_CAP_SECONDS"):
        Settings(backoff_base_seconds=10.0, backoff_cap_seconds=1.0)


# -- the idle poll: steady looks in a row, reset by any change ---------------------------------

IDLE = Settings(poll_ready_seconds=60.0, poll_idle_max_seconds=600.0)


def _cr(generation: int = 1) -> dict[str, Any]:
    return {"metadata": {"uid": "cr", "generation": generation, "finalizers": [FINALIZER]}}


async def _idle_steps() -> tuple[CrSteps, ReconcileLoops]:
    """The looks of CR `cr`, which the loops know (seen once, looked at once), unjittered."""
    looked = asyncio.Event()

    async def run(_body: Mapping[str, Any]) -> float:
        looked.set()
        return 3600.0

    loops = ReconcileLoops(
        run, concurrency=1, watched_annotations=WATCHED_ANNOTATIONS, finalizer=FINALIZER
    )
    nothing = None
    steps = CrSteps(
        nothing, nothing, nothing, nothing, IDLE, str,  # type: ignore[arg-type]
        random=lambda: 1.0, changed=loops.take_change,
    )  # fmt: skip
    loops.seen("cr", _cr())
    await asyncio.wait_for(looked.wait(), 5.0)
    return steps, loops


async def test_steady_looks_double_the_poll_and_every_kind_of_change_starts_it_again() -> None:
    steps, loops = await _idle_steps()
    pending = Outcome(State(), (), NextLook.PENDING)
    # (what happened before the look, the look's outcome, the delay it gets, why)
    rows: list[tuple[Any, Outcome | None, float, str]] = [
        (None, _ready(), 60.0, "new to this process: from the base"),
        (None, _ready(), 120.0, "steady"),
        (None, _ready(), 240.0, "steady"),
        (lambda: loops.wrote("cr", _cr()), _ready(), 60.0, "a status write"),
        (None, _ready(), 120.0, "steady again"),
        (lambda: loops.seen("cr", _cr(2)), _ready(), 60.0, "a spec change"),
        (None, _ready(), 120.0, "steady"),
        (None, pending, 0.25, "an operation pending"),
        (None, _ready(), 120.0, "steady after it: counted from zero"),
        (None, _ready(), 240.0, "steady"),
        (None, None, 1.0, "a failure (no outcome)"),
        (None, _ready(), 120.0, "counted from zero"),
    ]
    for before, outcome, expected, why in rows:
        if before is not None:
            before()
        assert steps.next_look("cr", outcome) == pytest.approx(expected), why
    polls = [steps.next_look("cr", _ready()) for _ in range(4)]
    assert polls == [240.0, 480.0, 600.0, 600.0], "up to the ceiling"
    await loops.close()


async def test_without_a_loop_nothing_counts_as_steady() -> None:
    steps, loops = await _idle_steps()
    loops.stop("cr")  # its loop gone: nothing says the CR did not change
    assert {steps.next_look("cr", _ready()) for _ in range(3)} == {60.0}
