"""The operator's state — what Terraform keeps in its state file — and what the reconcile sees.

`State` is read from and written to the CR's status. It is written so that a crash at any instant
leaves a state from which the next reconcile neither duplicates nor orphans a host resource; see
docs/crash-safety.md. Everything here is a frozen value; no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from takoform_spec.errors import TakoformError
from takoform_spec.host_api import ErrorCode, OperationState
from takoform_spec.identity import FormLine, FormRef

#: The name of the implicit host made from the single-host settings (TAKOFORM_HOST_URL...):
#: CRs without spec.hostRef use it when no TakoformHost is marked default.
DEFAULT_HOST = "default"


class Verb(StrEnum):
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"


class DeletionPolicy(StrEnum):
    DELETE = "Delete"
    ORPHAN = "Orphan"


class ManagementPolicy(StrEnum):
    """spec.managementPolicy: Full sends mutations; Observe only reads (core.policy)."""

    FULL = "Full"
    OBSERVE = "Observe"


class StateUnreadable(TakoformError):
    """The CR's status does not hold a state this operator wrote (hand-edited or corrupted)."""


_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Pending:
    """A host operation that was accepted and has not been seen settled."""

    operation_id: str
    verb: Verb


@dataclass(frozen=True, slots=True)
class Requested:
    """The CR's identity fields as they were when its target was recorded (before anything was
    sent). Once recorded they are immutable: a CR whose spec asks for other values is Blocked."""

    space: str
    name: str
    #: (definitionVersion, schemaDigest) of spec.formRef, or None when unpinned.
    pin: tuple[str, str] | None = None
    import_id: str | None = None
    #: spec.hostRef (None: the default host, resolved into State.host when recorded).
    host_ref: str | None = None

    @classmethod
    def of(cls, desired: Desired) -> Requested:
        return cls(desired.space, desired.name, desired.pin, desired.import_id, desired.host_ref)

    def changes(self, desired: Desired) -> list[tuple[str, object, object]]:
        """(field, recorded value, requested value) for every identity field that differs."""
        now = Requested.of(desired)
        return [
            (label, mine, theirs)
            for label, mine, theirs in (
                ("spec.space", self.space, now.space),
                ("resource name", self.name, now.name),
                ("spec.formRef", _pin_text(self.pin), _pin_text(now.pin)),
                ("spec.importId", self.import_id, now.import_id),
                ("spec.hostRef", self.host_ref, now.host_ref),
            )
            if mine != theirs
        ]


def _pin_text(pin: tuple[str, str] | None) -> str | None:
    return None if pin is None else f"{pin[0]} {pin[1]}"


@dataclass(frozen=True, slots=True)
class State:
    """The CR status minus conditions.

    `form_ref`, `space`, `name` and `host` are the *target*: recorded (with `requested`) before
    anything is sent to the host and kept until the CR goes, so every mutation is addressed to
    what was recorded, never to what the spec says now. `uid` set means: bound to that
    incarnation. `host` None in a claimed state: written before hosts were named, the default.
    """

    form_ref: FormRef | None = None
    host: str | None = None
    space: str | None = None
    name: str | None = None
    requested: Requested | None = None
    uid: str | None = None
    generation: str | None = None
    revision: str | None = None
    package_digest: str | None = None
    outputs: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    pending: Pending | None = None
    #: Bumped only when an operation of ours ends in error or the bound resource vanished;
    #: part of every idempotency key, so a fresh attempt never replays a finished one.
    attempt: int = 0

    @property
    def claimed(self) -> bool:
        """A target is recorded: something may have been sent to it."""
        return self.form_ref is not None

    @property
    def bound(self) -> bool:
        """Bound to one host incarnation."""
        return self.form_ref is not None and self.uid is not None

    def fresh_attempt(self) -> State:
        """The one place the attempt counter moves: every key after this one is new, so a
        finished operation is never replayed. Written in the same status write as the reason."""
        return replace(self, attempt=self.attempt + 1)

    def unbound(self) -> State:
        """Forget the vanished incarnation, keep the target (identity stays what was sent)."""
        return State(
            form_ref=self.form_ref,
            host=self.host,
            space=self.space,
            name=self.name,
            requested=self.requested,
            attempt=self.attempt,
        )

    def with_target(
        self, host: str, form_ref: FormRef, space: str, name: str, requested: Requested | None
    ) -> State:
        """The target recorded (with the identity fields that chose it): where every request
        goes from now on."""
        return replace(
            self, host=host, form_ref=form_ref, space=space, name=name, requested=requested
        )

    def with_pending(self, pending: Pending | None) -> State:
        return replace(self, pending=pending)


