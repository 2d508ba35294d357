"""Step 1 of a reconcile: the operation to consult and the exact resource to read, or stop."""

from __future__ import annotations

from dataclasses import dataclass

from takoform_spec.identity import FormRef

from .actions import Target
from .binding import Identity
from .conditions import Reason
from .errors import InvalidImportId, UnknownFormRef
from .import_id import parse_import_id
from .outcome import (
    NextLook,
    Outcome,
    blocked,
    degraded,
    with_deleting,
)
from .registry import Registry
from .remedies import Remedy, kubectl_object, release_command
from .state import DEFAULT_HOST, Desired, State


@dataclass(frozen=True)
class Plan:
    """The reads one reconcile makes, in order: the operations (the pending one, or the
    listing of the name), then the exact resource (0017 rule 7: the operation first)."""

    operation_id: str | None
    target: Target | None
    #: A create of ours may be accepted without the status recording it (may_have_created):
    #: the host's operations on the name stand in for the pending one, read before the resource.
    list_operations: bool = False


def plan(
    desired: Desired, state: State, registry: Registry, *, claimed_now: bool = False
) -> Plan | Outcome:
    """Which operation to consult and which exact resource to read; or an Outcome right away.
    The state is claimed: the CR holds the binding of its target (core.ownership).
    `claimed_now`: the target was claimed by this very reconcile (its binding written just
    now, before anything was sent), so nothing of ours can be running on it."""
    assert state.claimed, "the target is bound before the plan"
    return _plan_claimed(desired, state, registry, claimed_now)


def may_have_created(state: State) -> bool:
    """Claimed, neither bound nor pending, not an import: a create of ours may have been
    accepted that the status does not record (its write held and dropped by another write to
    the CR, or lost), and may commit at any moment."""
    return state.claimed and state.uid is None and state.pending is None and not importing(state)


def target_of(desired: Desired, state: State, registry: Registry) -> Target | Outcome:
    """The exact target this CR stands for: the recorded one once claimed, else the one its
    spec asks for (the import id's, or the create ref's); or why there is none."""
    if state.form_ref is not None and state.space is not None and state.name is not None:
        return Target(state.space, state.form_ref, state.name)
    if state.pending is not None:
        # A pending operation without a bound ref cannot be written by this operator.
        message = "status holds a pending operation but no FormRef; restore the status"
        return blocked(state, Reason.STATE_UNREADABLE, message)
    return _requested_target(desired, registry)


def reclaims(desired: Desired, state: State) -> bool:
    """An import that never found its target, whose spec now names another one: it sent
    nothing but reads, so it lets go of its binding and claims afresh."""
    changes = state.requested.changes(desired) if state.requested is not None else []
    return bool(changes) and not desired.deleting and _import_never_bound(state)


def identity_of(desired: Desired, state: State) -> Identity:
    """The identity a CR stands for: its recorded target once claimed, else its spec's."""
    if state.form_ref is not None and state.space is not None and state.name is not None:
        return Identity(state.space, state.form_ref.line, state.name, host_of(desired, state))
    return Identity(desired.space, desired.line, desired.name, desired.host)


def host_of(desired: Desired, state: State) -> str:
    """The host requests go to: the recorded one once claimed, else the spec's. A state
    claimed before hosts were recorded belongs to the default host."""
    if state.form_ref is not None:
        return state.host or DEFAULT_HOST
    return desired.host


def create_ref(desired: Desired, registry: Registry) -> FormRef:
    """Rule 1: create — and only create — under the default create ref, or a supported pin."""
    if desired.pin is not None:
        version, digest = desired.pin
        ref = FormRef(desired.line.api_version, desired.line.kind, version, digest)
        registry.lookup(ref)  # a pin the build cannot decode fails closed
        return ref
    ref_or_none = registry.default_create_ref(desired.line)
    if ref_or_none is None:
        raise LookupError(f"{desired.line} has no default create ref in this build")
    return ref_or_none


