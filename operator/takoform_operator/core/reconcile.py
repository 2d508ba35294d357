"""The reconcile core: recorded state + desired spec + what the host said -> next state and outcome.

Pure: no kopf, no I/O, no clock. One reconcile is

    plan()        which operation to consult and which exact resource to read (or stop early)
    decide()      what those two answers allow us to conclude, and at most ONE mutation
    accepted()    the state to persist once the host accepted that mutation (202 + operation)
    rejected()    the state to persist when the host refused it

The adapter (takoform_operator.service) performs the reads and the mutation in between and
persists the returned state. Every mutation carries an idempotency key the next reconcile can
recompute from what is already persisted, which is what makes a crash between the host's 202 and
the status write harmless (docs/crash-safety.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from takoform_spec.identity import FormRef

from .conditions import Condition, ConditionType, Reason
from .errors import CodecError, InvalidImportId, UnknownFormRef
from .import_id import canonical_import_id, parse_import_id
from .registry import Registry
from .state import (
    DeletionPolicy,
    Desired,
    OperationView,
    OpState,
    Pending,
    ResourceView,
    State,
    Verb,
)
from .tables import DELETE_TABLE, MUTATION_TABLE, Conclusion, Presence, UidRule, presence, uid_rule

#: Seconds until the next look, by situation. The adapter may scale them from settings.
POLL_PENDING = 2.0
POLL_READY = 60.0
RETRY_SOON = 0.0
RETRY_LATER = 30.0

REMEDIES = (
    "Remedies: (1) import the new incarnation explicitly: kubectl annotate {obj} "
    "takoform.io/accept-uid={current} ; (2) restore the prior incarnation {expected} on the host; "
    "(3) delete the host-side replacement {current} (the operator then re-creates the resource)."
)


# -- idempotency keys --------------------------------------------------------------------------


def key_prefix(cr_uid: str) -> str:
    """Every key of ours starts with the CR's own uid: ownership is provable from the key."""
    return f"{cr_uid}:"


def create_key(desired: Desired, state: State) -> str:
    return f"{desired.cr_uid}:create:{state.attempt}"


def update_key(desired: Desired, state: State, host_generation: str) -> str:
    return f"{desired.cr_uid}:update:{desired.cr_generation}:{host_generation}:{state.attempt}"


def delete_key(desired: Desired, state: State, uid: str) -> str:
    return f"{desired.cr_uid}:delete:{uid}:{state.attempt}"


# -- values passed between the steps -------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """An exact resource address: space, exact FormRef, name."""

    space: str
    form_ref: FormRef
    name: str


@dataclass(frozen=True)
class Create:
    target: Target
    spec: Mapping[str, Any]
    key: str
    verb: Verb = Verb.CREATE


@dataclass(frozen=True)
class Update:
    target: Target
    spec: Mapping[str, Any]
    expected_generation: str
    expected_uid: str
    key: str
    verb: Verb = Verb.UPDATE


@dataclass(frozen=True)
class Delete:
    target: Target
    expected_uid: str
    key: str
    verb: Verb = Verb.DELETE


Action = Create | Update | Delete


@dataclass(frozen=True)
class Event:
    type: str  # Normal | Warning
    reason: Reason
    message: str


@dataclass(frozen=True)
class Outcome:
    """What one reconcile concluded: the state to persist and what to tell the user."""

    state: State
    conditions: tuple[Condition, ...]
    requeue_after: float | None
    events: tuple[Event, ...] = ()
    #: Deletion is complete (or orphaned): the adapter may let the CR go.
    finalized: bool = False

    def asserted(self) -> dict[ConditionType, Reason]:
        """The reason of every condition this outcome sets True, by type."""
        return {c.type: c.reason for c in self.conditions if c.status}


@dataclass(frozen=True)
class Plan:
    """The reads one reconcile makes, in order: the operation once, then the exact resource."""

    operation_id: str | None
    target: Target | None
    #: Unbound and being deleted: look for an accepted create of ours we never recorded.
    list_operations: bool = False


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    action: Action | None = None


@dataclass(frozen=True)
class Observation:
    operation: OperationView | None = None
    resource: ResourceView | None = None
    #: Operations the host retains for the target name (only when Plan.list_operations).
    operations: tuple[tuple[str, OperationView], ...] = field(default=())


