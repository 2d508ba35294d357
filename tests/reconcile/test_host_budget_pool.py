"""Host requests budgeted per namespace, through the host pool against the real reference host
(core.host_budget, host_client.pool): a namespace whose share is spent sends nothing, another
namespace's request still goes, and a 429 holds only the namespace that drew it."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from fixtures_host import HostProcess

from takoform_operator.core.host_budget import HostBudget
from takoform_operator.core.tenancy import CREDENTIAL_ANNOTATION, HostConfig, SecretKeyRef
from takoform_operator.host_client.pool import HostPool
from takoform_operator.host_port import BudgetSpent, HostThrottled, StoredSecret


class Secrets:
    namespace = "ops"

    def __init__(self, host: HostProcess) -> None:
        self._host = host

    async def read(self, name: str) -> StoredSecret | None:
        opted_in = {CREDENTIAL_ANNOTATION: f"h={self._host.url}"}
        return StoredSecret({"token": self._host.token.encode()}, opted_in)


def sent(host: HostProcess) -> int:
    """The API requests the host has answered (its access log)."""
    return sum("/v1alpha3/" in line for line in host.log_path.read_text().splitlines())


async def test_a_spent_namespace_sends_nothing_and_a_429_holds_only_its_namespace(
    host_factory: Callable[..., HostProcess],
) -> None:
    host = host_factory(extra_args=("--access-log",))
    now = [1000.0]
    budget = HostBudget(rate=1, burst=2)
    pool = HostPool(Secrets(host), read_retries=0, budget=budget, clock=lambda: now[0])
    pool.observe(HostConfig("h", host.url, SecretKeyRef("tok", "token"), insecure=True))
    busy, quiet = pool.port("h", "busy"), pool.port("h", "quiet")
    try:
        before = sent(host)
        await busy.list_forms()
        await busy.list_forms()  # its burst, alone on the host
        with pytest.raises(BudgetSpent, match="'busy' has spent its share") as caught:
            await busy.list_forms()
        assert caught.value.retry_after == pytest.approx(1.0)
        assert sent(host) == before + 2  # nothing sent for the third
        await quiet.list_forms()  # a namespace that asked nothing goes at once
        assert sent(host) == before + 3

        now[0] += 10
        host.set_faults(throttleRetryAfterSeconds=5)
        with pytest.raises(HostThrottled, match=r"namespace 'busy' held 5\.00 s") as throttled:
            await busy.list_forms()
        assert throttled.value.retry_after == 5
        host.set_faults(throttleRetryAfterSeconds=0)
        await quiet.list_forms()  # the 429 was busy's: quiet is not held
        now[0] += 1
        before = sent(host)
        with pytest.raises(BudgetSpent, match=r"next request in 4\.00 s"):
            await busy.list_forms()
        assert sent(host) == before  # held: nothing sent
        now[0] += 4  # the hold is over; its bucket fills from empty at its share (0.5/s)
        with pytest.raises(BudgetSpent, match=r"next request in 2\.00 s"):
            await busy.list_forms()
        now[0] += 2
        await busy.list_forms()
        # The operator's own probe (the TakoformHost status) is no namespace's: never budgeted.
        for _ in range(5):
            await pool.prober("h").list_forms()
    finally:
        await pool.aclose()
