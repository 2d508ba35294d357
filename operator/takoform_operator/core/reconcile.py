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

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from takoform_spec.identity import FormRef

from .actions import Action, Create, Delete, Target, Update, bound_to, same_target
from .conditions import Condition, ConditionType, Reason
from .errors import CodecError, InvalidImportId, UnknownFormRef
from .import_id import parse_import_id
from .keys import create_key, delete_key, is_ours, proves_ours, update_key
from .outcome import (
    POLL_READY,
    RETRY_LATER,
    RETRY_SOON,
    Event,
    Outcome,
    blocked,
    degraded,
    finalized,
    not_ours,
    not_ready,
    uid_mismatch,
    waiting,
    with_deleting,
)
from .ownership import Claimant, Identity, owner
from .registry import Registry
from .remedies import kubectl_name, kubectl_object, orphan_command
from .state import (
    DeletionPolicy,
    Desired,
    HostCondition,
    OperationView,
    OpState,
    Pending,
    Requested,
    ResourceView,
    State,
    Verb,
)
from .tables import (
    DELETE_TABLE,
    MUTATION_TABLE,
    Conclusion,
    Marker,
    UidRule,
    presence,
    uid_rule,
)
from .tenancy import DEFAULT_HOST

# -- values passed between the steps -------------------------------------------------------------


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


def _host_health(state: State, resource: ResourceView) -> Outcome | None:
    """The host resource's own account, when it says the resource is not ready: its Degraded
    is True, its Ready is False, or its status reflects an older generation than the one we
    last wrote. The host's reason and hostReason are carried in the message (the CR keeps
    its own closed set of reasons). None: nothing the host says stands against Ready."""
    observed = resource.observed_generation
    if observed is not None and _generation(observed) < _generation(resource.generation):
        message = (
            f"the host has not yet observed generation {resource.generation} of "
            f"{resource.name} (observedGeneration {observed})"
        )
        return waiting(state, Reason.HOST_RECONCILING, message)
    degraded_on_host = resource.condition("Degraded")
    if degraded_on_host is not None and degraded_on_host.status == "True":
        message = f"host reports Degraded: {_host_account(degraded_on_host)}"
        return degraded(state, Reason.HOST_DEGRADED, message, RETRY_LATER)
    ready_on_host = resource.condition("Ready")
    if ready_on_host is not None and ready_on_host.status != "True":
        message = f"host reports Ready={ready_on_host.status}: {_host_account(ready_on_host)}"
        return waiting(state, Reason.HOST_NOT_READY, message)
    return None


def _host_account(condition: HostCondition) -> str:
    """`<hostReason or reason>: <message>`, as much of it as the host gave."""
    parts = [p for p in (condition.host_reason or condition.reason, condition.message) if p]
    return ": ".join(parts) or "no reason given"