# -- helpers ---------------------------------------------------------------------------------------


def _cond(kind: ConditionType, status: bool, reason: Reason, message: str = "") -> Condition:
    return Condition(kind, status, reason, message)


def not_ready(
    state: State,
    kind: ConditionType,
    reason: Reason,
    message: str,
    requeue: float | None,
    *,
    warn: bool = True,
) -> Outcome:
    """The one shape of every not-Ready outcome: `kind` True, Ready False, same reason."""
    return Outcome(
        state=state,
        conditions=(
            _cond(kind, True, reason, message),
            _cond(ConditionType.READY, False, reason, message),
        ),
        requeue_after=requeue,
        events=(Event("Warning", reason, message),) if warn else (),
    )


def _blocked(state: State, reason: Reason, message: str, requeue: float | None) -> Outcome:
    return not_ready(state, ConditionType.BLOCKED, reason, message, requeue)


def _waiting(state: State, reason: Reason, message: str, requeue: float = POLL_PENDING) -> Outcome:
    return not_ready(state, ConditionType.RECONCILING, reason, message, requeue, warn=False)


def degraded(state: State, reason: Reason, message: str, requeue: float | None) -> Outcome:
    return not_ready(state, ConditionType.DEGRADED, reason, message, requeue)


def _deleting(outcome: Outcome, desired: Desired) -> Outcome:
    if not desired.deleting or outcome.finalized:
        return outcome
    marker = _cond(ConditionType.DELETING, True, Reason.DELETING, "deletion in progress")
    return replace(outcome, conditions=(*outcome.conditions, marker))


def _settled(state: State, resource: ResourceView, registry: Registry) -> State:
    """State refreshed from a representation served under the exact recorded FormRef."""
    codec = registry.codec_for(resource.form_ref)
    outputs = codec.decode_outputs(resource.form_ref, resource.outputs)
    return replace(
        state,
        form_ref=resource.form_ref,
        space=resource.space,
        name=resource.name,
        uid=resource.uid,
        generation=resource.generation,
        revision=resource.revision,
        package_digest=resource.package_digest or state.package_digest,
        outputs=MappingProxyType(outputs),
    )


def _bound_to(state: State, target: Target, uid: str | None) -> State:
    """State bound to the exact target a create of ours was accepted for."""
    return replace(state, form_ref=target.form_ref, space=target.space, name=target.name, uid=uid)


def _proves_ours(resource: ResourceView, desired: Desired) -> bool:
    """Ownership evidence: the resource was created with one of OUR idempotency keys."""
    key = resource.creation_key
    return key is not None and key.startswith(key_prefix(desired.cr_uid) + "create:")


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


# -- 1. plan ---------------------------------------------------------------------------------------


def plan(desired: Desired, state: State, registry: Registry) -> Plan | Outcome:
    """Which operation to consult and which exact resource to read; or an Outcome right away."""
    if desired.deleting and desired.deletion_policy is DeletionPolicy.ORPHAN:
        # Orphan: forget without a host call.
        return Outcome(state=state, conditions=(), requeue_after=None, finalized=True)
    if state.form_ref is not None:
        try:
            registry.lookup(state.form_ref)
        except UnknownFormRef as exc:
            # Rule 4: nothing is read, updated or deleted under any other ref; state is kept.
            return _deleting(_blocked(state, Reason.FORM_REF_UNSUPPORTED, str(exc), None), desired)
        assert state.space is not None and state.name is not None
        target = Target(state.space, state.form_ref, state.name)
        return Plan(state.pending.operation_id if state.pending else None, target)
    if state.pending is not None:
        # A pending operation without a bound ref cannot be written by this operator.
        message = "status holds a pending operation but no FormRef; restore the status"
        return _blocked(state, Reason.STATE_UNREADABLE, message, None)
    if desired.import_id is not None and not desired.deleting:
        return _plan_import(desired, state, registry)
    try:
        ref = create_ref(desired, registry)
    except UnknownFormRef as exc:
        return _deleting(_blocked(state, Reason.PIN_UNSUPPORTED, str(exc), None), desired)
    except LookupError as exc:
        return _deleting(_blocked(state, Reason.NO_DEFAULT_CREATE, str(exc), None), desired)
    target = Target(desired.space, ref, desired.name)
    return Plan(None, target, list_operations=desired.deleting)


