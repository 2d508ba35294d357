"""Host words are scrubbed of every value known to be secret before anyone can read them.

A host's messages (a refusal, a failed operation's error, a condition of the resource) are shown
in the CR's conditions and Events, which `view` users read, and may reach the log. A host may
echo what it knows into them, a sensitive output included (docs/host-api.md H-39 forbids it; the
operator does not rely on it). `scrub_outcome` is the one place an Outcome's words are scrubbed:
service.reconcile calls it on every outcome, with the values `known_secrets` collects (the
sensitive outputs of the representation the reconcile read, and the values the operator last
wrote into the CR's connection Secret).

A value is found as written and as a JSON string or a Python repr would quote it (a key with
newlines echoed in a JSON document is `\\n`-escaped); a message the client cut short (`clip`)
loses a secret's leading fragment just before the cut too. Values shorter than
`MIN_SECRET_CHARS` are not searched for: replacing every "1" would garble every message, and
no host generates a credential that short.

Pure: no I/O, no kopf.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from typing import Any

from .errors import CodecError, UnknownFormRef
from .outcome import Outcome
from .registry import Registry
from .state import ResourceView

REDACTED = "<redacted>"
MIN_SECRET_CHARS = 4
#: What `clip` appends where it cut a text.
CUT_MARK = "… (cut: "


def clip(text: str, limit: int) -> str:
    """`text` cut to `limit` characters, saying so, when longer (a host's words are bounded)."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}{CUT_MARK}{len(text)} characters)"


def _spellings(value: str) -> set[str]:
    """The ways `value` appears in a text: as is, JSON-escaped, repr-escaped."""
    return {
        value,
        json.dumps(value)[1:-1],
        json.dumps(value, ensure_ascii=False)[1:-1],
        repr(value)[1:-1],
    }


def scrub(text: str, secrets: Collection[str]) -> str:
    """`text` with every known secret value replaced by REDACTED."""
    if not text or not secrets:
        return text
    spellings = sorted(
        {s for value in secrets if len(value) >= MIN_SECRET_CHARS for s in _spellings(value)},
        key=len,
        reverse=True,
    )
    for spelling in spellings:
        text = text.replace(spelling, REDACTED)
    return _scrub_cut_fragments(text, spellings)


def _scrub_cut_fragments(text: str, spellings: list[str]) -> str:
    """A secret the client's cut left half of, right before the cut mark."""
    if CUT_MARK not in text:
        return text
    head, mark, tail = text.rpartition(CUT_MARK)
    for spelling in spellings:
        for length in range(len(spelling) - 1, MIN_SECRET_CHARS - 1, -1):
            if head.endswith(spelling[:length]):
                head = head[:-length] + REDACTED
                break
    return head + mark + tail


def scrub_outcome(outcome: Outcome, secrets: Collection[str]) -> Outcome:
    """The outcome with every condition and Event message scrubbed (the one place)."""
    if not secrets:
        return outcome
    conditions = tuple(replace(c, message=scrub(c.message, secrets)) for c in outcome.conditions)
    events = tuple(replace(e, message=scrub(e.message, secrets)) for e in outcome.events)
    if conditions == outcome.conditions and events == outcome.events:
        return outcome
    return replace(outcome, conditions=conditions, events=events)


def known_secrets(
    registry: Registry, resource: ResourceView | None, written: Iterable[str] = ()
) -> frozenset[str]:
    """The secret values a reconcile knows: the sensitive outputs of `resource` (by its exact
    definition; by every definition of its line that the build knows, when that one does not
    decode) and the values `written` into the connection Secret before."""
    values = {str(v) for v in written if str(v)}
    if resource is not None:
        values |= set(_sensitive_outputs(registry, resource).values())
    return frozenset(v for v in values if v)


def _sensitive_outputs(registry: Registry, resource: ResourceView) -> Mapping[str, str]:
    ref = resource.form_ref
    try:
        return registry.codec_for(ref).decode_sensitive_outputs(ref, resource.outputs)
    except (CodecError, UnknownFormRef, KeyError):
        pass  # not decodable under its own definition: by name, every definition of the line
    names = {
        spec.name
        for known in registry.known_refs(ref.line)
        for spec in registry.codec_for(known).outputs_for(known)
        if spec.sensitive
    }
    outputs: Mapping[str, Any] = resource.outputs if isinstance(resource.outputs, Mapping) else {}
    return {name: v for name, v in outputs.items() if name in names and isinstance(v, str)}
