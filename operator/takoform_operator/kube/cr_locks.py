"""One lock per CR, held only while in use.

A CR's reconciles are serialised (its loop's and its delete handler's, docs/crash-safety.md).
A lock kept per CR for as long as the CR is managed would be two objects more per CR for every
full garbage collection to walk, for the rare moment two reconciles of one CR meet: here a CR's
lock exists while someone holds it or waits for it, and goes with the last of them.

Pure asyncio: no kopf, no I/O.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class _Lock:
    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class CrLocks:
    """A lock per key (a CR uid), made on first use and dropped when nobody holds or awaits it."""

    def __init__(self) -> None:
        self._locks: dict[str, _Lock] = {}

    def __len__(self) -> int:
        """Keys whose lock is held or awaited now."""
        return len(self._locks)

    @contextlib.asynccontextmanager
    async def held(self, key: str) -> AsyncIterator[None]:
        entry = self._locks.get(key)
        if entry is None:
            entry = self._locks[key] = _Lock()
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if not entry.users:
                del self._locks[key]