def _plan_import(desired: Desired, state: State, registry: Registry) -> Plan | Outcome:
    assert desired.import_id is not None
    try:
        wanted = parse_import_id(desired.import_id, registry.default_create_ref(desired.line))
    except InvalidImportId as exc:
        return degraded(state, Reason.INVALID_IMPORT_ID, str(exc), None)
    if wanted.form_ref.line != desired.line:
        message = (
            f"import id names {wanted.form_ref.line}, but this resource is a {desired.line}; "
            "use the CR kind of the imported resource"
        )
        return degraded(state, Reason.INVALID_IMPORT_ID, message, None)
    try:
        registry.lookup(wanted.form_ref)
    except UnknownFormRef as exc:
        # Rule 5: an identity the build cannot decode is refused, never rebound.
        return _blocked(state, Reason.IMPORT_REFUSED, str(exc), None)
    space = wanted.space if wanted.space is not None else desired.space
    if space != desired.space or wanted.name != desired.name:
        message = (
            f"import id names space {space!r} and name {wanted.name!r}, but spec.space is "
            f"{desired.space!r} and the resource name is {desired.name!r}; make them agree"
        )
        return degraded(state, Reason.SPACE_MISMATCH, message, None)
    return Plan(None, Target(space, wanted.form_ref, wanted.name))


# -- 2. decide -------------------------------------------------------------------------------------


def decide(
    desired: Desired, state: State, planned: Plan, seen: Observation, registry: Registry
) -> Decision:
    """Conclude from one consultation of the operation and one exact resource read."""
    try:
        if state.form_ref is None:
            decision = _decide_unbound(desired, state, planned, seen, registry)
        elif state.pending is not None:
            decision = _decide_pending(desired, state, seen, registry)
        else:
            decision = _decide_bound(desired, state, seen.resource, registry)
    except CodecError as exc:
        # Host state that does not decode under the exact ref: report, mutate nothing.
        outcome = degraded(state, Reason.HOST_STATE_UNDECODABLE, str(exc), RETRY_LATER)
        decision = Decision(outcome)
    return replace(decision, outcome=_deleting(decision.outcome, desired))


def _decide_pending(
    desired: Desired, state: State, seen: Observation, registry: Registry
) -> Decision:
    assert state.pending is not None and seen.operation is not None
    pending, operation = state.pending, seen.operation
    expected_uid = state.uid or operation.resource_uid
    found = presence(seen.resource, expected_uid)
    table = DELETE_TABLE if pending.verb is Verb.DELETE else MUTATION_TABLE
    conclusion = table[(operation.state, found)]
    failed = operation.state is OpState.FAILED
    bump = 1 if failed else 0
    opname = f"{pending.verb.lower()} operation {pending.operation_id}"

    if conclusion is Conclusion.WAIT:
        return Decision(_waiting(state, Reason.OPERATION_RUNNING, f"{opname} is running"))
    if conclusion is Conclusion.SETTLE_KEEP_MARKER:
        assert seen.resource is not None
        settled = _settled(state, seen.resource, registry)
        return Decision(_waiting(settled, Reason.OPERATION_RUNNING, f"{opname} is running"))
    if conclusion in (Conclusion.BLOCK_KEEP_MARKER, Conclusion.BLOCK_CLEAR):
        assert seen.resource is not None
        keep = conclusion is Conclusion.BLOCK_KEEP_MARKER
        blocked = state if keep else replace(state.with_pending(None), attempt=state.attempt + bump)
        if expected_uid is None:
            return Decision(_not_ours(blocked, seen.resource))
        rule = uid_rule(found, seen.resource.uid, desired.accept_uid)
        if rule is UidRule.ACCEPTED and not keep:
            return _decide_bound(desired, blocked, seen.resource, registry, accepted=True)
        return Decision(_uid_mismatch(desired, blocked, expected_uid, seen.resource.uid))
    if conclusion in (
        Conclusion.ADOPT_IF_PROVEN_KEEP_MARKER,
        Conclusion.ADOPT_IF_PROVEN_CLEAR,
    ):
        assert seen.resource is not None
        keep = conclusion is Conclusion.ADOPT_IF_PROVEN_KEEP_MARKER
        base = state if keep else replace(state.with_pending(None), attempt=state.attempt + bump)
        if not _proves_ours(seen.resource, desired):
            return Decision(_not_ours(base, seen.resource))
        adopted = _settled(base, seen.resource, registry)
        if keep:
            return Decision(_waiting(adopted, Reason.OPERATION_RUNNING, f"{opname} is running"))
        return _decide_bound(desired, adopted, seen.resource, registry)

    cleared = replace(state.with_pending(None), attempt=state.attempt + bump)
    failure = (
        Event(
            "Warning",
            Reason.OPERATION_FAILED,
            f"{opname} failed: {operation.error_code}: {operation.error_message}",
        )
        if failed
        else None
    )
    if conclusion is Conclusion.GONE_CLEAR:
        if pending.verb is Verb.DELETE or desired.deleting:
            return Decision(_finalized(cleared, "host resource deleted"))
        gone = state.unbound()  # a fresh attempt: the old key must never replay
        if pending.verb is Verb.CREATE and failed:
            message = f"{opname} failed ({operation.error_code}): {operation.error_message}"
            return Decision(degraded(gone, Reason.OPERATION_FAILED, message, RETRY_LATER))
        message = "the host resource is gone; it will be created again"
        outcome = _drifted(gone, Reason.RESOURCE_DELETED, message)
        return Decision(_with_event(outcome, failure))
    # SETTLE_CLEAR: the operation settled and the exact resource is ours.
    assert seen.resource is not None
    if pending.verb is Verb.DELETE:
        cleared = replace(cleared, attempt=state.attempt + 1)  # a retried delete needs a new key
    settled = _settled(cleared, seen.resource, registry)
    if failed:
        message = f"{opname} failed ({operation.error_code}): {operation.error_message}"
        return Decision(degraded(settled, Reason.OPERATION_FAILED, message, RETRY_LATER))
    return _decide_bound(desired, settled, seen.resource, registry)