def _generation(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        return 0


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


def plan(
    desired: Desired,
    state: State,
    registry: Registry,
    claimants: Sequence[Claimant] = (),
) -> Plan | Outcome:
    """Which operation to consult and which exact resource to read; or an Outcome right away.

    `claimants` are the CRs of the cluster that name the same identity (core.ownership)."""
    if desired.deleting and desired.deletion_policy is DeletionPolicy.ORPHAN:
        # Orphan: forget without a host call.
        return Outcome(state=state, conditions=(), requeue_after=None, finalized=True)
    rival = _rival_owner(desired, state, claimants)
    if rival is not None:
        if desired.deleting:
            # Not ours to delete: the owner keeps it. Released without a host call.
            return finalized(state, f"released without a host call: {rival.ref} owns it")
        message = (
            f"{identity_of(desired, state)} is already managed by {rival.ref}; this CR sends "
            f"nothing while it does. Remedy: delete this CR: kubectl delete "
            f"{kubectl_object(desired)} ; or release the resource from {rival.ref} so this CR "
            f"can take it over: {_release_commands(desired, rival)}"
        )
        return blocked(state, Reason.ALREADY_MANAGED, message, POLL_READY)
    if state.form_ref is not None:
        return _plan_claimed(desired, state, registry)
    if state.pending is not None:
        # A pending operation without a bound ref cannot be written by this operator.
        message = "status holds a pending operation but no FormRef; restore the status"
        return blocked(state, Reason.STATE_UNREADABLE, message, None)
    if desired.deleting:
        # Every request is preceded by the write that records its target: none was sent.
        return finalized(state, "nothing was sent to the host")
    target = _requested_target(desired, registry)
    if isinstance(target, Outcome):
        return target
    return _claim(desired, state, target)


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


def _release_commands(desired: Desired, rival: Claimant) -> str:
    """The owner CR released without a host call: Orphan, then deleted."""
    owner_obj = kubectl_name(desired.line, rival.name, rival.namespace)
    return f"{orphan_command(owner_obj)} && kubectl delete {owner_obj}"


def _rival_owner(desired: Desired, state: State, claimants: Sequence[Claimant]) -> Claimant | None:
    me = Claimant(
        uid=desired.cr_uid,
        namespace=desired.namespace,
        name=desired.cr_name,
        created=desired.created,
        claimed=state.form_ref is not None,
    )
    winner = owner([me, *(c for c in claimants if c.uid != desired.cr_uid)])
    return None if winner is None or winner.uid == me.uid else winner


def _plan_claimed(desired: Desired, state: State, registry: Registry) -> Plan | Outcome:
    assert state.form_ref is not None and state.space is not None and state.name is not None
    changes = state.requested.changes(desired) if state.requested is not None else []
    if changes and not desired.deleting:
        if _import_never_bound(state):
            # An import that never found its target sent nothing but reads: claim afresh.
            target = _requested_target(desired, registry)
            return target if isinstance(target, Outcome) else _claim(desired, State(), target)
        return _identity_changed(desired, state, changes)
    try:
        registry.lookup(state.form_ref)
    except UnknownFormRef as exc:
        # Rule 4: nothing is read, updated or deleted under any other ref; state is kept.
        return with_deleting(blocked(state, Reason.FORM_REF_UNSUPPORTED, str(exc), None), desired)
    target = Target(state.space, state.form_ref, state.name)
    if state.pending is not None:
        return Plan(state.pending.operation_id, target)
    # Claimed but not bound: a create of ours may be running that we never recorded.
    listing = desired.deleting and state.uid is None and not _importing(state)
    return Plan(None, target, list_operations=listing)


def _importing(state: State) -> bool:
    return state.requested is not None and state.requested.import_id is not None


def _import_never_bound(state: State) -> bool:
    return _importing(state) and state.uid is None and state.pending is None


def _identity_changed(
    desired: Desired, state: State, changes: list[tuple[str, object, object]]
) -> Outcome:
    described = "; ".join(
        f"{label} is bound to {recorded!r} but the spec asks for {asked!r}"
        for label, recorded, asked in changes
    )
    obj = kubectl_object(desired)
    message = (
        f"identity changed after requests were sent: {described}. Nothing is sent while it "
        "differs. Remedies: (1) revert the field(s) to the bound value; or (2) release it with "
        f"deletionPolicy Orphan, without touching the host: {orphan_command(obj)} && kubectl "
        f"delete {obj} , then create a new CR that imports the resource (spec.importId)."
    )
    return with_deleting(blocked(state, Reason.IDENTITY_CHANGED, message, POLL_READY), desired)


def _requested_target(desired: Desired, registry: Registry) -> Target | Outcome:
    """The exact target the spec asks for: the import id's, or the create ref's."""
    if desired.import_id is not None:
        return _import_target(desired, State(), registry)
    try:
        ref = create_ref(desired, registry)
    except UnknownFormRef as exc:
        return blocked(State(), Reason.PIN_UNSUPPORTED, str(exc), None)
    except LookupError as exc:
        return blocked(State(), Reason.NO_DEFAULT_CREATE, str(exc), None)
    return Target(desired.space, ref, desired.name)


def _claim(desired: Desired, state: State, target: Target) -> Outcome:
    """Record the target (and the identity fields that chose it) before anything is sent: from
    now on every request goes to this target and ownership is a persisted fact."""
    claimed = replace(
        state,
        host=desired.host,
        form_ref=target.form_ref,
        space=target.space,
        name=target.name,
        requested=Requested.of(desired),
    )
    message = (
        f"claimed {target.name} under {target.form_ref} in space {target.space} "
        f"on host {desired.host}"
    )
    return replace(waiting(claimed, Reason.CLAIMED, message, RETRY_SOON), continue_now=True)


def _import_target(desired: Desired, state: State, registry: Registry) -> Target | Outcome:
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
        return blocked(state, Reason.IMPORT_REFUSED, str(exc), None)
    space = wanted.space if wanted.space is not None else desired.space
    if space != desired.space or wanted.name != desired.name:
        message = (
            f"import id names space {space!r} and name {wanted.name!r}, but spec.space is "
            f"{desired.space!r} and the resource name is {desired.name!r}; make them agree"
        )
        return degraded(state, Reason.SPACE_MISMATCH, message, None)
    return Target(space, wanted.form_ref, wanted.name)


# -- 2. decide -------------------------------------------------------------------------------------


def decide(
    desired: Desired, state: State, planned: Plan, seen: Observation, registry: Registry
) -> Decision:
    """Conclude from one consultation of the operation and one exact resource read."""
    try:
        if state.pending is not None:
            decision = _decide_pending(desired, state, seen, registry)
        elif state.uid is None:
            decision = _decide_claimed(desired, state, planned, seen, registry)
        else:
            decision = _decide_bound(desired, state, seen.resource, registry)
    except CodecError as exc:
        # Host state that does not decode under the exact ref: report, mutate nothing.
        outcome = degraded(state, Reason.HOST_STATE_UNDECODABLE, str(exc), RETRY_LATER)
        decision = Decision(outcome)
    return replace(decision, outcome=with_deleting(decision.outcome, desired))


def _decide_pending(
    desired: Desired, state: State, seen: Observation, registry: Registry
) -> Decision:
    assert state.pending is not None and seen.operation is not None
    pending, operation = state.pending, seen.operation
    expected_uid = state.uid or operation.resource_uid
    found = presence(seen.resource, expected_uid)
    table = DELETE_TABLE if pending.verb is Verb.DELETE else MUTATION_TABLE
    row = table[(operation.state, found)]
    # The row alone says what happens to the marker and to the attempt counter.
    base = state if row.marker is Marker.KEEP else state.with_pending(None)
    if row.fresh_attempt:
        base = base.fresh_attempt()
    failed = operation.state is OpState.FAILED
    opname = f"{pending.verb.lower()} operation {pending.operation_id}"
    running = f"{opname} is running"
    failure = f"{opname} failed ({operation.error_code}): {operation.error_message}"
    resource = seen.resource

    if row.conclusion is Conclusion.WAIT:
        return Decision(waiting(base, Reason.OPERATION_RUNNING, running))
    if row.conclusion is Conclusion.GONE:
        if pending.verb is Verb.DELETE or desired.deleting:
            return Decision(finalized(base, "host resource deleted"))
        gone = base.unbound()
        if pending.verb is Verb.CREATE and failed:
            return Decision(degraded(gone, Reason.OPERATION_FAILED, failure, RETRY_LATER))
        outcome = _drifted(
            gone, Reason.RESOURCE_DELETED, "the host resource is gone; it will be created again"
        )
        if failed:
            outcome = _with_event(outcome, Event("Warning", Reason.OPERATION_FAILED, failure))
        return Decision(outcome)
    assert resource is not None
    if row.conclusion is Conclusion.BLOCK:
        if expected_uid is None:
            return Decision(not_ours(desired, base, resource))
        rule = uid_rule(found, resource.uid, desired.accept_uid)
        if rule is UidRule.ACCEPTED and row.marker is Marker.CLEAR:
            return _decide_bound(desired, base, resource, registry, accepted=True)
        return Decision(uid_mismatch(desired, base, expected_uid, resource.uid))
    if row.conclusion is Conclusion.ADOPT_IF_PROVEN and not proves_ours(resource, desired):
        return Decision(not_ours(desired, base, resource))
    # SETTLE, or ADOPT_IF_PROVEN with the proof: the exact resource is ours.
    settled = _settled(base, resource, registry)
    if row.marker is Marker.KEEP:
        return Decision(waiting(settled, Reason.OPERATION_RUNNING, running))
    if failed:
        return Decision(degraded(settled, Reason.OPERATION_FAILED, failure, RETRY_LATER))
    return _decide_bound(desired, settled, resource, registry)


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
    if rule is UidRule.GONE:
        if desired.deleting:
            return Decision(finalized(state, "host resource already gone"))
        # Ordinary drift repair: forget the vanished incarnation; create anew next time.
        message = f"host resource {state.name} (uid {state.uid}) is gone; it will be created again"
        return Decision(_drifted(state.unbound().fresh_attempt(), Reason.RESOURCE_DELETED, message))
    assert resource is not None
    if rule is UidRule.BLOCKED:
        assert state.uid is not None
        return Decision(uid_mismatch(desired, state, state.uid, resource.uid))
    if rule is UidRule.ACCEPTED:
        state = state.fresh_attempt()  # a new incarnation starts a fresh key sequence
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
            return Decision(finalized(settled, "orphaned"))
        delete = Delete(target, resource.uid, delete_key(desired, settled, resource.uid))
        return Decision(
            _with_events(waiting(settled, Reason.DELETE_PENDING, "deleting"), events), delete
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
        health = _host_health(settled, resource)
        if health is not None:
            return Decision(_with_events(health, events))
        ready = Outcome(
            state=settled,
            conditions=(
                Condition(
                    ConditionType.READY, True, Reason.AVAILABLE, "host resource is up to date"
                ),
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
        key=update_key(desired, settled, resource.uid, resource.generation),
    )
    changed = sorted(k for k in set(wanted) | set(current) if wanted.get(k) != current.get(k))
    message = f"updating fields {', '.join(changed)} under {resource.form_ref.definition_version}"
    outcome = waiting(settled, Reason.UPDATE_PENDING, message)
    drift = Condition(ConditionType.DRIFTED, True, Reason.SPEC_DRIFT, message)
    return Decision(
        _with_events(replace(outcome, conditions=(*outcome.conditions, drift)), events), action
    )


def _decide_claimed(
    desired: Desired, state: State, planned: Plan, seen: Observation, registry: Registry
) -> Decision:
    """The target is recorded but no incarnation is bound: import it, adopt our own create
    whose answer was lost, or create it (replaying the same key, so never twice)."""
    assert planned.target is not None
    target, resource = planned.target, seen.resource
    if _importing(state) and not desired.deleting:
        if resource is None:
            message = f"nothing named {target.name} under {target.form_ref} in space {target.space}"
            return Decision(degraded(state, Reason.IMPORT_TARGET_NOT_FOUND, message, RETRY_LATER))
        imported = _settled(state, resource, registry)
        message = f"imported {resource.name} uid {resource.uid} under {resource.form_ref}"
        outcome = waiting(imported, Reason.IMPORTED, message, RETRY_SOON)
        return Decision(replace(outcome, events=(Event("Normal", Reason.IMPORTED, message),)))
    if resource is not None:
        if not proves_ours(resource, desired):
            if desired.deleting:
                return Decision(finalized(state, "nothing of ours exists on the host"))
            return Decision(not_ours(desired, state, resource))
        # Ours (a create whose answer we lost): adopt what the host served under the exact ref.
        return _decide_bound(desired, _settled(state, resource, registry), resource, registry)
    if desired.deleting:
        for operation_id, operation in seen.operations:
            if (
                operation.state is OpState.RUNNING
                and is_ours(operation, desired)
                and same_target(operation, Verb.CREATE, target)
            ):
                # A create of ours we never recorded: wait for it, then delete what it made.
                adopted = bound_to(state, target, operation.resource_uid).with_pending(
                    Pending(operation_id, Verb.CREATE)
                )
                return Decision(waiting(adopted, Reason.OPERATION_RUNNING, "create running"))
        return Decision(finalized(state, "nothing was created on the host"))
    codec = registry.codec_for(target.form_ref)
    try:
        spec = codec.encode(target.form_ref, desired.parameters)
    except CodecError as exc:
        return Decision(degraded(state, Reason.INVALID_SPEC, str(exc), None))
    action = Create(target, spec, create_key(desired, state))
    message = f"creating {target.name} under {target.form_ref}"
    return Decision(waiting(state, Reason.CREATE_PENDING, message), action)


def _same_request(operation: OperationView, action: Action) -> bool:
    if not same_target(operation, action.verb, action.target):
        return False
    if isinstance(action, Create):
        return True
    return operation.resource_uid == action.expected_uid


def _drifted(state: State, reason: Reason, message: str) -> Outcome:
    return not_ready(state, ConditionType.DRIFTED, reason, message, RETRY_SOON)


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
        state = bound_to(state, action.target, operation.resource_uid)
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
        if operation is not None and is_ours(operation, desired):
            if _same_request(operation, action):
                # Ours, for exactly this request (an earlier attempt): resume it.
                resumed = state
                if isinstance(action, Create):
                    resumed = bound_to(state, action.target, operation.resource_uid)
                resumed = resumed.with_pending(Pending(refusal.operation_id, action.verb))
                message = f"resuming {refusal.operation_id}"
                return waiting(resumed, Reason.OPERATION_RUNNING, message)
            if code == "idempotency_key_reused":
                # Our key, spent on another request: never adopt that one; use a fresh key.
                message = (
                    f"the key of this {action.verb} was spent on operation "
                    f"{refusal.operation_id} for another request; retrying with a fresh key"
                )
                return waiting(state.fresh_attempt(), Reason.OPERATION_RUNNING, message, RETRY_SOON)
        message = f"another operation ({refusal.operation_id}) is running on this name"
        return waiting(state, Reason.NAME_BUSY, message, RETRY_LATER)
    if code == "resource_exists" and isinstance(action, Create):
        message = (
            f"a resource named {action.target.name} already exists in space "
            f"{action.target.space} under another FormRef of {desired.line}; it is never adopted "
            f"by name alone. Remedy: import it explicitly: kubectl delete "
            f"{kubectl_object(desired)} , then apply it again with spec.importId set to its "
            "canonical JSON import id; or choose another name."
        )
        return blocked(state, Reason.NAME_TAKEN, message, POLL_READY)
    if code in ("resource_exists", "generation_conflict", "revision_conflict", "uid_mismatch"):
        # A fence held: someone else changed the host. Re-read and decide again; never overwrite.
        message = f"{action.verb} refused ({code}); re-reading the resource"
        return waiting(state, Reason.OPERATION_RUNNING, message, RETRY_SOON)
    if code == "validation_failed":
        return degraded(state, Reason.INVALID_SPEC, refusal.message, None)
    return degraded(state, Reason.HOST_REJECTED, f"{code}: {refusal.message}", RETRY_LATER)
