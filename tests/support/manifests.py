"""CR manifests the end-to-end tests apply: one Bucket builder instead of one per test module."""

from __future__ import annotations

import json
from typing import Any


def bucket(
    name: str,
    size: int = 10,
    *,
    space: str = "team-a",
    labels: dict[str, str] | None = None,
    **spec: Any,
) -> str:
    """A Bucket CR (JSON) in `space` with sizeGiB `size` and `labels`; `spec` adds or replaces
    spec fields (resourceName, importId, hostRef, deletionPolicy, ...)."""
    return json.dumps(
        {
            "apiVersion": "storage.takoform.io/v1",
            "kind": "Bucket",
            "metadata": {"name": name, **({"labels": labels} if labels else {})},
            "spec": {
                "space": space,
                "parameters": {"region": "eu-west-1", "sizeGiB": size},
                **spec,
            },
        }
    )
