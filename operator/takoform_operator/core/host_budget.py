"""Host requests budgeted per namespace: one token bucket per (host, namespace).

A host limits the requests it takes from the operator's one token. Without a budget, one
namespace's burst (a thousand busy CRs) spends the host's whole rate, and the `429`s it draws
land on every namespace's CRs alike. Here each host has a rate (requests per second) shared
fairly among the namespaces that asked it for anything within the last `window` seconds: each
of them holds a bucket refilled at `rate / n` and holding at most `max(1, burst / n)` tokens. A
namespace that goes quiet gives its share back once `window` has passed; one that comes back
starts with a full bucket, so its first request never waits behind a busy neighbour.

A request takes a token or is told how long until one comes; nothing waits here (the CR backs
off outside its reconcile slot, kube.slots). A `429` is a signal about the namespace whose
request drew it: that namespace's bucket is emptied and held for the Retry-After (or one
refill of its share), and the other namespaces' buckets are left as they are.

Pure: the clock is passed in. Memory: one entry per (host, namespace) seen within `window`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class _Bucket:
    tokens: float
    stamp: float  # when `tokens` was last brought up to date
    seen: float  # the last time the namespace asked
    held_until: float = 0.0  # after a 429: no token before then


class HostBudget:
    """`rate` requests per second (and `burst` at once) per host, shared fairly by namespace."""

    def __init__(self, rate: float, burst: float | None = None, window: float = 10.0) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.rate = rate
        self.burst = max(1.0, burst if burst is not None else rate)
        self.window = window
        self._buckets: dict[str, dict[str, _Bucket]] = {}

    def active(self, host: str, now: float) -> int:
        """The namespaces sharing `host`'s rate now (those that asked within `window`)."""
        return sum(now - b.seen < self.window for b in self._buckets.get(host, {}).values())

    def share(self, host: str, now: float) -> float:
        """Requests per second each active namespace of `host` may send now."""
        return self.rate / max(1, self.active(host, now))

    def capacity(self, host: str, now: float) -> float:
        """The tokens each active namespace's bucket of `host` holds at most now."""
        return max(1.0, self.burst / max(1, self.active(host, now)))

    def kept(self, host: str) -> int:
        """The buckets held for `host` (memory: those seen within `window`, or held)."""
        return len(self._buckets.get(host, {}))

    def take(self, host: str, namespace: str, now: float) -> float:
        """Take one token for a request of `namespace` to `host`: 0.0 when taken (send it), else
        the seconds until one comes (send nothing now)."""
        buckets = self._buckets.setdefault(host, {})
        self._forget_quiet(buckets, now)
        bucket = buckets.get(namespace)
        if bucket is None:  # new, or back after `window`: a full bucket
            bucket = buckets[namespace] = _Bucket(tokens=0.0, stamp=now, seen=now)
            bucket.tokens = self.capacity(host, now)
        bucket.seen = now
        if now < bucket.held_until:  # after a 429: nothing accrues while held
            bucket.stamp = now
            return bucket.held_until - now
        share, capacity = self.share(host, now), self.capacity(host, now)
        accrued = max(0.0, now - max(bucket.stamp, bucket.held_until)) * share
        bucket.tokens, bucket.stamp = min(capacity, bucket.tokens + accrued), now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0.0
        return (1.0 - bucket.tokens) / share

    def throttled(self, host: str, namespace: str, now: float, retry_after: float | None) -> float:
        """The host answered `429` to a request of `namespace`: its bucket is emptied and held
        for `retry_after` (none: one token's refill at its share). Returns the hold, seconds."""
        buckets = self._buckets.setdefault(host, {})
        bucket = buckets.get(namespace)
        if bucket is None:
            bucket = buckets[namespace] = _Bucket(tokens=0.0, stamp=now, seen=now)
        hold = retry_after if retry_after is not None and retry_after > 0 else None
        if hold is None:
            hold = 1.0 / self.share(host, now)
        bucket.tokens, bucket.stamp = 0.0, now
        bucket.held_until = max(bucket.held_until, now + hold)
        return hold

    def _forget_quiet(self, buckets: dict[str, _Bucket], now: float) -> None:
        """Drop the namespaces quiet for longer than `window` and not held (bounded memory)."""
        quiet = [
            name
            for name, b in buckets.items()
            if now - b.seen >= self.window and now >= b.held_until
        ]
        for name in quiet:
            del buckets[name]
