"""When a CR is looked at next: the one function that turns an outcome into seconds
(`next_delay`), with its parts. Pure: the random source is passed in, so a test fixes it.

- After a failure: exponential back-off with full jitter and a cap, honouring Retry-After.
- A ready CR whose looks change nothing (idle): the poll grows from poll_ready_seconds, twice
  as late each time, up to poll_idle_max_seconds.
- The first look of a CR a process takes on (at start, or from another shard): at once when it
  needs work, else somewhere within start_spread_seconds, or paced at the host budget's rate
  when one is set (`FirstLooks`).

The adapter (kube.cr_step.CrSteps.next_look) counts a CR's pending, failed and steady looks in
a row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from takoform_operator.core.conditions import ConditionType
from takoform_operator.core.outcome import NextLook, Outcome

#: Beyond this many doublings the ceiling is the cap anyway (and 2**n stays a small float).
_MAX_DOUBLINGS = 62
#: Never sooner than this: "now" is not a busy loop.
_MIN_DELAY = 0.2
#: The first look at a just-accepted operation: most settle within a fraction of a second.
_FIRST_LOOK = 0.25
#: The share of the host budget's rate the first looks after a start are paced at: the rest
#: fills the budget's bucket, for the timers that fire late together and the CRs needing work.
PACE_SHARE = 0.9
#: An idle poll comes within the last fifth of its interval (Crossplane's poll jitter, one-sided
#: so that the ceiling still bounds it).
IDLE_JITTER = 0.2


class Pacing(Protocol):
    """The settings `next_delay` reads (takoform_operator.settings.Settings holds them)."""

    @property
    def poll_ready_seconds(self) -> float: ...
    @property
    def poll_idle_max_seconds(self) -> float: ...
    @property
    def poll_pending_max_seconds(self) -> float: ...
    @property
    def backoff_base_seconds(self) -> float: ...
    @property
    def backoff_cap_seconds(self) -> float: ...


def _longest() -> float:
    return 1.0


def next_delay(
    outcome: Outcome | None,
    pacing: Pacing,
    pending_looks: int = 0,
    failures: int = 0,
    jitter: Callable[[], float] = _longest,
    steady_looks: int = 0,
) -> float:
    """Seconds until the next look, from what the outcome asked for (core.outcome.NextLook) and
    the settings. NOW: at once (0.2 s, never a busy loop). PENDING: fast first, then slower:
    0.25, 0.5, 1, 2, 4 s ... up to poll_pending_max_seconds (`pending_looks` is how many times
    in a row this CR was found waiting on one). POLL (and NEVER, should a finished CR still be
    around): poll_ready_seconds, longer for a CR idle `steady_looks` looks in a row
    (`idle_delay`). A failure -- BACKOFF, LATER (put off by the host budget: a busy namespace's
    looks then come back ever later, not all at its next token), or None: the look ended
    before an outcome was written -- waits the exponential back-off of the `failures` that came
    right before it, honouring the host's Retry-After, within [0.2 s, backoff_cap_seconds].
    `jitter` returns a float in [0, 1); the default is no jitter, the longest wait of each
    range."""
    if outcome is None or failed(outcome):
        delay = backoff_delay(
            failures,
            base=pacing.backoff_base_seconds,
            cap=pacing.backoff_cap_seconds,
            random=jitter,
            retry_after=outcome.retry_after if outcome is not None else None,
        )
        return max(delay, _MIN_DELAY)
    if outcome.next_look is NextLook.NOW:
        return _MIN_DELAY
    if outcome.next_look is NextLook.PENDING:
        pending = doubled(_FIRST_LOOK, pending_looks, pacing.poll_pending_max_seconds)
        return min(pending, pacing.poll_ready_seconds)
    return idle_delay(
        steady_looks,
        base=pacing.poll_ready_seconds,
        ceiling=pacing.poll_idle_max_seconds,
        random=jitter,
    )


def failed(outcome: Outcome) -> bool:
    """The look failed (or was put off by the host budget) and is retried with back-off."""
    return outcome.next_look in (NextLook.BACKOFF, NextLook.LATER) and not outcome.finalized


def doubled(base: float, times: int, cap: float) -> float:
    """`base` doubled `times` times, at most `cap` (any count: 2**1024 would not fit a float)."""
    return min(cap, base * 2.0 ** min(max(times, 0), _MAX_DOUBLINGS))


def backoff_delay(
    failures: int,
    *,
    base: float,
    cap: float,
    random: Callable[[], float],
    retry_after: float | None = None,
) -> float:
    """Seconds to wait after a failure, when `failures` failures came right before it.

    Full jitter: uniform in [0, min(cap, base * 2**failures)), so CRs failing together (a host
    outage) spread their retries instead of coming back in step. A host's Retry-After is a
    lower bound, itself capped at `cap`: a host cannot park a CR for longer than the cap.
    `random` returns a float in [0, 1)."""
    delay = doubled(base, failures, cap) * random()
    if retry_after is not None and retry_after > 0:
        delay = max(delay, min(retry_after, cap))
    return delay


def idle_delay(
    steady_looks: int, *, base: float, ceiling: float, random: Callable[[], float]
) -> float:
    """Seconds until the next poll of a ready CR whose last `steady_looks` looks in a row changed
    nothing (the host answered as before, no status written): `base` doubled by each of them,
    at most `ceiling` (a ceiling at or below `base` keeps every poll at `base`).

    Jittered within the interval's last fifth, so that CRs that went idle together do not poll
    in step, and never beyond the ceiling: a change made on the host out of band is noticed
    within `ceiling` seconds. `random` returns a float in [0, 1)."""
    if steady_looks <= 0 or ceiling <= base:
        return base
    longest = doubled(base, steady_looks, ceiling)
    return max(base, longest * (1.0 - IDLE_JITTER + IDLE_JITTER * random()))


class FirstLooks:
    """When the first look of a CR a process takes on comes (its listing at start, or a share
    handed over by another replica): at once for one that needs work; for one that is `settled`
    somewhere within `spread`, drawn uniformly (`random` returns a float in [0, 1)), so that a
    restart does not read every CR from the host in one burst. With a `rate` (the host budget's)
    the settled ones come a little under that rate instead (PACE_SHARE of it), in the order
    they come, one after the other (or at once when none is due): the budget bounds what the
    host sees anyway, but a restart would first send most of them into it together, to be put
    off one by one; at the budget's very rate, every timer that fires late would still find the
    bucket empty. Pure: the clock is passed in."""

    def __init__(
        self, spread: float, rate: float | None, random: Callable[[], float], finalizer: str
    ) -> None:
        self._spread, self._random, self._finalizer = spread, random, finalizer
        self._gap = 1.0 / (rate * PACE_SHARE) if rate else 0.0
        self._next = float("-inf")

    def delay(self, body: Mapping[str, Any], now: float) -> float:
        """Seconds from `now` until the first look of the CR `body`."""
        if not settled(body, self._finalizer):
            return 0.0
        if not self._gap:
            return self._spread * self._random() if self._spread > 0 else 0.0
        at = max(now, self._next)
        self._next = at + self._gap
        return at - now


def settled(body: Mapping[str, Any], finalizer: str) -> bool:
    """The CR's status says Ready for its current generation, with no operation pending; it
    holds `finalizer` and is not being deleted. Only its poll is due."""
    metadata = _mapping(body.get("metadata"))
    status = _mapping(body.get("status"))
    finalizers = metadata.get("finalizers")
    conditions = status.get("conditions")
    ready = isinstance(conditions, list) and any(
        isinstance(c, Mapping)
        and c.get("type") == ConditionType.READY
        and c.get("status") == "True"
        for c in conditions
    )
    return (
        ready
        and metadata.get("deletionTimestamp") is None
        and isinstance(finalizers, list)
        and finalizer in finalizers
        and metadata.get("generation") is not None
        and status.get("observedGeneration") == metadata.get("generation")
        and not status.get("pendingOperationId")
    )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
