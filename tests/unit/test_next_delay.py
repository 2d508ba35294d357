"""The one place an outcome becomes the time of the next look (kube.handlers.next_delay)."""

from __future__ import annotations

from takoform_operator.core.outcome import POLL_PENDING, RETRY_LATER, RETRY_SOON, Outcome
from takoform_operator.core.state import State
from takoform_operator.kube.handlers import next_delay
from takoform_operator.settings import Settings

SETTINGS = Settings(poll_ready_seconds=60.0)


def _asking(delay: float | None) -> Outcome:
    return Outcome(State(), (), delay)


def test_a_pending_operation_is_looked_at_fast_first_then_slower() -> None:
    looks = [next_delay(_asking(POLL_PENDING), SETTINGS, n) for n in range(7)]
    assert looks == [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 8.0]
    faster = Settings(poll_pending_max_seconds=2.0)
    assert [next_delay(_asking(POLL_PENDING), faster, n) for n in range(5)] == [
        0.25, 0.5, 1.0, 2.0, 2.0
    ]  # fmt: skip


def test_an_operation_pending_for_hours_is_still_looked_at() -> None:
    # 2**1024 no longer fits a float: a host operation (or a host resource not ready) looked at
    # that many times in a row (about 34 minutes at a 2 s cap) must not end the CR's loop.
    for looks in (1023, 1024, 100_000):
        assert next_delay(_asking(POLL_PENDING), SETTINGS, looks) == 8.0


def test_other_delays_are_kept_within_bounds() -> None:
    assert next_delay(_asking(None), SETTINGS) == 60.0, "nothing asked: the ready poll"
    assert next_delay(_asking(RETRY_SOON), SETTINGS) == 0.2, "at once, but never a busy loop"
    assert next_delay(_asking(RETRY_LATER), SETTINGS, jitter=lambda: 0.0) == 0.2, "back-off"
    assert next_delay(_asking(600.0), SETTINGS) == 60.0, "never later than the ready poll"
