"""Whether a CR body is older than one already known: a watch event can arrive after the
operator's own write to the same CR (the watch lags, e.g. right after a leader takes over), and
acting on it would mean deciding from a status that lacks what was just recorded.

The API conventions call resourceVersion opaque; the kube-apiserver's etcd3 storage makes it
the object's modification revision, a decimal integer that grows with every write. Two versions
are compared only when both are such integers; anything else is never called older (the body
is taken, as it would be without this check). An etcd restored from a backup starts over at
older revisions: as for every controller, the operator is restarted after such a restore.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def resource_version(body: Mapping[str, Any]) -> str:
    return str((body.get("metadata") or {}).get("resourceVersion") or "")


def older(version: str, than: str) -> bool:
    """resourceVersion `version` is strictly earlier than `than` (of the same CR)."""
    if not (version.isdecimal() and than.isdecimal()):
        return False
    return int(version) < int(than)
