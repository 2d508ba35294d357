"""Builders of the values tests start from: the production registry, a Bucket's desired spec
(core.state.Desired), its bound state (core.state.State) and a Bucket CR body as the API server
holds it, and the resource a host serves (core.state.ResourceView). One place for the defaults, so
a test states only what it is about: `desired(name="x")`, `bound(uid="u-2")`,
`served(uid="h-2", creation_key=...)`, `cr_body(status=..., deleting=True)`.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from takoform_operator.core.state import Desired, Requested, ResourceView, State
from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

REGISTRY = load_registry()
BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
#: The FormRef a Bucket is created under (DefaultCreates of the production registry).
BUCKET_REF = REGISTRY.default_create_ref(BUCKET)
SPEC: dict[str, Any] = {"region": "eu-west-1", "sizeGiB": 10}
FINALIZER = "takoform.io/finalizer"


def desired(**changes: Any) -> Desired:
    """A Bucket CR's desired spec: CR `cr-1` (generation 1) wants `team-a/logs` with SPEC."""
    base = Desired(
        cr_uid="cr-1", cr_generation=1, line=BUCKET, space="team-a", name="logs", parameters=SPEC
    )
    return replace(base, **changes)


def bound(want: Desired | None = None, **changes: Any) -> State:
    """The state of a CR bound to the host resource `want` names (default: desired()), created
    under BUCKET_REF with uid `u-1` at generation 1, its identity fields recorded."""
    want = want or desired()
    base = State(
        form_ref=BUCKET_REF,
        space=want.space,
        name=want.name,
        uid="u-1",
        generation="1",
        requested=Requested.of(want),
    )
    return replace(base, **changes)


def served(**changes: Any) -> ResourceView:
    """What the host serves for `team-a/logs` under BUCKET_REF: uid `u-1`, generation and
    revision 1, SPEC as its spec."""
    assert BUCKET_REF is not None
    base = ResourceView(
        form_ref=BUCKET_REF,
        space="team-a",
        name="logs",
        uid="u-1",
        generation="1",
        revision="1",
        spec=SPEC,
    )
    return replace(base, **changes)


def cr_body(
    *,
    name: str = "logs",
    namespace: str = "demo",
    uid: str = "cr-1",
    generation: int = 1,
    annotations: dict[str, str] | None = None,
    status: dict[str, Any] | None = None,
    deleting: bool = False,
    **spec: Any,
) -> dict[str, Any]:
    """A Bucket CR body: spec `space: team-a` and SPEC as parameters unless `spec` says
    otherwise; `deleting` adds a deletionTimestamp and the operator's finalizer."""
    metadata: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid,
        "generation": generation,
        "creationTimestamp": "2026-11-30T08:00:00Z",
        "annotations": annotations or {},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-30T09:00:00Z"
        metadata["finalizers"] = [FINALIZER]
    body: dict[str, Any] = {
        "apiVersion": BUCKET.api_version,
        "kind": BUCKET.kind,
        "metadata": metadata,
        "spec": {"space": "team-a", "parameters": SPEC, **spec},
    }
    if status is not None:
        body["status"] = status
    return body
