"""What the operator keeps of a Form CR body: the fields it reads, nothing else.

Every active process holds every CR it watches (its loop's body, kube.loops), so what a CR
carries beyond those fields -- labels and annotations of any size (the API server accepts about
1.5 MB of metadata), managedFields, foreign status fields -- must not be held, or one tenant's
bloated CRs exhaust the operator's memory for everyone (docs/performance.md, "Memory per CR").
`trimmed` keeps:

- `apiVersion`, `kind`;
- from `metadata`: name, namespace, uid, resourceVersion, generation, creationTimestamp,
  deletionTimestamp, finalizers (all of them: the finalizer write replaces the list), the
  annotations in `Kept.annotations` (those the operator acts on), the labels in `Kept.labels`
  (those the shard selector reads);
- `spec`, whole (the desired state);
- from `status`: the fields the operator writes and reads back (STATUS_FIELDS).

Nothing the operator writes is computed from what is dropped: the status is written as a
merge-patch of the status subresource from the kept status fields (a dropped field is never
named, so never removed), and the finalizer write names only the finalizers (kept whole).
kopf reads nothing else of these objects either: it runs no change handlers here (no
progress or diff-base annotations are read, kube/handlers.py, main.kopf_settings).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The metadata fields the operator (and kopf, for its watch and Events) reads.
METADATA_FIELDS = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "finalizers",
)
#: The status fields the operator writes (kube.crs.status_patch) and reads back.
STATUS_FIELDS = frozenset(
    {
        "formRef",
        "host",
        "space",
        "name",
        "requested",
        "uid",
        "generation",
        "revision",
        "packageDigest",
        "outputs",
        "pendingOperationId",
        "pendingOperationVerb",
        "attempt",
        "conditions",
        "remedies",
        "observedGeneration",
    }
)


@dataclass(frozen=True, slots=True)
class Kept:
    """The annotations and labels worth keeping, by key."""

    annotations: frozenset[str] = frozenset()
    labels: frozenset[str] = frozenset()


def trimmed(body: Mapping[str, Any], kept: Kept) -> dict[str, Any]:
    """`body` with only what the operator reads (module docstring). A field of the wrong type
    where a mapping belongs is kept as it is: the reconcile reports it, as before."""
    result: dict[str, Any] = {k: body[k] for k in ("apiVersion", "kind", "spec") if k in body}
    metadata = body.get("metadata")
    if isinstance(metadata, Mapping):
        slim = {k: metadata[k] for k in METADATA_FIELDS if k in metadata}
        for part, keys in (("annotations", kept.annotations), ("labels", kept.labels)):
            chosen = _chosen(metadata.get(part), keys)
            if chosen:
                slim[part] = chosen
        result["metadata"] = slim
    elif "metadata" in body:
        result["metadata"] = metadata
    status = body.get("status")
    if isinstance(status, Mapping):
        result["status"] = {k: v for k, v in status.items() if k in STATUS_FIELDS}
    elif "status" in body:
        result["status"] = status
    return result


def _chosen(found: Any, keys: frozenset[str]) -> dict[str, Any]:
    if not isinstance(found, Mapping) or not keys:
        return {}
    if len(found) < len(keys):
        return {k: v for k, v in found.items() if k in keys}
    return {k: found[k] for k in keys if k in found}
