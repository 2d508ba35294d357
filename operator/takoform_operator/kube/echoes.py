"""The watch echo of the operator's own writes, recognised and dropped before kopf sees it.

Each write of the operator to a CR (its finalizer or status) comes back on the watch as an
event carrying exactly the object the API server answered the write with: the same uid, the
same resourceVersion, the same content. The writer has applied that answer already (the CR's
loop holds it, kube.loops), so the echo brings nothing, yet kopf would decode it, run its
per-object machinery and call a handler that compares it with what it holds: three of the four
events a new CR brings. (TakoformBindings have a watch of their own, kube.binding_watch, which
passes its echoes over by their resourceVersion.) The writers record
what they wrote (`wrote`) and the watch's line reader (kube.json_seam) drops a line that is
the echo of one (`echo`).

A line is an echo only if its event is ADDED or MODIFIED and its object has both the uid and
the resourceVersion of a recorded write: a DELETED event always goes through (removing our
finalizer can be what deletes a CR), and so does anyone else's write (another
resourceVersion). Every write is recorded until its echo is seen, not only an object's latest:
a CR's writes follow each other faster than the watch delivers them (its finalizer's echo
arrives after its status was written). A write whose echo never comes (the watch restarted and
listed again: the listing is not read here) leaves its record; at most `limit` are kept, the
oldest dropped first (its echo would then be processed like any event, harmlessly). The line
is decoded only when a resourceVersion in it is one recorded; the decode that confirms it is
the plain one (a line too deep for it is left to the seam's depth-safe decoder, and is not an
echo).
"""

from __future__ import annotations

import json
import re
from typing import Any

_VERSION = re.compile(rb'"resourceVersion":"([0-9]+)"')
_ECHOED = ("ADDED", "MODIFIED")


class OwnWrites:
    """The writes this process made whose echo it has not seen yet."""

    def __init__(self, limit: int = 50_000) -> None:
        self._limit = limit
        #: resourceVersion of a write of ours -> the uid of the object written, oldest first.
        self._by_version: dict[str, str] = {}
        #: watch lines looked at, and how many of them were echoes dropped.
        self.lines = 0
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._by_version)

    def wrote(self, answer: Any) -> None:
        """The API server answered a write of ours with the object `answer` (decoded)."""
        metadata = answer.get("metadata") if isinstance(answer, dict) else None
        if not isinstance(metadata, dict):
            return
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if not (isinstance(uid, str) and isinstance(version, str) and uid and version):
            return
        self._by_version[version] = uid
        while len(self._by_version) > self._limit:
            del self._by_version[next(iter(self._by_version))]

    def echo(self, line: bytes) -> bool:
        """Whether the watch line `line` is the echo of a recorded write (it is then forgotten:
        a second delivery of the same line, after a watch restart, is processed as usual)."""
        self.lines += 1
        if not self._by_version:
            return False
        candidates = _VERSION.findall(line)
        if not any(v.decode() in self._by_version for v in candidates):
            return False
        try:
            event = json.loads(line)
        except (ValueError, RecursionError):
            return False
        if not isinstance(event, dict) or event.get("type") not in _ECHOED:
            return False
        body = event.get("object")
        metadata = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(metadata, dict):
            return False
        uid, version = metadata.get("uid"), metadata.get("resourceVersion")
        if not isinstance(uid, str) or not isinstance(version, str):
            return False
        if self._by_version.get(version) != uid:
            return False
        del self._by_version[version]
        self.dropped += 1
        return True
