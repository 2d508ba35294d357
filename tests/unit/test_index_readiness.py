"""kopf's indexed readiness with kube.index_readiness installed: complete once at start, then
never incomplete again; its waiters are woken once, when it is complete, not at every toggle
dropped (kopf's own set wakes every waiter at every toggle made or dropped: with a new
TakoformBinding per CR, about half the operator's CPU at 5,000 CRs), and a batch at a time, not
all in one turn of the event loop."""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from kopf._cogs.aiokits.aiotoggles import ToggleSet

from takoform_operator.kube.index_readiness import RELEASE_BATCH, install

install()


class CountingCondition(asyncio.Condition):
    def __init__(self) -> None:
        super().__init__()
        self.notified = 0  # waiters woken, each wake-up counted

    def notify(self, n: int = 1) -> None:  # notify_all calls it too
        self.notified += min(n, len(self._waiters))
        super().notify(n)


class Turns:
    """Counts the turns of the event loop, to see how much ran in each."""

    def __init__(self) -> None:
        self.count = 0
        self._loop = asyncio.get_running_loop()
        self._handle = self._loop.call_soon(self._tick)

    def _tick(self) -> None:
        self.count += 1
        self._handle = self._loop.call_soon(self._tick)

    def stop(self) -> None:
        self._handle.cancel()


def _readiness() -> tuple[ToggleSet, CountingCondition]:
    toggles = ToggleSet(all)  # what kopf makes its `operator_indexed` of
    condition = CountingCondition()
    toggles._condition = condition
    return toggles, condition


async def test_waiters_wait_for_the_last_toggle_and_are_woken_once_a_batch_per_turn() -> None:
    toggles, condition = _readiness()
    blocker = await toggles.make_toggle(name="orchestration blocker")
    objects = [await toggles.make_toggle(name=f"binding {i}") for i in range(300)]
    all_waiting = asyncio.Event()
    started = 0
    let_go: list[int] = []  # the loop turn in which each waiter went on

    async def waiter() -> None:
        nonlocal started
        started += 1
        if started == 300:
            all_waiting.set()  # the others wait already; this one does before we run again
        await toggles.wait_for(True)
        let_go.append(turns.count)

    turns = Turns()
    waiting = [asyncio.create_task(waiter()) for _ in range(300)]
    await all_waiting.wait()
    await toggles.drop_toggle(blocker)
    for toggle in objects[:-1]:
        await toggles.drop_toggle(toggle)
    assert not toggles.is_on()
    assert condition.notified == 0, "no waiter woken while a toggle is left"
    await toggles.drop_toggle(objects[-1])
    await asyncio.wait_for(asyncio.gather(*waiting), timeout=10)
    turns.stop()
    assert condition.notified == 300  # each once; kopf's own set: 602 wake-ups of all 300
    per_turn = Counter(let_go)
    assert max(per_turn.values()) == RELEASE_BATCH < 300
    assert len(per_turn) == -(-300 // RELEASE_BATCH)


async def test_the_release_ends_though_a_waiter_it_woke_waits_on() -> None:
    # A toggle's own waiters share the set's condition: woken, one whose toggle is still off
    # waits again. The release lets go the waiters it found, a batch per turn, and ends.
    toggles, _ = _readiness()
    other = await toggles.make_toggle(name="a toggle someone waits on")
    waiting = asyncio.Event()

    async def wait_on(waitable: Any) -> None:
        waiting.set()
        await waitable.wait_for(True)

    stuck = asyncio.create_task(wait_on(other))
    await waiting.wait()
    waiting.clear()
    indexed = asyncio.create_task(wait_on(toggles))
    await waiting.wait()
    await toggles.drop_toggle(other)  # the set is complete: its waiters are let go
    await asyncio.wait_for(indexed, timeout=10)
    await asyncio.wait_for(toggles._takoform_releasing, timeout=10)  # type: ignore[attr-defined]
    assert not stuck.done()
    stuck.cancel()


async def test_once_complete_a_new_objects_toggle_makes_nobody_wait() -> None:
    toggles, _ = _readiness()
    blocker = await toggles.make_toggle(name="orchestration blocker")
    await toggles.drop_toggle(blocker)
    assert toggles.is_on()
    late = await toggles.make_toggle(name="a binding created later")
    assert toggles.is_on() and late not in toggles
    await asyncio.wait_for(toggles.wait_for(True), timeout=10)
    await toggles.drop_toggle(late)
    assert toggles.is_on()


async def test_not_complete_until_every_kind_and_object_toggle_is_dropped() -> None:
    toggles, _ = _readiness()
    kinds = [await toggles.make_toggle(name=k) for k in ("bindings", "hosts", "grants")]
    first_binding = await toggles.make_toggle(name="binding 0")
    for kind in kinds:
        await toggles.drop_toggle(kind)
    assert not toggles.is_on(), "an object listed is not indexed yet"
    await toggles.drop_toggle(first_binding)
    assert toggles.is_on()


async def test_other_toggle_sets_behave_as_kopf_made_them() -> None:
    paused: Any = ToggleSet(any)  # kopf's operator_paused
    reason = await paused.make_toggle(True, name="peering")
    assert paused.is_on() and reason in paused
    await paused.drop_toggle(reason)
    assert paused.is_off()
    again = await paused.make_toggle(False, name="later")
    await again.turn_to(True)
    assert paused.is_on()
