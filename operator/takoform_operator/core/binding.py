"""Who owns a host resource: one TakoformBinding per identity, written on the API server.

A host resource is named by its `Identity` (host, space, Form line, name). Its owner is recorded
in one cluster-scoped `TakoformBinding` whose object name is a digest of that identity, so every
process, shard and replica computes the same name and the API server's `create` is the lock:
whoever creates it owns the resource; `AlreadyExists` means someone else does. Later changes use
resourceVersion preconditions. This is the PersistentVolume's `claimRef`, for host resources:

- `Bound`: `claim` is the owner CR (namespace, name, uid). A claim without a uid is an admin's
  pre-binding: only the CR of that namespace and name may bind it.
- `Released`: the owner was deleted with `deletionPolicy: Orphan`; `last_owner` remembers it.
- `Lost`: the owner vanished without releasing (finalizer removed, namespace force-deleted).

The binding also records the target chosen when it was bound (the exact FormRef and the identity
fields, `Requested`), so it is the write-ahead record of the claim: nothing is sent before it
exists. `uid` is the host incarnation the binding was last known bound to (written when the
owner lets go, or found gone). The rules of who may bind what are `core.ownership`. Pure: no
kopf, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from takoform_spec.canonical import canonical_json, sha256_digest
from takoform_spec.identity import FormLine, FormRef

from .shard_ring import SLOT_LABEL
from .state import DEFAULT_HOST, Requested, requested_from_json, requested_to_json
from .tenancy import GROUP, VERSION

BINDING_KIND, BINDING_PLURAL = "TakoformBinding", "takoformbindings"
BINDING_API_VERSION = f"{GROUP}/{VERSION}"
#: Object names: this prefix and 40 hex digits of the identity's digest (a valid DNS label).
_NAME_PREFIX = "tb-"
#: The namespace of the CR a binding names (its owner, else its last owner), as a label:
#: `kubectl get takoformbindings -l takoform.io/namespace=team-a`.
NAMESPACE_LABEL = "takoform.io/namespace"
#: On a binding Bound to a CR: nobody deletes it from under its owner (like pv-protection). The
#: operator removes it when the owner lets go; the binding then goes, or stays Released/Lost.
PROTECTION_FINALIZER = "takoform.io/binding-protection"
#: The user the operator authenticates as. The admission policy shipped with the CRDs
#: (crds/takoformbinding-protection.yaml) lets only that user delete a Bound binding or change
#: anything but its annotations (docs/tenancy.md "A Bound binding is protected").
GUARDIAN_ANNOTATION = "takoform.io/guardian"
#: An admin's explicit override of that policy (`kubectl takoform release --force`): its value
#: says who forced what, and why.
FORCE_ANNOTATION = "takoform.io/force-release"


@dataclass(frozen=True, order=True, slots=True)
class Identity:
    """A host resource as ownership sees it: never two CRs for one of these."""

    space: str
    line: FormLine
    name: str
    #: The TakoformHost the resource lives on (the same name on two hosts is two resources).
    host: str = DEFAULT_HOST

    def __str__(self) -> str:
        return f"{self.line} {self.name!r} in space {self.space!r} on host {self.host!r}"

    def binding_name(self) -> str:
        """The TakoformBinding's object name: the same for every process that asks."""
        doc = {
            "host": self.host,
            "space": self.space,
            "apiVersion": self.line.api_version,
            "kind": self.line.kind,
            "name": self.name,
        }
        digest = sha256_digest(canonical_json(doc)).removeprefix("sha256:")
        return _NAME_PREFIX + digest[:40]


