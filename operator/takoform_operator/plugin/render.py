"""What the plugin prints, as pure functions of the documents it read (no I/O, no clients).

The commands (plugin.commands) read the cluster and the host; everything a user sees is built
here: the CR manifest of an import, the table of Blocked CRs, the chain of one trace (the table
of TakoformBindings and what `release` decides, writes and says: plugin.render_bindings).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.policy import PAUSED_ANNOTATION, PAUSED_VALUE
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import Remedy, remedies_line
from takoform_spec.identity import FormLine, FormRef

#: How the core introduces the remedies in a condition message.
REMEDY_MARKERS = ("Remedies:", "Remedy:")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def is_dns_subdomain(name: str) -> bool:
    """A Kubernetes object name: a DNS subdomain."""
    return len(name) <= 253 and _DNS_SUBDOMAIN.fullmatch(name) is not None


class UsageError(ValueError):
    """The command line asks for something that cannot exist (exit status 2)."""


def _text(document: Mapping[str, Any], key: str) -> str:
    """The member `key` of a document read from the cluster or the host, as text ("": none)."""
    return str(document.get(key) or "")


# -- kinds --------------------------------------------------------------------------------------


def resource_of(line: FormLine) -> str:
    """`buckets.storage.takoform.io`: the fully qualified resource kubectl understands."""
    return f"{line.plural}.{line.group}"


def object_ref(line: FormLine, name: str) -> str:
    """`bucket.storage.takoform.io/logs`, as `kubectl get -o name` prints it."""
    return f"{line.kind.lower()}.{line.group}/{name}"


def resolve_kind(registry: Registry, text: str) -> FormLine:
    """The Form line a kubectl-style kind names: `Bucket`, `bucket`, `buckets`, `tkbucket`, each
    optionally qualified by its group (`buckets.storage.takoform.io`). Raises UsageError."""
    wanted = text.strip().lower()
    name, _, group = wanted.partition(".")
    matches = [
        line
        for line in registry.lines()
        if name in (line.kind.lower(), line.plural, "tk" + line.kind.lower())
        and (not group or group == line.group)
    ]
    if len(matches) == 1:
        return matches[0]
    if not matches:
        known = ", ".join(resource_of(line) for line in registry.lines())
        raise UsageError(f"unknown kind {text!r}; the Takoform kinds are: {known}")
    options = ", ".join(resource_of(line) for line in matches)
    raise UsageError(f"kind {text!r} is ambiguous; qualify it with its group: {options}")


def split_kind_name(text: str) -> tuple[str, str]:
    """`KIND/NAME` -> (KIND, NAME). Raises UsageError."""
    kind, slash, name = text.partition("/")
    if not slash or not kind or not name or "/" in name:
        raise UsageError(f"expected KIND/NAME (e.g. bucket/logs), got {text!r}")
    return kind, name


# -- import -------------------------------------------------------------------------------------


def check_object_name(name: str) -> str:
    """A Kubernetes object name (DNS subdomain), or UsageError saying how to choose one."""
    if not is_dns_subdomain(name):
        raise UsageError(
            f"{name!r} is not a valid Kubernetes object name (lower-case letters, digits, '-' "
            "and '.'); choose the CR's name with --name (spec.resourceName keeps the host name)"
        )
    return name


def import_manifest(
    *,
    ref: FormRef,
    space: str,
    name: str,
    parameters: Mapping[str, Any],
    cr_name: str,
    namespace: str | None,
    host_ref: str | None,
    pin: bool,
    management: str,
    deletion_policy: str,
) -> dict[str, Any]:
    """The CR that imports the host resource `name` (space, exact FormRef) as it is: its
    parameters are the host's spec decoded under `ref`, so the first reconcile sends nothing."""
    metadata: dict[str, Any] = {"name": cr_name}
    if namespace:
        metadata["namespace"] = namespace
    spec: dict[str, Any] = {"space": space}
    if host_ref:
        spec["hostRef"] = host_ref
    spec["resourceName"] = name
    spec["importId"] = canonical_import_id(space, name, ref)
    if pin:
        spec["formRef"] = {
            "definitionVersion": ref.definition_version,
            "schemaDigest": ref.schema_digest,
        }
    spec["managementPolicy"] = management
    spec["deletionPolicy"] = deletion_policy
    spec["parameters"] = dict(parameters)
    return {"apiVersion": ref.api_version, "kind": ref.kind, "metadata": metadata, "spec": spec}


