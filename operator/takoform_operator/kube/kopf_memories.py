"""kopf's memory of each object, kept only where kopf needs it.

kopf keeps a record of every object it has seen, for as long as the object exists
(`ResourceMemory`: a memo, an error throttler, indexing and daemon state; nine objects, about
0.8 KB). The operator needs it only for the kinds it indexes (hosts, grants, namespaces: kopf
retries a failed index handler from it). A Form CR's events go to one event handler, which
keeps nothing in kopf (its loop holds what it needs, kube.loops), so `Memories` makes a CR's
record for each event and drops it after (kopf's `ephemeral` record): a CR costs kopf nothing
between its events. What goes with it: after an error of kopf's own on a CR (never of our
handler, which raises nothing), kopf's throttling starts again from its first delay at the
next event instead of from the last.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import takoform_operator.kube.kopf_alone  # noqa: F401  # first: kopf without the client

# isort: split
from kopf._core.reactor.inventory import ResourceMemories, ResourceMemory


class Memories(ResourceMemories):
    """kopf's records of the objects `forgotten` does not name; the others' only per event."""

    def __init__(self, forgotten: Callable[[Any], bool]) -> None:
        super().__init__()
        self._forgotten = forgotten

    async def recall(
        self,
        raw_body: Any,
        *,
        memobase: Any = None,
        noticed_by_listing: bool = False,
        ephemeral: bool = False,
    ) -> ResourceMemory:
        return await super().recall(
            raw_body,
            memobase=memobase,
            noticed_by_listing=noticed_by_listing,
            ephemeral=ephemeral or self._forgotten(raw_body),
        )
