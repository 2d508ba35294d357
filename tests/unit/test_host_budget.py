"""Host requests budgeted per namespace (core.host_budget): a fair share of a host's rate for
each namespace that uses it, and a 429 held against the namespace that drew it."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from takoform_operator.core.host_budget import HostBudget

STEP = 0.001  # the simulated clock's tick, seconds


@dataclass
class Tenant:
    """A namespace asking `host` for a request every `every` seconds (0: as often as allowed)."""

    name: str
    every: float
    sent: int = 0
    waits: list[float] = field(default_factory=list)  # per request: asked until sent
    next_ask: float = 0.0
    asked_at: float | None = None


class ThrottlingHost:
    """A host that answers 429 above `rate` requests per second (its own token bucket)."""

    def __init__(self, rate: float, burst: float) -> None:
        self.rate, self.burst, self.tokens, self.stamp = rate, burst, burst, 0.0
        self.throttled: dict[str, int] = {}

    def answer(self, namespace: str, now: float) -> int:
        self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        self.stamp = now
        if self.tokens >= 1.0:
            self.tokens -= 1.0
            return 200
        self.throttled[namespace] = self.throttled.get(namespace, 0) + 1
        return 429


def run(
    tenants: list[Tenant], seconds: float, budget: HostBudget | None, host: ThrottlingHost
) -> None:
    """Each tenant asks on its schedule; with a budget a request goes out only with a token (a
    refused one asks again when told), and a 429 is reported against its namespace."""
    ticks = round(seconds / STEP)
    for tick in range(ticks):
        now = tick * STEP
        for tenant in tenants:
            if now < tenant.next_ask:
                continue
            if tenant.asked_at is None:
                tenant.asked_at = now
            wait = budget.take("h", tenant.name, now) if budget is not None else 0.0
            if wait > 0:
                tenant.next_ask = now + wait
                continue
            code = host.answer(tenant.name, now)
            if code == 429:
                hold = budget.throttled("h", tenant.name, now, None) if budget else STEP
                tenant.next_ask = now + hold
                continue
            tenant.sent += 1
            tenant.waits.append(now - tenant.asked_at)
            tenant.asked_at = None
            tenant.next_ask = now + tenant.every


def test_a_lone_namespace_has_the_whole_rate_and_its_burst() -> None:
    budget = HostBudget(rate=10, burst=5)
    assert [budget.take("h", "a", 0.0) for _ in range(5)] == [0.0] * 5
    assert budget.take("h", "a", 0.0) == pytest.approx(0.1)
    assert budget.take("h", "a", 0.1) == 0.0
    assert budget.take("h", "a", 0.1) == pytest.approx(0.1)
    assert budget.take("h", "a", 10.0) == 0.0  # refilled to its burst, no more
    assert sum(budget.take("h", "a", 10.0) == 0.0 for _ in range(10)) == 4


def test_each_active_namespace_gets_an_equal_share_and_a_new_one_starts_full() -> None:
    budget = HostBudget(rate=12, burst=12, window=10)
    for _ in range(12):
        budget.take("h", "busy", 0.0)
    assert budget.take("h", "busy", 0.0) > 0  # spent
    # A namespace that had asked nothing: its first request goes at once.
    assert budget.take("h", "quiet", 0.0) == 0.0
    assert budget.share("h", 0.0) == 6 and budget.capacity("h", 0.0) == 6
    budget.take("h", "third", 0.0)
    assert budget.share("h", 0.0) == 4
    # Another host's namespaces are counted apart.
    assert budget.take("other", "busy", 0.0) == 0.0 and budget.share("other", 0.0) == 12


def test_a_namespace_quiet_for_the_window_gives_its_share_back_and_is_forgotten() -> None:
    budget = HostBudget(rate=10, window=5)
    budget.take("h", "quiet", 0.0)
    budget.take("h", "busy", 0.0)
    assert budget.share("h", 4.9) == 5
    assert budget.share("h", 5.0) == 10
    budget.take("h", "busy", 6.0)
    for index in range(1000):
        budget.take("h", f"once-{index}", 6.0)
    assert budget.active("h", 6.0) == 1001 and budget.share("h", 6.0) == pytest.approx(10 / 1001)
    budget.take("h", "busy", 11.0)
    assert budget.active("h", 11.0) == 1 and budget.kept("h") == 1


def test_a_429_holds_the_namespace_that_drew_it_and_no_other() -> None:
    budget = HostBudget(rate=10, burst=10)
    budget.take("h", "busy", 0.0)
    budget.take("h", "quiet", 0.0)
    assert budget.throttled("h", "busy", 1.0, retry_after=3.0) == 3.0
    assert budget.take("h", "busy", 2.0) == pytest.approx(2.0)
    assert budget.take("h", "quiet", 2.0) == 0.0
    # After the hold it starts from an empty bucket: no burst right after a 429 (its share,
    # two namespaces: 5/s, one token per 0.2 s).
    assert budget.take("h", "busy", 4.0) == pytest.approx(0.2)
    assert budget.take("h", "busy", 4.2) == 0.0 and budget.take("h", "busy", 4.2) > 0
    # Without Retry-After: one token's refill at its share (2 namespaces: 5/s).
    assert budget.throttled("h", "quiet", 5.0, None) == pytest.approx(0.2)


def test_a_busy_tenant_against_a_throttling_host_leaves_the_quiet_one_unthrottled() -> None:
    """The busy namespace asks as often as it may (a thousand CRs' worth), the quiet one once a
    second; the host takes 20 requests/s and answers 429 above. Without the budget the quiet
    namespace's requests draw 429s; with a budget at the host's rate, none do, and each goes
    within a few of its share's refills."""
    seconds = 20.0

    def scenario(budget: HostBudget | None) -> tuple[Tenant, Tenant, ThrottlingHost]:
        busy, quiet = Tenant("busy", every=0.0), Tenant("quiet", every=1.0)
        host = ThrottlingHost(rate=20, burst=20)
        run([busy, quiet], seconds, budget, host)
        return busy, quiet, host

    busy, quiet, host = scenario(None)
    unbudgeted = (host.throttled.get("quiet", 0), quiet.sent, max(quiet.waits))
    assert host.throttled.get("quiet", 0) > 0  # the busy one's burst lands on the quiet one
    busy, quiet, host = scenario(HostBudget(rate=20, burst=20))
    assert host.throttled == {}  # nobody is throttled: the budget stays under the host's rate
    assert quiet.sent == seconds  # every one of the quiet namespace's requests, on time
    assert max(quiet.waits) <= 0.1  # at most two refills of its share (10/s)
    assert busy.sent <= 20 * seconds / 2 + 20  # its half, and its first burst
    print(
        f"quiet namespace, unbudgeted: {unbudgeted[0]} 429s, {unbudgeted[1]} sent, worst wait "
        f"{unbudgeted[2]:.3f} s; budgeted: 0 429s, {quiet.sent} sent, worst wait "
        f"{max(quiet.waits):.3f} s; busy sent {busy.sent} in {seconds:.0f} s"
    )
