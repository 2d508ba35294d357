"""Waiting for something to happen: the one poll loop of the tests and the hack/ scripts.

Every wait here has a deadline, and running out of time FAILS loudly (`TimedOut`, an
AssertionError naming what was awaited); nothing ever passes silently on a timeout. The probe is
called first, before any pause, so an event that already happened costs no wait at all.

- ``wait_for(probe, what)`` / ``await_for(probe, what)``: poll until `probe()` returns something
  truthy and return it (the async form awaits an async probe).
- ``wait_until(condition, what)``: the same for a plain boolean condition.
- ``wait_settled(client, op_id)`` / ``await_settled(client, op_id)``: a host operation's final
  record, over the raw host API (an ``httpx.Client``) or the operator's ``HostClient``.

This is the only module of the tests that sleeps between polls (hack/check_test_sleeps.py).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

T = TypeVar("T")

#: How long a wait lasts unless the caller says otherwise (seconds).
TIMEOUT = 30.0
#: The pause between two polls (seconds).
INTERVAL = 0.02


class TimedOut(AssertionError):
    """The awaited thing did not happen in time."""


def _timed_out(what: str, timeout: float, last: object) -> TimedOut:
    seen = "" if last is None else f" (last seen: {last!r:.300})"
    return TimedOut(f"timed out after {timeout:g}s waiting for {what}{seen}")


def wait_for(
    probe: Callable[[], T | None],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> T:
    """Poll `probe` until it returns a truthy value, and return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, value)
        time.sleep(interval)


def wait_until(
    condition: Callable[[], bool],
    what: str,
    timeout: float = TIMEOUT,
    *,
    interval: float = INTERVAL,
) -> None:
    """Poll `condition` until it is true."""
    wait_for(lambda: condition() or None, what, timeout=timeout, interval=interval)


async def await_for(
    probe: Callable[[], Awaitable[T | None]],
    what: str,
    *,
    timeout: float = TIMEOUT,
    interval: float = INTERVAL,
) -> T:
    """Await `probe()` until it returns a truthy value, and return that value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise _timed_out(what, timeout, value)
        await asyncio.sleep(interval)


# -- host operations -------------------------------------------------------------------------------


def wait_settled(
    client: Any, op_id: str, *, timeout: float = TIMEOUT, interval: float = INTERVAL
) -> dict[str, Any]:
    """The final record of host operation `op_id`, read with an ``httpx.Client`` that has the
    host's base URL and token. A non-200 answer fails at once."""

    def settled() -> dict[str, Any] | None:
        response = client.get(f"/v1alpha3/operations/{op_id}")
        assert response.status_code == 200, f"GET operation {op_id}: {response.text}"
        record: dict[str, Any] = response.json()
        return record if record["state"] != "running" else None

    return wait_for(settled, f"operation {op_id} to settle", timeout=timeout, interval=interval)


async def await_settled(
    client: Any, op_id: str, *, timeout: float = TIMEOUT, interval: float = INTERVAL
) -> Any:
    """The settled operation `op_id`, read with the operator's ``HostClient``."""

    async def settled() -> Any:
        operation = await client.get_operation(op_id)
        return operation if operation.state != "running" else None

    what = f"operation {op_id} to settle"
    return await await_for(settled, what, timeout=timeout, interval=interval)