def _plan_claimed(
    desired: Desired, state: State, registry: Registry, claimed_now: bool
) -> Plan | Outcome:
    assert state.form_ref is not None and state.space is not None and state.name is not None
    changes = state.requested.changes(desired) if state.requested is not None else []
    if changes and not desired.deleting:
        return _identity_changed(desired, state, changes)
    try:
        registry.lookup(state.form_ref)
    except UnknownFormRef as exc:
        # Rule 4: nothing is read, updated or deleted under any other ref; state is kept.
        return with_deleting(blocked(state, Reason.FORM_REF_UNSUPPORTED, str(exc)), desired)
    target = Target(state.space, state.form_ref, state.name)
    if state.pending is not None:
        return Plan(state.pending.operation_id, target)
    return Plan(None, target, list_operations=may_have_created(state) and not claimed_now)


def importing(state: State) -> bool:
    return state.requested is not None and state.requested.import_id is not None


def _import_never_bound(state: State) -> bool:
    return importing(state) and state.uid is None and state.pending is None


def _identity_changed(
    desired: Desired, state: State, changes: list[tuple[str, object, object]]
) -> Outcome:
    described = "; ".join(
        f"{label} is bound to {recorded!r} but the spec asks for {asked!r}"
        for label, recorded, asked in changes
    )
    obj = kubectl_object(desired)
    message = (
        f"identity changed after requests were sent: {described}. Nothing is sent while it differs."
    )
    remedies = (
        Remedy("revert the field(s) to the bound value"),
        Remedy(
            "or release it with deletionPolicy Orphan, without touching the host, then create a "
            "new CR that imports the resource (spec.importId)",
            release_command(obj),
            obj,
        ),
    )
    return with_deleting(blocked(state, Reason.IDENTITY_CHANGED, message, remedies), desired)


def _requested_target(desired: Desired, registry: Registry) -> Target | Outcome:
    """The exact target the spec asks for: the import id's, or the create ref's."""
    if desired.import_id is not None:
        return _import_target(desired, State(), registry)
    try:
        ref = create_ref(desired, registry)
    except UnknownFormRef as exc:
        return blocked(State(), Reason.PIN_UNSUPPORTED, str(exc))
    except LookupError as exc:
        return blocked(State(), Reason.NO_DEFAULT_CREATE, str(exc))
    return Target(desired.space, ref, desired.name)


def _import_target(desired: Desired, state: State, registry: Registry) -> Target | Outcome:
    assert desired.import_id is not None
    try:
        wanted = parse_import_id(desired.import_id, registry.default_create_ref(desired.line))
    except InvalidImportId as exc:
        return degraded(state, Reason.INVALID_IMPORT_ID, str(exc), NextLook.POLL)
    if wanted.form_ref.line != desired.line:
        message = (
            f"import id names {wanted.form_ref.line}, but this resource is a {desired.line}; "
            "use the CR kind of the imported resource"
        )
        return degraded(state, Reason.INVALID_IMPORT_ID, message, NextLook.POLL)
    try:
        registry.lookup(wanted.form_ref)
    except UnknownFormRef as exc:
        # Rule 5: an identity the build cannot decode is refused, never rebound.
        return blocked(state, Reason.IMPORT_REFUSED, str(exc))
    space = wanted.space if wanted.space is not None else desired.space
    if space != desired.space:
        message = (
            f"import id names space {space!r}, but spec.space is {desired.space!r}; make them agree"
        )
        return degraded(state, Reason.SPACE_MISMATCH, message, NextLook.POLL)
    if wanted.name != desired.name:
        message = (
            f"import id names resource {wanted.name!r}, but the resource name is "
            f"{desired.name!r} (spec.resourceName, else the CR's name); make them agree"
        )
        return degraded(state, Reason.NAME_MISMATCH, message, NextLook.POLL)
    return Target(space, wanted.form_ref, wanted.name)
