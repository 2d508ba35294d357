"""What `bindings` and `release` print, decide and write, as pure functions of the
TakoformBindings read (no I/O, no clients; plugin.commands reads and writes them).

`bindings` lists one row per TakoformBinding; `release` lets go of a host resource whose owner is
gone, or reserves it for one CR: whether it may (`release_refusal`), what it hands across
namespaces (`hand_off`), the object it writes (`reserved_document`, `unprotected_document`,
`forced_document`) and what it says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, astuple, dataclass
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
from takoform_operator.core.remedies import kubectl_name, release_command
from takoform_operator.core.shard_ring import SLOT_LABEL
from takoform_operator.plugin.render import UsageError, is_dns_subdomain, printable, table

_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")

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

    def to_json(self) -> dict[str, str]:
        """The row as -o json|yaml shows it: its columns in order, lastOwner last."""
        document = asdict(self)
        document["lastOwner"] = document.pop("last_owner")
        return document


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


def _by_target(rows: Sequence[BindingRow]) -> list[BindingRow]:
    """The order `bindings` shows them in: by what they bind."""
    return sorted(rows, key=lambda r: (r.host, r.space, r.kind, r.resource, r.name))


def bindings_document(rows: Sequence[BindingRow]) -> dict[str, Any]:
    """The `bindings` rows as data (-o json|yaml), in the order the table shows them."""
    return {"items": [row.to_json() for row in _by_target(rows)]}


def bindings_report(rows: Sequence[BindingRow]) -> str:
    """The `bindings` output: one row per binding, ordered by what it binds, or one line saying
    there is none."""
    if not rows:
        return "No TakoformBindings."
    return table(
        ("NAME", "PHASE", "HOST", "SPACE", "KIND", "RESOURCE", "OWNER", "LAST OWNER"),
        [astuple(row) for row in _by_target(rows)],
    )


def binding_name_arg(text: str) -> str:
    """The BINDING of `release`: the object's name, also as `kubectl get -o name` prints it
    (`takoformbinding.operator.takoform.io/tb-...`). Raises UsageError."""
    name = _BINDING_PREFIXES.sub("", text.strip(), count=1)
    if not is_dns_subdomain(name):
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
        or not is_dns_subdomain(name)
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
    but the protection, which a pre-binding does not carry, and the slot label (hash sharding):
    without it every replica watches the binding, whichever serves the CR it is reserved for.
    Its metadata.resourceVersion makes the replace conditional on nobody having written since."""
    document = unprotected_document(body)
    labels = document["metadata"].get("labels")
    if isinstance(labels, Mapping):
        document["metadata"]["labels"] = {k: v for k, v in labels.items() if k != SLOT_LABEL}
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