def _decide_bound(
    desired: Desired,
    state: State,
    resource: ResourceView | None,
    registry: Registry,
    *,
    accepted: bool = False,
) -> Decision:
    assert state.form_ref is not None
    found = presence(resource, state.uid)
    rule = (
        UidRule.ACCEPTED
        if accepted
        else uid_rule(found, resource.uid if resource else None, desired.accept_uid)
    )
    if found is Presence.UNKNOWN_UID and resource is not None:
        if not _proves_ours(resource, desired):
            return Decision(_not_ours(state, resource))
        rule = UidRule.MATCH
    if rule is UidRule.GONE:
        if desired.deleting:
            return Decision(_finalized(state, "host resource already gone"))
        # Ordinary drift repair: forget the vanished incarnation; create anew next time.
        message = f"host resource {state.name} (uid {state.uid}) is gone; it will be created again"
        return Decision(_drifted(state.unbound(), Reason.RESOURCE_DELETED, message))
    assert resource is not None
    if rule is UidRule.BLOCKED:
        assert state.uid is not None
        return Decision(_uid_mismatch(desired, state, state.uid, resource.uid))
    settled = _settled(state, resource, registry)
    events: tuple[Event, ...] = ()
    if rule is UidRule.ACCEPTED:
        events = (
            Event(
                "Normal",
                Reason.IMPORTED,
                f"bound to the new incarnation {resource.uid} as explicitly accepted",
            ),
        )
    target = Target(resource.space, resource.form_ref, resource.name)
    if desired.deleting:
        if desired.deletion_policy is DeletionPolicy.ORPHAN:
            return Decision(_finalized(settled, "orphaned"))
        delete = Delete(target, resource.uid, delete_key(desired, settled, resource.uid))
        return Decision(
            _with_events(_waiting(settled, Reason.DELETE_PENDING, "deleting"), events), delete
        )
    codec = registry.codec_for(resource.form_ref)
    try:
        wanted = codec.normalize(
            resource.form_ref, codec.encode(resource.form_ref, desired.parameters)
        )
    except CodecError as exc:
        # The desired spec does not fit the contract the resource is under (rule 3).
        return Decision(degraded(settled, Reason.INVALID_SPEC, str(exc), None))
    current = codec.normalize(resource.form_ref, codec.decode(resource.form_ref, resource.spec))
    if wanted == current:
        ready = Outcome(
            state=settled,
            conditions=(
                _cond(ConditionType.READY, True, Reason.AVAILABLE, "host resource is up to date"),
            ),
            requeue_after=POLL_READY,
            events=events,
        )
        return Decision(ready)
    action = Update(
        target,
        wanted,
        expected_generation=resource.generation,
        expected_uid=resource.uid,
        key=update_key(desired, settled, resource.generation),
    )
    changed = sorted(k for k in set(wanted) | set(current) if wanted.get(k) != current.get(k))
    message = f"updating fields {', '.join(changed)} under {resource.form_ref.definition_version}"
    outcome = _waiting(settled, Reason.UPDATE_PENDING, message)
    drift = _cond(ConditionType.DRIFTED, True, Reason.SPEC_DRIFT, message)
    return Decision(
        _with_events(replace(outcome, conditions=(*outcome.conditions, drift)), events), action
    )


