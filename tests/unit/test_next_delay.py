"""The one place an outcome becomes the time of the next look (kube.cr_step.next_delay)."""

from __future__ import annotations

from takoform_operator.core.outcome import NextLook, Outcome
from takoform_operator.core.state import State
from takoform_operator.kube.cr_step import next_delay
from takoform_operator.settings import Settings

SETTINGS = Settings(poll_ready_seconds=60.0)


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
