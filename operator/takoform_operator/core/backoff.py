"""Back-off after failures: exponential with full jitter and a cap, honouring Retry-After.

Pure: the random source is passed in, so a test fixes it. The adapter (kube.cr_step.next_delay)
counts a CR's failures in a row and resets the count on the first look that did not fail.
"""

from __future__ import annotations

from collections.abc import Callable

#: Beyond this many doublings the ceiling is the cap anyway (and 2**n stays a small float).
_MAX_DOUBLINGS = 62


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
