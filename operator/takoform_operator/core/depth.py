"""How deep the operator reads a CR, and what it sees where it stopped (pure).

The API server accepts free-form JSON nested up to 10,000 levels; Python's json raises
RecursionError from about 1,000. This module is the one depth-safe JSON decoder:

- `safe_loads` keeps at most a given number of levels of objects and lists: whatever is nested
  deeper is replaced by the string PRUNED, never read, never sent. The kopf adapter
  (kube.json_seam) decodes every object the API server sends with it, and so does the kubectl
  plugin. The reconcile finds the places with `pruned_paths` and reports them as the CR's
  condition (Degraded, NestedTooDeep) instead of sending a spec it could not read whole.
- `strict_loads` decodes a document as it is or raises TooDeep: the host client's answers,
  where a deeper one is outside the contract (HostProtocolError), not something to cut.
"""

from __future__ import annotations

import json
import re
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


# -- decoding ------------------------------------------------------------------------------------

#: Python refuses integers of more digits than this (sys.get_int_max_str_digits); the API
#: server never sends one (its numbers are int64 or float64).
_INT_DIGITS = 4300

_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_PAIR = re.compile(r"\{\}|\[\]")
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')
_PRUNED_JSON = json.dumps(PRUNED)


def prune(text: str, limit: int) -> str:
    """`text` with every object or list that opens deeper than `limit` levels replaced by
    PRUNED (a JSON string). Strings are skipped whole, so brackets inside them do not count."""
    pieces: list[str] = []
    depth, cut, kept = 0, -1, 0
    for match in _TOKEN.finditer(text):
        char = text[match.start()]
        if char == '"':
            continue
        if char in "[{":
            depth += 1
            if depth == limit + 1 and cut < 0:
                cut = match.start()
        else:
            if depth == limit + 1 and cut >= 0:
                pieces += (text[kept:cut], _PRUNED_JSON)
                kept, cut = match.end(), -1
            depth -= 1
    pieces.append(text[kept:])
    return "".join(pieces)


def _bounded_int(digits: str) -> int | str:
    return int(digits) if len(digits.lstrip("-")) <= _INT_DIGITS else PRUNED


def deeper_than(text: str, limit: int) -> bool:
    """Whether `text` nests objects or lists deeper than `limit` levels, with C-speed string
    operations only (scanning an ordinary object token by token in Python took 20 times as long
    as decoding it): escapes dropped, then the strings (every other piece between quotes), then
    all but the brackets, then the innermost pairs removed once per level."""
    if text.count("{") + text.count("[") <= limit:
        return False
    unescaped = text.replace("\\\\", "").replace('\\"', "")
    brackets = _NOT_BRACKET.sub("", "".join(unescaped.split('"')[::2]))
    for _ in range(limit):
        if not brackets:
            return False
        brackets = _PAIR.sub("", brackets)
    return bool(brackets)


def safe_loads(text: str | bytes, limit: int) -> Any:
    """Decode JSON `text` keeping at most `limit` levels of objects and lists (deeper values
    become PRUNED, as do integers Python would refuse). Raises ValueError if even that fails."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")  # as the API server's own encoder does
    if not deeper_than(text, limit):
        try:
            return json.loads(text)
        except (ValueError, RecursionError):
            pass  # decoded again below, where an integer too long to convert is cut too
    return json.loads(prune(text, limit), parse_int=_bounded_int)


class TooDeep(ValueError):
    """A JSON document nested deeper than its reader allows."""


def strict_loads(text: str | bytes, limit: int) -> Any:
    """Decode JSON `text` as it is when it nests at most `limit` levels of objects and lists.
    Raises TooDeep when it nests deeper, ValueError when it is not JSON (or not UTF-8)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if deeper_than(text, limit):
        raise TooDeep(f"JSON nested deeper than {limit} levels")
    return json.loads(text)