class Phase(StrEnum):
    BOUND = "Bound"
    RELEASED = "Released"
    LOST = "Lost"


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A CR, as a binding names it. `uid` empty: any CR of that namespace and name (an admin's
    pre-binding, like a PersistentVolume's claimRef without uid). `namespace_uid`: the uid of
    that namespace when the operator bound it, so that a namespace deleted and created again
    under the same name (another tenant's, maybe) inherits nothing; empty: not recorded (an
    admin's pre-binding, or a binding of an earlier release)."""

    namespace: str
    name: str
    uid: str = ""
    namespace_uid: str = ""

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"

    def names(self, namespace: str, name: str, uid: str) -> bool:
        """This ref means that CR (a ref without uid means whichever CR has that name)."""
        return (
            self.namespace == namespace and self.name == name and (not self.uid or self.uid == uid)
        )

    def same_namespace(self, other: ClaimRef) -> bool:
        """The same namespace, not only the same name: where both recorded its uid, it is the
        same incarnation of that namespace."""
        if self.namespace != other.namespace:
            return False
        return not (self.namespace_uid and other.namespace_uid) or (
            self.namespace_uid == other.namespace_uid
        )

    def to_json(self) -> dict[str, str]:
        doc = {"namespace": self.namespace, "name": self.name}
        if self.uid:
            doc["uid"] = self.uid
        if self.namespace_uid:
            doc["namespaceUid"] = self.namespace_uid
        return doc

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> ClaimRef:
        return cls(
            str(doc["namespace"]),
            str(doc["name"]),
            str(doc.get("uid") or ""),
            str(doc.get("namespaceUid") or ""),
        )


@dataclass(frozen=True, slots=True)
class Binding:
    """One TakoformBinding: the identity, who holds it and what was recorded when it was bound."""

    identity: Identity
    phase: Phase
    #: Bound: the owner (or the pre-bound CR, without uid). Released/Lost: an admin's
    #: pre-binding naming the only CR that may bind next, or None.
    claim: ClaimRef | None
    #: The exact FormRef the target was bound under (None: not yet known, an admin's binding).
    form_ref: FormRef | None = None
    #: The identity fields of the owner when it bound (the write-ahead claim).
    requested: Requested | None = None
    #: The host incarnation the binding was last known bound to.
    uid: str | None = None
    #: Released/Lost: the CR that held it last.
    last_owner: ClaimRef | None = None
    #: metadata.resourceVersion as read (the precondition of the next write); "" when new.
    resource_version: str = ""

    @property
    def name(self) -> str:
        return self.identity.binding_name()

    def owned_by(self, uid: str) -> bool:
        return self.phase is Phase.BOUND and self.claim is not None and self.claim.uid == uid

    @property
    def protected(self) -> bool:
        """Bound to a CR (not an admin's pre-binding): nobody but the operator may delete it or
        hand it to another CR."""
        return self.phase is Phase.BOUND and self.claim is not None and bool(self.claim.uid)

    @property
    def home(self) -> ClaimRef | None:
        """The CR whose namespace the binding is of: its owner, else its last owner, else the
        CR an admin reserved it for. None: made by hand, nobody's."""
        if self.claim is not None and self.claim.uid:
            return self.claim
        return self.last_owner or self.claim

    def hands_across(self, to: ClaimRef) -> bool:
        """Giving the binding to `to` moves a host resource to another namespace (or to one,
        from nobody's): an admin's decision, never a routine remedy."""
        home = self.home
        return home is None or not home.same_namespace(to)

    def released(self, last_owner: ClaimRef, uid: str | None) -> Binding:
        """The owner let go (deletionPolicy Orphan, or a deletion that sent nothing)."""
        return replace(
            self, phase=Phase.RELEASED, claim=None, last_owner=last_owner, uid=uid or self.uid
        )

    def lost(self, uid: str | None) -> Binding:
        """The owner went without releasing: remember it, hand it to nobody automatically."""
        return replace(
            self, phase=Phase.LOST, claim=None, last_owner=self.claim, uid=uid or self.uid
        )

    def to_json(self, *, guardian: str | None = None, slot: str | None = None) -> dict[str, Any]:
        """The whole object, as created or replaced (metadata.resourceVersion a precondition).
        With `guardian` (the operator's user name; "" when unknown), a protected binding carries
        the protection finalizer and names its guardian; None: neither (the write that lets a
        binding go). With `slot` (hash sharding: its owner's slot), a Bound binding carries
        the slot label, so that only the replicas watching that slot list and watch it."""
        identity = self.identity
        spec: dict[str, Any] = {
            "host": identity.host,
            "space": identity.space,
            "apiVersion": identity.line.api_version,
            "kind": identity.line.kind,
            "resourceName": identity.name,
            "phase": str(self.phase),
        }
        if self.claim is not None:
            spec["claimRef"] = self.claim.to_json()
        if self.last_owner is not None:
            spec["lastOwner"] = self.last_owner.to_json()
        if self.form_ref is not None:
            spec["formRef"] = self.form_ref.to_json()
        if self.requested is not None:
            spec["requested"] = requested_to_json(self.requested)
        if self.uid:
            spec["uid"] = self.uid
        labels = {"app.kubernetes.io/managed-by": "takoform-operator"}
        named = self.claim or self.last_owner
        if named is not None:
            labels[NAMESPACE_LABEL] = named.namespace
        if slot is not None and self.phase is Phase.BOUND and self.claim is not None:
            labels[SLOT_LABEL] = slot
        metadata: dict[str, Any] = {"name": self.name, "labels": labels}
        if guardian is not None and self.protected:
            metadata["finalizers"] = [PROTECTION_FINALIZER]
            if guardian:
                metadata["annotations"] = {GUARDIAN_ANNOTATION: guardian}
        if self.resource_version:
            metadata["resourceVersion"] = self.resource_version
        return {
            "apiVersion": BINDING_API_VERSION,
            "kind": BINDING_KIND,
            "metadata": metadata,
            "spec": spec,
        }


class InvalidBinding(ValueError):
    """A TakoformBinding that cannot be read (an admin's typo): it binds nothing to anyone."""


def binding_from_json(body: Mapping[str, Any]) -> Binding:
    """Read a TakoformBinding object; raise InvalidBinding when it is not one we can read."""
    try:
        spec = body["spec"]
        identity = Identity(
            space=str(spec["space"]),
            line=FormLine(str(spec["apiVersion"]), str(spec["kind"])),
            name=str(spec["resourceName"]),
            host=str(spec.get("host") or DEFAULT_HOST),
        )
        claim = spec.get("claimRef")
        last = spec.get("lastOwner")
        ref = spec.get("formRef")
        return Binding(
            identity=identity,
            phase=Phase(spec.get("phase") or Phase.BOUND),
            claim=ClaimRef.from_json(claim) if claim else None,
            form_ref=FormRef.from_json(dict(ref)) if ref else None,
            requested=requested_from_json(spec.get("requested")),
            uid=str(spec["uid"]) if spec.get("uid") else None,
            last_owner=ClaimRef.from_json(last) if last else None,
            resource_version=str((body.get("metadata") or {}).get("resourceVersion") or ""),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidBinding(f"not a readable {BINDING_KIND}: {exc}") from None
