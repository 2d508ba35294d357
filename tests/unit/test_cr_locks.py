"""Per-CR locks (kube.cr_locks): two holders of one CR run one after the other, two CRs at
once, and a CR nobody holds keeps no lock."""

from __future__ import annotations

import asyncio

from takoform_operator.kube.cr_locks import CrLocks

TIMEOUT = 5.0


async def test_one_crs_holders_take_turns_and_its_lock_goes_with_the_last() -> None:
    locks = CrLocks()
    first_in, release_first = asyncio.Event(), asyncio.Event()
    order: list[str] = []

    async def first() -> None:
        async with locks.held("u-1"):
            order.append("first in")
            first_in.set()
            await release_first.wait()
            order.append("first out")

    async def second() -> None:
        await first_in.wait()
        async with locks.held("u-1"):
            order.append("second in")

    async def other() -> None:
        await first_in.wait()
        async with locks.held("u-2"):  # another CR is not held up by u-1
            order.append("other in")
        release_first.set()

    await asyncio.wait_for(asyncio.gather(first(), second(), other()), TIMEOUT)
    assert order == ["first in", "other in", "first out", "second in"]
    assert len(locks) == 0


async def test_a_holder_that_fails_or_is_cancelled_leaves_no_lock_behind() -> None:
    locks = CrLocks()
    try:
        async with locks.held("u-1"):
            raise RuntimeError("a failed reconcile")
    except RuntimeError:
        pass
    assert len(locks) == 0
    holding = asyncio.Event()

    async def hold() -> None:
        async with locks.held("u-1"):
            holding.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(hold())
    await asyncio.wait_for(holding.wait(), TIMEOUT)
    assert len(locks) == 1
    waiter = asyncio.create_task(_enter(locks, "u-1"))
    task.cancel()
    await asyncio.wait_for(waiter, TIMEOUT)
    assert len(locks) == 0


async def _enter(locks: CrLocks, key: str) -> None:
    async with locks.held(key):
        pass
