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
from takoform_spec.identity import FormLine, FormRef


class Verb(StrEnum):
    CREATE = "Create"
    UPDATE = "Update"
    DELETE = "Delete"


class DeletionPolicy(StrEnum):
    DELETE = "Delete"
    ORPHAN = "Orphan"


class StateUnreadable(TakoformError):
    """The CR's status does not hold a state this operator wrote (hand-edited or corrupted)."""


_EMPTY: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Pending:
    """A host operation that was accepted and has not been seen settled."""

    operation_id: str
    verb: Verb


@dataclass(frozen=True)
class State:
    """The CR status minus conditions. `form_ref` set means: bound to that exact identity."""

    form_ref: FormRef | None = None
    space: str | None = None
    name: str | None = None
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
    def bound(self) -> bool:
        return self.form_ref is not None

    def unbound(self) -> State:
        """Forget the host resource (it is gone); keep the attempt counter, bumped."""
        return State(attempt=self.attempt + 1)

    def with_pending(self, pending: Pending | None) -> State:
        return replace(self, pending=pending)


@dataclass(frozen=True)
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


class OpState(StrEnum):
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    NOT_FOUND = "operation_not_found"


@dataclass(frozen=True)
class OperationView:
    """What the host said about a pending operation (one consultation, never a poll)."""

    state: OpState
    resource_uid: str | None = None
    idempotency_key: str | None = None
    error_code: str | None = None
    error_message: str | None = None


@dataclass(frozen=True)
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
    except (KeyError, TypeError, ValueError) as exc:
        raise StateUnreadable(f"status does not hold a readable state: {exc}") from None
    return State(
        form_ref=form_ref,
        space=status.get("space"),
        name=status.get("name"),
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
        "space": state.space,
        "name": state.name,
        "uid": state.uid,
        "generation": state.generation,
        "revision": state.revision,
        "packageDigest": state.package_digest,
        "outputs": dict(state.outputs) if state.bound else None,
        "pendingOperationId": state.pending.operation_id if state.pending else None,
        "pendingOperationVerb": str(state.pending.verb) if state.pending else None,
        "attempt": state.attempt,
    }
