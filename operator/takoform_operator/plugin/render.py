"""What the plugin prints, as pure functions of the documents it read (no I/O, no clients).

The commands (plugin.commands) read the cluster and the host; everything a user sees is built
here: the CR manifest of an import, the table of Blocked CRs, the chain of one trace, the table
of TakoformBindings, and what `release` decides, writes and says.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from takoform_operator.core.binding import (
    BINDING_KIND,
    FORCE_ANNOTATION,
    PROTECTION_FINALIZER,
    Binding,
    ClaimRef,
    InvalidBinding,
    Phase,
    binding_from_json,
)
from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import Remedy, kubectl_name, release_command, remedies_line
from takoform_spec.identity import FormLine, FormRef

#: The pause annotation (docs/operator.md); shown by `trace` when set.
PAUSED_ANNOTATION = "takoform.io/paused"
#: How the core introduces the remedies in a condition message.
REMEDY_MARKERS = ("Remedies:", "Remedy:")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class UsageError(ValueError):
    """The command line asks for something that cannot exist (exit status 2)."""


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
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
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


def remedies_of(body: Mapping[str, Any], message: str) -> str:
    """The remedies the operator recorded as data (status.remedies), as its messages state them:
    no prose is parsed. A status written before the operator recorded them: remedy_of."""
    recorded = (body.get("status") or {}).get("remedies")
    if not isinstance(recorded, list) or not recorded:
        return remedy_of(message)
    return remedies_line([Remedy.from_json(item) for item in recorded if isinstance(item, Mapping)])


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
        metadata = body.get("metadata") or {}
        rows.append(
            BlockedRow(
                namespace=str(metadata.get("namespace") or ""),
                resource=object_ref(line, str(metadata.get("name") or "")),
                reason=str(blocked.get("reason") or ""),
                remedy=remedies_of(body, str(blocked.get("message") or "")),
                message=str(blocked.get("message") or ""),
                remedies=_recorded_remedies(body),
            )
        )
    return rows


def _recorded_remedies(body: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    recorded = (body.get("status") or {}).get("remedies")
    if not isinstance(recorded, list):
        return ()
    return tuple(Remedy.from_json(item).to_json() for item in recorded if isinstance(item, Mapping))


# -- -o json | yaml -----------------------------------------------------------------------------

#: What -o accepts; `table` is the aligned text of each command.
OUTPUTS = ("table", "json", "yaml")


def blocked_document(rows: Sequence[BlockedRow]) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda r: (r.namespace, r.resource))
    return {
        "items": [
            {
                "namespace": r.namespace,
                "resource": r.resource,
                "reason": r.reason,
                "message": r.message,
                "remedies": [dict(remedy) for remedy in r.remedies],
            }
            for r in ordered
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
    ordered = sorted(rows, key=lambda r: (r.namespace, r.resource))
    return table(
        ("NAMESPACE", "RESOURCE", "REASON", "REMEDY"),
        [(r.namespace, r.resource, r.reason, r.remedy) for r in ordered],
    )


# -- trace --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Lookup:
    """The result of one read a trace makes: the document, or why there is none."""

    document: Mapping[str, Any] | None = None
    #: Why the read was not made or failed (None with no document: not found).
    problem: str | None = None


def _conditions(items: Iterable[Mapping[str, Any]], indent: str) -> list[str]:
    rows = []
    for item in items:
        reason = str(item.get("reason") or "")
        if item.get("hostReason"):
            reason += f" (host: {item['hostReason']})"
        rows.append(
            (
                str(item.get("type") or ""),
                str(item.get("status") or ""),
                reason,
                str(item.get("message") or ""),
            )
        )
    if not rows:
        return [f"{indent}conditions: none"]
    text = table(("TYPE", "STATUS", "REASON", "MESSAGE"), rows)
    return [f"{indent}{line}" for line in text.splitlines()]


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


def trace_report(
    line: FormLine,
    cr: Mapping[str, Any],
    *,
    host: str,
    resource: Lookup,
    operation: Lookup,
    events: Sequence[Mapping[str, Any]],
    event_count: int,
) -> str:
    """CR -> recorded FormRef and uid -> host resource -> pending operation -> last events."""
    metadata, status = cr.get("metadata") or {}, cr.get("status") or {}
    name, namespace = str(metadata.get("name") or ""), str(metadata.get("namespace") or "")
    out = [
        f"{line.kind} {name} in namespace {namespace} ({object_ref(line, name)})",
        f"  CR uid {metadata.get('uid')}, generation {metadata.get('generation')}, "
        f"observedGeneration {status.get('observedGeneration', '-')}",
    ]
    annotations = metadata.get("annotations") or {}
    if annotations.get(PAUSED_ANNOTATION) == "true":
        out.append(f'  paused ({PAUSED_ANNOTATION}: "true"): no host calls are made')
    out += _conditions(status.get("conditions") or (), "  ")

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
            f"  host {host}, space {status.get('space')}, name {status.get('name')}, {bound}"
        )

    out.append("Host resource (read under the exact FormRef)")
    out += _resource_lines(resource, status)

    out.append("Pending operation")
    pending = status.get("pendingOperationId")
    if not pending:
        out.append("  none")
    else:
        out.append(f"  {pending} ({status.get('pendingOperationVerb', '?')})")
        out += _operation_lines(operation)

    shown = last_events(events, event_count)
    out.append(f"Events (last {len(shown)} of {len(events)})")
    if not shown:
        out.append("  none")
    else:
        rows = [
            (
                _event_time(e),
                str(e.get("type") or ""),
                str(e.get("reason") or ""),
                " ".join(str(e.get("message") or "").split()),
            )
            for e in shown
        ]
        text = table(("LAST SEEN", "TYPE", "REASON", "MESSAGE"), rows)
        out += [f"  {row}" for row in text.splitlines()]
    return "\n".join(printable(line) for line in out)


def trace_document(
    line: FormLine,
    cr: Mapping[str, Any],
    *,
    host: str,
    resource: Lookup,
    operation: Lookup,
    events: Sequence[Mapping[str, Any]],
    event_count: int,
) -> dict[str, Any]:
    """What trace_report shows, as data (-o json|yaml): the CR, what its status recorded, the
    host resource and the pending operation as the host answered (or why they were not read),
    and the last events."""
    metadata, status = cr.get("metadata") or {}, cr.get("status") or {}
    name = str(metadata.get("name") or "")
    annotations = metadata.get("annotations") or {}
    pending = status.get("pendingOperationId")
    return {
        "cr": {
            "resource": object_ref(line, name),
            "namespace": metadata.get("namespace"),
            "name": name,
            "uid": metadata.get("uid"),
            "generation": metadata.get("generation"),
            "observedGeneration": status.get("observedGeneration"),
            "paused": annotations.get(PAUSED_ANNOTATION) == "true",
            "conditions": list(status.get("conditions") or ()),
        },
        "recorded": {
            "formRef": status.get("formRef"),
            "host": host,
            "space": status.get("space"),
            "name": status.get("name"),
            "uid": status.get("uid"),
        },
        "hostResource": _lookup_document(resource),
        "pendingOperation": None
        if not pending
        else {
            "id": pending,
            "verb": status.get("pendingOperationVerb"),
            **_lookup_document(operation),
        },
        "events": [dict(event) for event in last_events(events, event_count)],
        "eventCount": len(events),
    }


def _lookup_document(lookup: Lookup) -> dict[str, Any]:
    if lookup.document is not None:
        return {"found": True, "document": dict(lookup.document)}
    if lookup.problem is not None:
        return {"found": None, "problem": lookup.problem}
    return {"found": False}


def _resource_lines(resource: Lookup, status: Mapping[str, Any]) -> list[str]:
    if resource.document is None:
        if resource.problem is not None:
            return [f"  not read: {resource.problem}"]
        return ["  not found on the host under the recorded FormRef"]
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
    return lines + _conditions(host_status.get("conditions") or (), "  ")


def _operation_lines(operation: Lookup) -> list[str]:
    if operation.document is None:
        if operation.problem is not None:
            return [f"  not read: {operation.problem}"]
        return ["  the host no longer knows it (operation_not_found)"]
    doc = operation.document
    lines = [f"  {doc.get('verb')} {doc.get('state')} on {doc.get('space')}/{doc.get('name')}"]
    error = doc.get("error")
    if error:
        lines.append(f"  error {error.get('code')}: {error.get('message')}")
    return lines


# -- bindings -----------------------------------------------------------------------------------

#: The OWNER of a binding without claimRef, the LAST OWNER of one without lastOwner, the PHASE of
#: an object core.binding cannot read (it binds nothing to anyone).
NO_OWNER, NO_LAST_OWNER, INVALID_PHASE = "<none>", "-", "Invalid"
#: After OWNER: the claimRef has no uid, so it is an admin's pre-binding to that namespace/name.
RESERVED = "(reserved)"
#: How kubectl names the objects (`kubectl get tkb -o name`), accepted before a binding's name.
_BINDING_PREFIXES = re.compile(
    r"^(takoformbindings?(\.operator\.takoform\.io)?|tkb)/", re.IGNORECASE
)


@dataclass(frozen=True)
class BindingRow:
    name: str
    phase: str
    host: str
    space: str
    kind: str
    resource: str
    owner: str
    last_owner: str


def owner_text(claim: ClaimRef | None) -> str:
    """`team-a/logs`; `team-a/logs (reserved)` without a uid; `<none>` without a claimRef."""
    if claim is None:
        return NO_OWNER
    return f"{claim} {RESERVED}" if not claim.uid else str(claim)


def binding_rows(items: Iterable[Mapping[str, Any]]) -> list[BindingRow]:
    """One row per TakoformBinding object; one core.binding cannot read is `Invalid`, with what
    of its spec can be shown."""
    rows = []
    for body in items:
        name = str((body.get("metadata") or {}).get("name") or "")
        try:
            binding = binding_from_json(body)
        except InvalidBinding:
            rows.append(_invalid_row(name, body))
            continue
        identity = binding.identity
        rows.append(
            BindingRow(
                name=name,
                phase=str(binding.phase),
                host=identity.host,
                space=identity.space,
                kind=identity.line.kind,
                resource=identity.name,
                owner=owner_text(binding.claim),
                last_owner=str(binding.last_owner) if binding.last_owner else NO_LAST_OWNER,
            )
        )
    return rows


def _invalid_row(name: str, body: Mapping[str, Any]) -> BindingRow:
    spec = body.get("spec")
    spec = spec if isinstance(spec, Mapping) else {}

    def text(key: str) -> str:
        value = spec.get(key)
        return value if isinstance(value, str) else ""

    return BindingRow(
        name, INVALID_PHASE, text("host"), text("space"), text("kind"), text("resourceName"),
        NO_OWNER, NO_LAST_OWNER,
    )  # fmt: skip


def bindings_document(rows: Sequence[BindingRow]) -> dict[str, Any]:
    """The `bindings` rows as data (-o json|yaml), in the order the table shows them."""
    ordered = sorted(rows, key=lambda r: (r.host, r.space, r.kind, r.resource, r.name))
    return {
        "items": [
            {
                "name": r.name,
                "phase": r.phase,
                "host": r.host,
                "space": r.space,
                "kind": r.kind,
                "resource": r.resource,
                "owner": r.owner,
                "lastOwner": r.last_owner,
            }
            for r in ordered
        ]
    }


def bindings_report(rows: Sequence[BindingRow]) -> str:
    """The `bindings` output: one row per binding, ordered by what it binds, or one line saying
    there is none."""
    if not rows:
        return "No TakoformBindings."
    ordered = sorted(rows, key=lambda r: (r.host, r.space, r.kind, r.resource, r.name))
    return table(
        ("NAME", "PHASE", "HOST", "SPACE", "KIND", "RESOURCE", "OWNER", "LAST OWNER"),
        [
            (r.name, r.phase, r.host, r.space, r.kind, r.resource, r.owner, r.last_owner)
            for r in ordered
        ],
    )


def binding_name_arg(text: str) -> str:
    """The BINDING of `release`: the object's name, also as `kubectl get -o name` prints it
    (`takoformbinding.operator.takoform.io/tb-...`). Raises UsageError."""
    name = _BINDING_PREFIXES.sub("", text.strip(), count=1)
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise UsageError(
            f"{printable(text)!r} is not a TakoformBinding name (tb-..., as kubectl takoform "
            "bindings lists them)"
        )
    return name


def claim_arg(text: str) -> ClaimRef:
    """--to NAMESPACE/NAME: the CR a binding is reserved for, without uid. Raises UsageError."""
    namespace, slash, name = text.partition("/")
    if (
        not slash
        or len(namespace) > 63
        or not _DNS_LABEL.fullmatch(namespace)
        or len(name) > 253
        or not _DNS_SUBDOMAIN.fullmatch(name)
    ):
        raise UsageError(
            f"--to wants NAMESPACE/NAME of a CR (e.g. team-a/logs), got {printable(text)!r}"
        )
    return ClaimRef(namespace, name)


def _what(binding: Binding) -> str:
    identity = binding.identity
    return (
        f"{identity.line.kind} {identity.name!r} in space {identity.space!r} on host "
        f"{identity.host!r}"
    )


def release_refusal(name: str, binding: Binding) -> str | None:
    """Why `release` must not touch this binding (None: it may). A binding Bound to a CR's uid is
    that CR's: the CR lets go first (deletionPolicy Orphan, then deleted), and the operator marks
    the binding Released."""
    claim = binding.claim
    if binding.phase is not Phase.BOUND or claim is None or not claim.uid:
        return None
    obj = kubectl_name(binding.identity.line, claim.name, claim.namespace)
    return printable(
        f"{name} is bound to {claim}; delete that CR with deletionPolicy Orphan first: "
        f"{release_command(obj)}"
    )


def hand_off(name: str, binding: Binding, to: ClaimRef) -> str | None:
    """What reserving the binding for `to` hands across namespaces (None: it stays in the
    namespace it is of, Binding.home). Where the binding recorded the uid of a namespace of
    `to`'s name, `to.namespace_uid` is that namespace's uid now (UNKNOWN_UID: none, or not
    readable)."""
    if not binding.hands_across(to):
        return None
    home = binding.home
    if home is None:
        of = "of no namespace (made by hand)"
    else:
        if home.uid and home is binding.claim:
            role = "owner"
        else:
            role = "last owner" if home is binding.last_owner else "reserved for"
        of = f"of namespace {home.namespace!r} ({role} {home})"
        if home.namespace == to.namespace:
            of += ", which was deleted and created again since, or cannot be read"
    return printable(
        f"{name} is {of}; reserving it for {to} hands {_what(binding)} to namespace "
        f"{to.namespace!r}"
    )


#: The namespace uid of a --to target that does not exist or cannot be read: matches none.
UNKNOWN_UID = "(unknown)"


def reserved_document(body: Mapping[str, Any], claim: ClaimRef) -> dict[str, Any]:
    """The object as read with spec.claimRef set to `claim` (no uid) and nothing else changed
    but the protection, which a pre-binding does not carry: its metadata.resourceVersion makes
    the replace conditional on nobody having written since."""
    document = unprotected_document(body)
    document["spec"] = {**(body.get("spec") or {}), "claimRef": claim.to_json()}
    return document


def unprotected_document(body: Mapping[str, Any]) -> dict[str, Any]:
    """The object as read without the protection finalizer (a binding about to be deleted or
    reserved, whose operator would otherwise have to remove it)."""
    document = _as_read(body)
    metadata = document["metadata"]
    if metadata.get("finalizers"):
        metadata["finalizers"] = [f for f in metadata["finalizers"] if f != PROTECTION_FINALIZER]
    return document


def forced_document(body: Mapping[str, Any], binding: Binding) -> dict[str, Any]:
    """The object as read, marked forced: the admission policy then lets an admin delete or
    reserve it although it is Bound to a CR."""
    document = _as_read(body)
    annotations = dict(document["metadata"].get("annotations") or {})
    annotations[FORCE_ANNOTATION] = printable(
        f"released by force from {binding.claim} with kubectl takoform release --force"
    )
    document["metadata"]["annotations"] = annotations
    return document


def forced_warning(binding: Binding) -> str:
    return printable(
        f"Forced: {binding.claim} was Bound to it and still acts on {_what(binding)}; it binds "
        "it again at its next look unless another CR binds it first."
    )


def _as_read(body: Mapping[str, Any]) -> dict[str, Any]:
    document = {key: value for key, value in body.items() if key != "status"}
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
    document["metadata"] = metadata
    return document


def reserved_message(name: str, binding: Binding, claim: ClaimRef) -> str:
    return printable(
        f"{BINDING_KIND} {name} reserved for {claim}: only the {binding.identity.line.kind} "
        f"{claim.name!r} in namespace {claim.namespace!r} may bind {_what(binding)} (phase "
        f"{binding.phase} kept{_last_owner(binding)})."
    )


def unbound_message(name: str, binding: Binding) -> str:
    return printable(
        f"{BINDING_KIND} {name} deleted (it was {binding.phase}{_reserved(binding)}"
        f"{_last_owner(binding)}): "
        f"{_what(binding)} is unbound; any namespace granted space {binding.identity.space!r} "
        f"on host {binding.identity.host!r} may import it."
    )


def _reserved(binding: Binding) -> str:
    return f", reserved for {binding.claim}" if binding.claim else ""


def _last_owner(binding: Binding) -> str:
    return f", last owner {binding.last_owner}" if binding.last_owner else ""
