"""kopf's "indexed" readiness, kept to what kopf promises: complete once, at start.

The operator feeds its caches of hosts, grants and namespaces from kopf indexes, so that they
are complete before any CR is reconciled. kopf holds every watch event of every kind until its
indexes are complete, through one set of toggles: one per indexed kind until its listing is
over, and one per indexed object until its index handler ran. kopf means to stop adding
objects' toggles once the set has been complete once, but each watcher only checks that when a
new object arrives, and only at that instant. When TakoformBindings were a kopf index too (they
have a watch of their own since, kube.binding_watch), the operator created one for every CR it
brought up, so under a backlog a new binding nearly always arrived while the previous one's
toggle was still there: the set never counted as complete again, every CR's events waited on
it, and every toggle dropped woke every waiting event (asyncio's notify_all), each to find the
set still incomplete. Measured with 5,000 CRs: about half of the operator's CPU.

Installed (idempotent), the set of kopf's `all` kind (the indexed readiness; the pause set is an
`any`) wakes its waiters only when it becomes complete, and stays complete from then on: toggles
made afterwards are not counted, as kopf intends. Its waiters are then let go `RELEASE_BATCH` at
a time, one batch per turn of the event loop: at start-up the event of every listed CR waits
here, and each one let go runs on (kopf's processing, the watch handler) without yielding, so
5,000 let go at once held the loop for a second. Which kinds are indexed does not change while
the operator runs (they are fixed at start, kube.discovery), so nothing that must wait is let
through.
"""

from __future__ import annotations

import asyncio
from typing import Any

_LATCHED = "_takoform_complete_once"
_RELEASING = "_takoform_releasing"

#: Waiters let go per turn of the event loop once the set is complete.
RELEASE_BATCH = 64


async def _release(condition: Any, waiting: int) -> None:
    """Wake the `waiting` waiters the condition had when the set became complete, RELEASE_BATCH
    per turn of the event loop (so many turns and no more, whatever they do once awake)."""
    while waiting > 0:
        async with condition:
            condition.notify(RELEASE_BATCH)
        waiting -= RELEASE_BATCH
        await asyncio.sleep(0)  # the batch just woken runs before the next is


class _Installed:
    done = False


def install() -> None:
    from kopf._cogs.aiokits.aiotoggles import Toggle, ToggleSet

    if _Installed.done:
        return
    original_make = ToggleSet.make_toggle
    original_drop = ToggleSet.drop_toggle

    def readiness(toggles: ToggleSet) -> bool:
        return getattr(toggles, "_fn", None) is all

    # Waiters on the readiness set only ever wait for it to be complete (kopf's
    # `operator_indexed.wait_for(True)`): a toggle made (incomplete) cannot end their wait, and
    # a toggle dropped can only if the set is complete after it.
    async def make_toggle(
        self: ToggleSet, __val: bool = False, *, name: str | None = None
    ) -> Toggle:
        if not readiness(self):
            return await original_make(self, __val, name=name)
        if getattr(self, _LATCHED, False):
            return Toggle(True, name=name)  # counted by nobody: the set was complete once
        condition: Any = self._condition
        toggle = Toggle(__val, name=name, condition=condition)
        async with condition:
            self._toggles.add(toggle)
        return toggle

    async def drop_toggle(self: ToggleSet, toggle: Toggle) -> None:
        if not readiness(self):
            await original_drop(self, toggle)
            return
        if getattr(self, _LATCHED, False):
            self._toggles.discard(toggle)
            return
        condition: Any = self._condition
        async with condition:
            self._toggles.discard(toggle)
            if self.is_on():
                setattr(self, _LATCHED, True)
                waiting = len(condition._waiters)
                release = asyncio.get_running_loop().create_task(_release(condition, waiting))
                setattr(self, _RELEASING, release)  # held: asyncio keeps only a weak reference

    ToggleSet.make_toggle = make_toggle  # type: ignore[method-assign]
    ToggleSet.drop_toggle = drop_toggle  # type: ignore[method-assign]
    _Installed.done = True