def _decide_unbound(
    desired: Desired, state: State, planned: Plan, seen: Observation, registry: Registry
) -> Decision:
    assert planned.target is not None
    resource = seen.resource
    if desired.import_id is not None and not desired.deleting:
        if resource is None:
            message = (
                f"nothing named {planned.target.name} under "
                f"{planned.target.form_ref} in space {planned.target.space}"
            )
            return Decision(degraded(state, Reason.IMPORT_TARGET_NOT_FOUND, message, RETRY_LATER))
        imported = _settled(state, resource, registry)
        message = f"imported {resource.name} uid {resource.uid} under {resource.form_ref}"
        outcome = _waiting(imported, Reason.IMPORTED, message, RETRY_SOON)
        return Decision(replace(outcome, events=(Event("Normal", Reason.IMPORTED, message),)))
    if resource is not None:
        if not _proves_ours(resource, desired):
            if desired.deleting:
                return Decision(_finalized(state, "nothing of ours exists on the host"))
            return Decision(_not_ours(state, resource))
        # Ours (a create whose answer we lost): adopt what the host served under the exact ref.
        return _decide_bound(desired, _settled(state, resource, registry), resource, registry)
    if desired.deleting:
        for operation_id, operation in seen.operations:
            key = operation.idempotency_key or ""
            if operation.state is OpState.RUNNING and key.startswith(key_prefix(desired.cr_uid)):
                # A create of ours we never recorded: wait for it, then delete what it made.
                adopted = _bound_to(state, planned.target, operation.resource_uid).with_pending(
                    Pending(operation_id, Verb.CREATE)
                )
                return Decision(_waiting(adopted, Reason.OPERATION_RUNNING, "create running"))
        return Decision(_finalized(state, "nothing was created on the host"))
    codec = registry.codec_for(planned.target.form_ref)
    try:
        spec = codec.encode(planned.target.form_ref, desired.parameters)
    except CodecError as exc:
        return Decision(degraded(state, Reason.INVALID_SPEC, str(exc), None))
    action = Create(planned.target, spec, create_key(desired, state))
    message = f"creating {planned.target.name} under {planned.target.form_ref}"
    return Decision(_waiting(state, Reason.CREATE_PENDING, message), action)


def _uid_mismatch(desired: Desired, state: State, expected: str, current: str) -> Outcome:
    obj = f"{desired.line.kind.lower()}/{state.name or desired.name}"
    message = (
        f"uid mismatch: state is bound to uid {expected} but the host serves uid {current} "
        f"under the same name; nothing is mutated while blocked. "
        + REMEDIES.format(obj=obj, current=current, expected=expected)
    )
    return _blocked(state, Reason.UID_MISMATCH, message, POLL_READY)


def _not_ours(state: State, resource: ResourceView) -> Outcome:
    import_id = canonical_import_id(resource.space, resource.name, resource.form_ref)
    if resource.creation_key is None:
        reason = Reason.OWNERSHIP_UNPROVABLE
        why = "the host records no creation key, so it cannot be proven to be ours"
    else:
        reason = Reason.NAME_TAKEN
        why = "it was created by someone else"
    message = (
        f"a resource named {resource.name} (uid {resource.uid}) already exists and {why}; "
        f"it is never adopted by name alone. Remedy: import it explicitly by setting "
        f"spec.importId to '{import_id}', or choose another name."
    )
    return _blocked(state, reason, message, POLL_READY)


