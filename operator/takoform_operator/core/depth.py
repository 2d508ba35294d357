"""How deep the operator reads a CR, and what it sees where it stopped (pure).

The API server accepts free-form JSON nested up to 10,000 levels; Python's json raises
RecursionError from about 1,000. The kopf adapter (kube.json_seam) therefore decodes every
object the API server sends with at most MAX_DEPTH levels of objects and lists: whatever is
nested deeper is replaced by the string PRUNED, never read, never sent. The reconcile finds the
places with `pruned_paths` and reports them as the CR's condition (Degraded, NestedTooDeep)
instead of sending a spec it could not read whole.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Levels of objects and lists the operator reads in one Kubernetes object (the object itself
#: is level 1). The deepest field of a Form today is 4 levels down (spec.parameters.labels.KEY).
MAX_DEPTH = 64
#: What stands where a value nested deeper than MAX_DEPTH was cut (a NUL-framed string: no
#: Form field means it, and a CR that spells it out is only reported as too deep itself).
PRUNED = "\x00takoform.io/pruned: nested too deep to read\x00"
#: Path segments are cut to this many characters in a message (a key can be 250 KiB long).
_SEGMENT = 40
#: And the path to this many.
_PATH = 200


def pruned_paths(value: Any, root: str) -> list[str]:
    """Where in `value` (a decoded JSON value found at `root`, e.g. "spec") PRUNED stands, as
    short dotted paths, in document order (iterative: the value may be MAX_DEPTH deep)."""
    found: list[str] = []
    stack: list[tuple[str, Any]] = [(root, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, str):
            if item == PRUNED:
                found.append(path if len(path) <= _PATH else path[: _PATH - 3] + "...")
        elif isinstance(item, Mapping):
            children = [(f"{path}.{_segment(str(key))}", child) for key, child in item.items()]
            stack.extend(reversed(children))
        elif isinstance(item, list):
            stack.extend(reversed([(f"{path}[{i}]", child) for i, child in enumerate(item)]))
    return found


def too_deep_message(paths: list[str]) -> str:
    """The condition message for a CR whose spec has values nested too deep to read."""
    where = paths[0] + (f" (and {len(paths) - 1} more)" if len(paths) > 1 else "")
    return (
        f"{where} is nested deeper than {MAX_DEPTH} levels: the operator does not read it "
        "and sends nothing for this CR; make the value shallower (a Form field is never "
        "that deep)"
    )


def _segment(key: str) -> str:
    return key if len(key) <= _SEGMENT else key[: _SEGMENT - 3] + "..."
