"""The one place an outcome becomes the time of the next look (core.backoff.next_delay), and
when a CR a process takes on is first looked at (core.backoff.FirstLooks)."""

from __future__ import annotations

from typing import Any

import pytest

from takoform_operator.core.backoff import PACE_SHARE, FirstLooks, idle_delay, next_delay, settled
from takoform_operator.core.outcome import NextLook, Outcome
from takoform_operator.core.state import State
from takoform_operator.settings import Settings

SETTINGS = Settings(poll_ready_seconds=60.0)
FINALIZER = "takoform.io/finalizer"


def _asking(next_look: NextLook) -> Outcome:
    return Outcome(State(), (), next_look)


def test_a_pending_operation_is_looked_at_fast_first_then_slower() -> None:
    looks = [next_delay(_asking(NextLook.PENDING), SETTINGS, n) for n in range(7)]
    assert looks == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    faster = Settings(poll_pending_max_seconds=2.0)
    assert [next_delay(_asking(NextLook.PENDING), faster, n) for n in range(5)] == [
        0.25, 0.5, 1.0, 2.0, 2.0
    ]  # fmt: skip


def test_an_operation_pending_for_hours_is_still_looked_at() -> None:
    # 2**1024 no longer fits a float: a host operation (or a host resource not ready) looked at
    # that many times in a row (about 34 minutes at a 2 s cap) must not end the CR's loop.
    for looks in (1023, 1024, 100_000):
        assert next_delay(_asking(NextLook.PENDING), SETTINGS, looks) == 8.0


def test_other_delays_are_kept_within_bounds() -> None:
    assert next_delay(_asking(NextLook.POLL), SETTINGS) == 60.0, "the ready poll"
    assert next_delay(_asking(NextLook.NEVER), SETTINGS) == 60.0, "a finished CR still around"
    assert next_delay(_asking(NextLook.NOW), SETTINGS) == 0.2, "at once, but never a busy loop"
    assert next_delay(_asking(NextLook.BACKOFF), SETTINGS, jitter=lambda: 0.0) == 0.2, "back-off"
    fast_poll = Settings(poll_ready_seconds=1.0)
    assert next_delay(_asking(NextLook.PENDING), fast_poll, 5) == 1.0, "never later than the poll"


# -- an idle CR is polled less and less often ------------------------------------------------


def test_each_steady_look_doubles_the_poll_up_to_the_idle_ceiling() -> None:
    polls = [next_delay(_asking(NextLook.POLL), SETTINGS, steady_looks=n) for n in range(7)]
    assert polls == [60.0, 120.0, 240.0, 480.0, 600.0, 600.0, 600.0]
    # 6 host reads an hour per idle CR instead of 60 (at 10,000 s and beyond: still 600 s).
    assert next_delay(_asking(NextLook.POLL), SETTINGS, steady_looks=100_000) == 600.0


@pytest.mark.parametrize(
    ("poll", "ceiling", "why"),
    [
        (60.0, 60.0, "a ceiling at the poll: today's fixed poll"),
        (600.0, 60.0, "a ceiling below the poll never shortens it"),
    ],
)
def test_a_ceiling_at_or_below_the_poll_keeps_every_poll_at_the_poll(
    poll: float, ceiling: float, why: str
) -> None:
    fixed = Settings(poll_ready_seconds=poll, poll_idle_max_seconds=ceiling)
    polls = {next_delay(_asking(NextLook.POLL), fixed, steady_looks=n) for n in range(5)}
    assert polls == {poll}, why


@pytest.mark.parametrize("draw", [0.0, 0.3, 0.999999])
@pytest.mark.parametrize("steady", [1, 2, 3, 4, 40])
def test_the_idle_jitter_stays_within_the_last_fifth_and_never_beyond_the_ceiling(
    draw: float, steady: int
) -> None:
    longest = min(600.0, 60.0 * 2**steady)
    delay = idle_delay(steady, base=60.0, ceiling=600.0, random=lambda: draw)
    assert 0.8 * longest <= delay <= longest <= 600.0


def test_the_first_poll_after_a_change_is_not_jittered() -> None:
    # A change restarts the sequence at exactly the ready poll, whatever the random source says.
    assert idle_delay(0, base=60.0, ceiling=600.0, random=lambda: 0.0) == 60.0


# -- the first look of a CR taken on: at once if it needs work, else spread -------------------


def _ready_body(**changes: Any) -> dict[str, Any]:
    metadata = {"generation": 3, "finalizers": [FINALIZER], **changes.pop("metadata", {})}
    status = {
        "observedGeneration": 3,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Available"}],
        **changes.pop("status", {}),
    }
    return {"metadata": metadata, "status": status, **changes}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ({"metadata": {"generation": 1}}, "new: no status yet"),
        (_ready_body(metadata={"generation": 4}), "generation changed since the status"),
        (
            _ready_body(status={"conditions": [{"type": "Ready", "status": "False"}]}),
            "not Ready",
        ),
        (_ready_body(status={"conditions": []}), "no conditions"),
        (_ready_body(metadata={"deletionTimestamp": "2026-12-04T00:00:00Z"}), "deleting"),
        (_ready_body(metadata={"finalizers": []}), "our finalizer is missing"),
        (_ready_body(status={"pendingOperationId": "op-1"}), "an operation is pending"),
        (_ready_body(status={"conditions": "Ready"}), "conditions of the wrong type"),
        ({"metadata": [], "status": "Ready"}, "a body of the wrong shape"),
    ],
)
def test_a_cr_that_needs_work_is_looked_at_at_once(body: dict[str, Any], why: str) -> None:
    assert not settled(body, FINALIZER), why
    assert _first_looks(30.0, None, draw=0.9).delay(body, now=0.0) == 0.0
    assert _first_looks(30.0, 4.0).delay(body, now=0.0) == 0.0, "never paced either"


def test_a_ready_cr_is_spread_uniformly_over_the_window_and_zero_turns_the_spread_off() -> None:
    body = _ready_body()
    assert settled(body, FINALIZER)
    spread = [_first_looks(30.0, None, draw=d).delay(body, now=0.0) for d in (0.0, 0.5, 0.999999)]
    assert spread == pytest.approx([0.0, 15.0, 30.0], abs=1e-4)
    assert _first_looks(0.0, None).delay(body, now=0.0) == 0.0


def _first_looks(spread: float, rate: float | None, draw: float = 0.5) -> FirstLooks:
    return FirstLooks(spread, rate, lambda: draw, FINALIZER)


def test_first_looks_paced_at_the_budget_rate_come_one_after_the_other() -> None:
    # Listed together, wherever the spread would have drawn them (or with none): one after the
    # other, in the order they came, a little under the budget's rate (4 a second).
    gap = 1 / (4.0 * PACE_SHARE)
    for spread in (30.0, 0.0):
        pace = _first_looks(spread, rate=4.0, draw=0.9)
        ready = _ready_body()
        assert [pace.delay(ready, now=100.0) for _ in range(3)] == pytest.approx([0, gap, 2 * gap])
        assert pace.delay(ready, now=100.5) == pytest.approx(3 * gap - 0.5), "after the last one"
        assert pace.delay(ready, now=200.0) == 0.0, "none due: at once"
    assert 0.25 < gap < 0.3