def _drifted(state: State, reason: Reason, message: str) -> Outcome:
    return not_ready(state, ConditionType.DRIFTED, reason, message, RETRY_SOON)


def _finalized(state: State, message: str) -> Outcome:
    return Outcome(
        state=state,
        conditions=(),
        requeue_after=None,
        events=(Event("Normal", Reason.DELETING, message),),
        finalized=True,
    )


def _with_event(outcome: Outcome, event: Event | None) -> Outcome:
    return outcome if event is None else replace(outcome, events=(*outcome.events, event))


def _with_events(outcome: Outcome, events: tuple[Event, ...]) -> Outcome:
    return replace(outcome, events=(*outcome.events, *events)) if events else outcome


# -- 3. after the mutation -------------------------------------------------------------------------


def accepted(
    decision: Decision, operation_id: str, operation: OperationView, desired: Desired
) -> Outcome:
    """The host accepted the decision's mutation: record the pending operation (the one write
    that must follow the 202; if it is lost, the idempotency key replays this same operation)."""
    action = decision.action
    assert action is not None
    state = decision.outcome.state
    if isinstance(action, Create):
        state = _bound_to(state, action.target, operation.resource_uid)
    state = state.with_pending(Pending(operation_id, action.verb))
    if operation.state is not OpState.RUNNING:
        # A replayed key returned an already-settled operation: look again at once.
        return replace(decision.outcome, state=state, requeue_after=RETRY_SOON)
    event = Event(
        "Normal", _PENDING_REASON[action.verb], f"{action.verb} accepted as {operation_id}"
    )
    return replace(decision.outcome, state=state, events=(*decision.outcome.events, event))


_PENDING_REASON = {
    Verb.CREATE: Reason.CREATE_PENDING,
    Verb.UPDATE: Reason.UPDATE_PENDING,
    Verb.DELETE: Reason.DELETE_PENDING,
}


@dataclass(frozen=True)
class Rejection:
    """A host refusal of a mutation, translated once by the adapter."""

    code: str
    message: str
    #: For operation_in_progress and idempotency_key_reused: the operation the host named,
    #: consulted once by the adapter (None when it could not be read).
    operation_id: str | None = None
    operation: OperationView | None = None


def rejected(decision: Decision, refusal: Rejection, desired: Desired) -> Outcome:
    """The host refused the decision's mutation: nothing changed on the host."""
    state = decision.outcome.state
    action = decision.action
    assert action is not None
    code = refusal.code
    if code in ("operation_in_progress", "idempotency_key_reused") and refusal.operation_id:
        operation = refusal.operation
        key = operation.idempotency_key if operation else None
        if key is not None and key.startswith(key_prefix(desired.cr_uid)):
            # The operation is ours (our CR uid is in its key): resume it instead.
            resumed = state
            if isinstance(action, Create):
                resumed = _bound_to(
                    state, action.target, operation.resource_uid if operation else None
                )
            resumed = resumed.with_pending(Pending(refusal.operation_id, action.verb))
            return _waiting(resumed, Reason.OPERATION_RUNNING, f"resuming {refusal.operation_id}")
        message = f"another client's operation {refusal.operation_id} is running on this name"
        return _waiting(state, Reason.NAME_BUSY, message, RETRY_LATER)
    if code == "resource_exists" and isinstance(action, Create):
        message = (
            f"a resource named {action.target.name} already exists in space "
            f"{action.target.space} under another FormRef of {desired.line}; it is never adopted "
            "by name alone. Remedy: import it explicitly with spec.importId set to its canonical "
            "JSON import id, or choose another name."
        )
        return _blocked(state, Reason.NAME_TAKEN, message, POLL_READY)
    if code in ("resource_exists", "generation_conflict", "revision_conflict", "uid_mismatch"):
        # A fence held: someone else changed the host. Re-read and decide again; never overwrite.
        message = f"{action.verb} refused ({code}); re-reading the resource"
        return _waiting(state, Reason.OPERATION_RUNNING, message, RETRY_SOON)
    if code == "validation_failed":
        return degraded(state, Reason.INVALID_SPEC, refusal.message, None)
    return degraded(state, Reason.HOST_REJECTED, f"{code}: {refusal.message}", RETRY_LATER)