# -- blocked ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BlockedRow:
    namespace: str
    resource: str
    reason: str
    remedy: str
    #: For -o json|yaml: the condition's message and the remedies as recorded (status.remedies).
    message: str = ""
    remedies: tuple[Mapping[str, Any], ...] = ()


def condition(body: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for item in (body.get("status") or {}).get("conditions") or ():
        if isinstance(item, Mapping) and item.get("type") == kind:
            return item
    return None


def _recorded_remedies(body: Mapping[str, Any]) -> list[Remedy] | None:
    """The remedies the operator recorded as data (status.remedies); None: none recorded."""
    recorded = (body.get("status") or {}).get("remedies")
    if not isinstance(recorded, list) or not recorded:
        return None
    return [Remedy.from_json(item) for item in recorded if isinstance(item, Mapping)]


def remedies_of(body: Mapping[str, Any], message: str) -> str:
    """The remedies the operator recorded as data (status.remedies), as its messages state them:
    no prose is parsed. A status written before the operator recorded them: remedy_of."""
    recorded = _recorded_remedies(body)
    return remedy_of(message) if recorded is None else remedies_line(recorded)


def remedy_of(message: str) -> str:
    """The remedy as an older operator wrote it: the message from `Remedy:`/`Remedies:` on (the
    whole message when it names none)."""
    found = [(message.find(marker), marker) for marker in REMEDY_MARKERS if marker in message]
    if not found:
        return message.strip()
    at, marker = min(found)
    return message[at + len(marker) :].strip()


def blocked_rows(line: FormLine, items: Iterable[Mapping[str, Any]]) -> list[BlockedRow]:
    """The CRs of one Form line whose Blocked condition is True."""
    rows = []
    for body in items:
        blocked = condition(body, "Blocked")
        if blocked is None or blocked.get("status") != "True":
            continue
        metadata, message = body.get("metadata") or {}, _text(blocked, "message")
        rows.append(
            BlockedRow(
                namespace=_text(metadata, "namespace"),
                resource=object_ref(line, _text(metadata, "name")),
                reason=_text(blocked, "reason"),
                remedy=remedies_of(body, message),
                message=message,
                remedies=tuple(remedy.to_json() for remedy in _recorded_remedies(body) or ()),
            )
        )
    return rows


# -- -o json | yaml -----------------------------------------------------------------------------

#: What -o accepts; `table` is the aligned text of each command.
OUTPUTS = ("table", "json", "yaml")


def _by_resource(rows: Sequence[BlockedRow]) -> list[BlockedRow]:
    return sorted(rows, key=lambda r: (r.namespace, r.resource))


def blocked_document(rows: Sequence[BlockedRow]) -> dict[str, Any]:
    return {
        "items": [
            {
                "namespace": r.namespace,
                "resource": r.resource,
                "reason": r.reason,
                "message": r.message,
                "remedies": [dict(remedy) for remedy in r.remedies],
            }
            for r in _by_resource(rows)
        ]
    }


def printable(text: str) -> str:
    r"""`text` with every control and format character escaped (`\x1b`, `\n`, `\u202e`): a
    tenant's string reaches a terminal as text, never as an escape sequence, a cursor move, a
    bidirectional override or a line of its own that could fake a row or a column."""
    return "".join(
        char.encode("unicode_escape").decode("ascii")
        if unicodedata.category(char) in _UNPRINTABLE or char in "\u2028\u2029"
        else char
        for char in text
    )


_UNPRINTABLE = {"Cc", "Cf"}


def table(headers: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    """Columns aligned like kubectl's; the last column is never padded (it may be long). Every
    cell is printable()."""
    lines = [list(headers), *([printable(cell) for cell in row] for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(headers) - 1)]
    out = []
    for line in lines:
        cells = [cell.ljust(width) for cell, width in zip(line, widths, strict=False)]
        out.append("   ".join([*cells, line[-1]]).rstrip())
    return "\n".join(out)


def blocked_report(rows: Sequence[BlockedRow], namespace: str | None) -> str:
    """The `blocked` output: one row per Blocked CR, or one line saying there is none."""
    if not rows:
        where = f" in namespace {namespace}" if namespace else ""
        return f"No Blocked resources{where}."
    return table(
        ("NAMESPACE", "RESOURCE", "REASON", "REMEDY"),
        [(r.namespace, r.resource, r.reason, r.remedy) for r in _by_resource(rows)],
    )


# -- trace --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lookup:
    """The result of one read a trace makes: the document, or why there is none."""

    document: Mapping[str, Any] | None = None
    #: Why the read was not made or failed (None with no document: not found).
    problem: str | None = None


@dataclass(frozen=True)
class Trace:
    """What `trace` read of one CR: the CR, the host its status records (or its spec names), the
    host resource and the pending operation as read there, and the CR's events."""

    line: FormLine
    cr: Mapping[str, Any]
    host: str
    resource: Lookup
    operation: Lookup
    events: Sequence[Mapping[str, Any]]
    #: How many of the last events are shown.
    event_count: int


def _conditions(items: Iterable[Mapping[str, Any]]) -> list[str]:
    rows = [
        (_text(item, "type"), _text(item, "status"), _reason(item), _text(item, "message"))
        for item in items
    ]
    return _listed(("TYPE", "STATUS", "REASON", "MESSAGE"), rows, "conditions: none")


def _paused(metadata: Mapping[str, Any]) -> bool:
    return (metadata.get("annotations") or {}).get(PAUSED_ANNOTATION) == PAUSED_VALUE


def _reason(condition: Mapping[str, Any]) -> str:
    host = f" (host: {condition['hostReason']})" if condition.get("hostReason") else ""
    return _text(condition, "reason") + host


def _listed(headers: Sequence[str], rows: Sequence[Sequence[str]], empty: str) -> list[str]:
    """`rows` as a table indented under its heading, or `empty` when there are none."""
    return [f"  {line}" for line in table(headers, rows).splitlines()] if rows else [f"  {empty}"]


def _event_time(event: Mapping[str, Any]) -> str:
    series = event.get("series") or {}
    return str(
        series.get("lastObservedTime")
        or event.get("lastTimestamp")
        or event.get("eventTime")
        or event.get("firstTimestamp")
        or (event.get("metadata") or {}).get("creationTimestamp")
        or ""
    )


def last_events(events: Iterable[Mapping[str, Any]], count: int) -> list[Mapping[str, Any]]:
    """The `count` most recent events, oldest first."""
    ordered = sorted(events, key=_event_time)
    return ordered[-count:] if count > 0 else []


def trace_report(trace: Trace) -> str:
    """CR -> recorded FormRef and uid -> host resource -> pending operation -> last events."""
    line = trace.line
    metadata, status = trace.cr.get("metadata") or {}, trace.cr.get("status") or {}
    name, namespace = _text(metadata, "name"), _text(metadata, "namespace")
    out = [
        f"{line.kind} {name} in namespace {namespace} ({object_ref(line, name)})",
        f"  CR uid {metadata.get('uid')}, generation {metadata.get('generation')}, "
        f"observedGeneration {status.get('observedGeneration', '-')}",
    ]
    if _paused(metadata):
        out.append(f'  paused ({PAUSED_ANNOTATION}: "{PAUSED_VALUE}"): no host calls are made')
    out += _conditions(status.get("conditions") or ())

    out.append("FormRef (recorded in status)")
    ref_doc = status.get("formRef")
    if not ref_doc:
        out.append("  none recorded: nothing was sent to a host for this CR yet")
    else:
        out.append(
            f"  {ref_doc.get('apiVersion')} {ref_doc.get('kind')} "
            f"{ref_doc.get('definitionVersion')} {ref_doc.get('schemaDigest')}"
        )
        bound = f"uid {status['uid']}" if status.get("uid") else "not bound to a uid yet"
        out.append(
            f"  host {trace.host}, space {status.get('space')}, name {status.get('name')}, {bound}"
        )

    out.append("Host resource (read under the exact FormRef)")
    out += _resource_lines(trace.resource, status)

    out.append("Pending operation")
    pending = status.get("pendingOperationId")
    if not pending:
        out.append("  none")
    else:
        out.append(f"  {pending} ({status.get('pendingOperationVerb', '?')})")
        out += _operation_lines(trace.operation)

    shown = last_events(trace.events, trace.event_count)
    out.append(f"Events (last {len(shown)} of {len(trace.events)})")
    rows = [
        (
            _event_time(e),
            _text(e, "type"),
            _text(e, "reason"),
            " ".join(_text(e, "message").split()),
        )
        for e in shown
    ]
    out += _listed(("LAST SEEN", "TYPE", "REASON", "MESSAGE"), rows, "none")
    return "\n".join(printable(line) for line in out)


def trace_document(trace: Trace) -> dict[str, Any]:
    """What trace_report shows, as data (-o json|yaml): the CR, what its status recorded, the
    host resource and the pending operation as the host answered (or why they were not read),
    and the last events."""
    metadata, status = trace.cr.get("metadata") or {}, trace.cr.get("status") or {}
    name, pending = _text(metadata, "name"), status.get("pendingOperationId")
    return {
        "cr": {
            "resource": object_ref(trace.line, name),
            "namespace": metadata.get("namespace"),
            "name": name,
            "uid": metadata.get("uid"),
            "generation": metadata.get("generation"),
            "observedGeneration": status.get("observedGeneration"),
            "paused": _paused(metadata),
            "conditions": list(status.get("conditions") or ()),
        },
        "recorded": {
            "formRef": status.get("formRef"),
            "host": trace.host,
            "space": status.get("space"),
            "name": status.get("name"),
            "uid": status.get("uid"),
        },
        "hostResource": _lookup_document(trace.resource),
        "pendingOperation": None
        if not pending
        else {
            "id": pending,
            "verb": status.get("pendingOperationVerb"),
            **_lookup_document(trace.operation),
        },
        "events": [dict(event) for event in last_events(trace.events, trace.event_count)],
        "eventCount": len(trace.events),
    }


def _lookup_document(lookup: Lookup) -> dict[str, Any]:
    if lookup.document is not None:
        return {"found": True, "document": dict(lookup.document)}
    if lookup.problem is not None:
        return {"found": None, "problem": lookup.problem}
    return {"found": False}


def _not_read(lookup: Lookup, absent: str) -> list[str]:
    """Why a trace has no document for `lookup`: the problem, else `absent` (not found)."""
    return [f"  not read: {lookup.problem}" if lookup.problem is not None else f"  {absent}"]


def _resource_lines(resource: Lookup, status: Mapping[str, Any]) -> list[str]:
    if resource.document is None:
        return _not_read(resource, "not found on the host under the recorded FormRef")
    doc = resource.document
    meta, host_status = doc.get("metadata") or {}, doc.get("status") or {}
    lines = [
        f"  uid {meta.get('uid')}, generation {meta.get('generation')}, "
        f"observedGeneration {host_status.get('observedGeneration', '-')}, "
        f"revision {meta.get('revision')}"
    ]
    recorded = status.get("uid")
    if recorded and meta.get("uid") != recorded:
        lines.append(f"  the host serves uid {meta.get('uid')}, the CR is bound to {recorded}")
    return lines + _conditions(host_status.get("conditions") or ())


def _operation_lines(operation: Lookup) -> list[str]:
    if operation.document is None:
        return _not_read(operation, "the host no longer knows it (operation_not_found)")
    doc = operation.document
    lines = [f"  {doc.get('verb')} {doc.get('state')} on {doc.get('space')}/{doc.get('name')}"]
    error = doc.get("error")
    if error:
        lines.append(f"  error {error.get('code')}: {error.get('message')}")
    return lines