@dataclass(frozen=True, slots=True)
class Desired:
    """What the CR asks for, plus the CR facts the idempotency keys are derived from."""

    cr_uid: str
    cr_generation: int
    line: FormLine
    space: str
    name: str
    parameters: Mapping[str, Any]
    #: (definitionVersion, schemaDigest) to create under instead of the default create ref.
    pin: tuple[str, str] | None = None
    deletion_policy: DeletionPolicy = DeletionPolicy.DELETE
    import_id: str | None = None
    #: The uid the user explicitly accepts as the new incarnation (rule 6 remedy "import").
    accept_uid: str | None = None
    deleting: bool = False
    #: The CR's own coordinates, for ownership (core.ownership) and remedies.
    namespace: str = ""
    cr_name: str = ""
    #: metadata.uid of the CR's namespace (the tenancy's namespace index; "" when unknown).
    namespace_uid: str = ""
    #: The uid of the CR this one restores (core.ownership.restores; "" none): the keys of that
    #: earlier incarnation of this CR prove a host resource ours too (core.keys.proves_ours).
    restores: str = ""
    created: str = ""
    #: spec.hostRef as written (None: the default host).
    host_ref: str | None = None
    #: The host the spec resolves to now (spec.hostRef, or the default host's name).
    host: str = DEFAULT_HOST
    #: Annotation takoform.io/paused is "true": nothing is sent to the host (core.policy).
    paused: bool = False
    #: Why the pause annotation is refused (a value other than "true" or "false"), or None:
    #: a CR whose pause is unclear sends nothing until it is fixed (core.policy.hold).
    unclear_pause: str | None = None
    management: ManagementPolicy = ManagementPolicy.FULL


class OpState(StrEnum):
    """A pending operation as the host answered: one of its states (H-31), or not found (H-34)."""

    RUNNING = OperationState.RUNNING.value
    SUCCEEDED = OperationState.SUCCEEDED.value
    FAILED = OperationState.FAILED.value
    NOT_FOUND = ErrorCode.OPERATION_NOT_FOUND.value


@dataclass(frozen=True, slots=True)
class OperationView:
    """What the host said about a pending operation (one consultation, never a poll)."""

    state: OpState
    resource_uid: str | None = None
    idempotency_key: str | None = None
    #: What the operation was for, as the host recorded it (compared member by member).
    verb: Verb | None = None
    space: str | None = None
    form_ref: FormRef | None = None
    name: str | None = None
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True, slots=True)
class HostCondition:
    """One condition of the host resource's own status (docs/host-api.md H-17)."""

    type: str
    status: str  # True | False | Unknown
    reason: str = ""
    message: str = ""
    #: The host-internal code (H-17): carried into the CR's condition message, never a reason.
    host_reason: str | None = None


@dataclass(frozen=True, slots=True)
class ResourceView:
    """A representation the host served under the exact FormRef it was asked for."""

    form_ref: FormRef
    space: str
    name: str
    uid: str
    generation: str
    revision: str
    spec: Mapping[str, Any]
    outputs: Mapping[str, Any] = field(default_factory=lambda: _EMPTY)
    creation_key: str | None = None
    package_digest: str | None = None
    #: The host's own account of the resource: which generation its status reflects, and its
    #: conditions (None and () from a host that reports neither).
    observed_generation: str | None = None
    conditions: tuple[HostCondition, ...] = ()

    def condition(self, kind: str) -> HostCondition | None:
        return next((c for c in self.conditions if c.type == kind), None)


# -- the status document -------------------------------------------------------------------------


def state_from_status(status: Mapping[str, Any] | None) -> State:
    """Read the state out of a CR status; raise StateUnreadable when it is malformed."""
    if not status:
        return State()
    try:
        ref_doc = status.get("formRef")
        form_ref = FormRef.from_json(dict(ref_doc)) if ref_doc else None
        pending = None
        if status.get("pendingOperationId"):
            pending = Pending(
                operation_id=str(status["pendingOperationId"]),
                verb=Verb(status.get("pendingOperationVerb") or "Create"),
            )
        attempt = int(status.get("attempt") or 0)
        requested = requested_from_json(status.get("requested"))
    except (KeyError, TypeError, ValueError) as exc:
        raise StateUnreadable(f"status does not hold a readable state: {exc}") from None
    return State(
        form_ref=form_ref,
        host=status.get("host"),
        space=status.get("space"),
        name=status.get("name"),
        requested=requested,
        uid=status.get("uid"),
        generation=status.get("generation"),
        revision=status.get("revision"),
        package_digest=status.get("packageDigest"),
        outputs=MappingProxyType(dict(status.get("outputs") or {})),
        pending=pending,
        attempt=attempt,
    )


def state_to_status(state: State) -> dict[str, Any]:
    """The status fields for `state`. Absent values are explicit nulls so a merge-patch clears
    them (a stale pendingOperationId must never survive a write that meant to drop it)."""
    return {
        "formRef": state.form_ref.to_json() if state.form_ref else None,
        "host": state.host,
        "space": state.space,
        "name": state.name,
        "requested": requested_to_json(state.requested),
        "uid": state.uid,
        "generation": state.generation,
        "revision": state.revision,
        "packageDigest": state.package_digest,
        "outputs": dict(state.outputs) if state.claimed else None,
        "pendingOperationId": state.pending.operation_id if state.pending else None,
        "pendingOperationVerb": str(state.pending.verb) if state.pending else None,
        "attempt": state.attempt,
    }


def requested_from_json(doc: Any) -> Requested | None:
    if not doc:
        return None
    pin_doc = doc.get("pin")
    pin = (str(pin_doc["definitionVersion"]), str(pin_doc["schemaDigest"])) if pin_doc else None
    return Requested(
        space=str(doc["space"]),
        name=str(doc["name"]),
        pin=pin,
        import_id=doc.get("importId") or None,
        host_ref=doc.get("hostRef") or None,
    )


def requested_to_json(requested: Requested | None) -> dict[str, Any] | None:
    if requested is None:
        return None
    pin = requested.pin
    return {
        "space": requested.space,
        "name": requested.name,
        "pin": {"definitionVersion": pin[0], "schemaDigest": pin[1]} if pin else None,
        "importId": requested.import_id,
        "hostRef": requested.host_ref,
    }
