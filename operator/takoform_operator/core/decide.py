"""Step 2 of a reconcile: what the two reads allow us to conclude, and at most one mutation."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from .actions import Action, Create, Delete, Target, Update, bound_to, same_target
from .conditions import Condition, ConditionType, Reason
from .errors import CodecError
from .keys import create_key, delete_key, is_ours, proves_ours, update_key
from .outcome import (
    Event,
    NextLook,
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
from .plan import Plan, importing, may_have_created
from .registry import Registry
from .remedies import Remedy, kubectl_object, release_command
from .state import (
    Desired,
    HostCondition,
    OperationView,
    OpState,
    Pending,
    ResourceView,
    State,
    Verb,
)
from .tables import DELETE_TABLE, MUTATION_TABLE, Conclusion, Marker, UidRule, presence, uid_rule

#: One operation of a listing: its id and its record.
Listed = tuple[str, OperationView]


@dataclass(frozen=True)
class Observation:
    operation: OperationView | None = None
    resource: ResourceView | None = None
    #: Operations the host retains for the target name (only when Plan.list_operations), read
    #: before the resource.
    operations: tuple[Listed, ...] = field(default=())


@dataclass(frozen=True)
class Decision:
    outcome: Outcome
    action: Action | None = None


def decide(
    desired: Desired, state: State, planned: Plan, seen: Observation, registry: Registry
) -> Decision:
    """Conclude from one consultation of the operation (or the listing) and one exact
    resource read."""
    unrecorded = _unrecorded(desired, state, planned, seen)
    if unrecorded is not None:
        # As if the status had recorded it: the same rule 7 row, whatever it says.
        state, seen = unrecorded
    try:
        if state.pending is not None:
            decision = _decide_pending(desired, state, seen, registry)
        elif state.uid is None:
            decision = _decide_claimed(desired, state, planned, seen, registry)
        else:
            decision = _decide_bound(desired, state, seen.resource, registry)
    except CodecError as exc:
        # Host state that does not decode under the exact ref: report, mutate nothing.
        outcome = degraded(state, Reason.HOST_STATE_UNDECODABLE, str(exc), NextLook.BACKOFF)
        decision = Decision(outcome)
    return replace(decision, outcome=with_deleting(decision.outcome, desired))


def unrecorded_create(
    desired: Desired, state: State, target: Target, operations: Iterable[Listed]
) -> Listed | None:
    """The listed create that this state's next create would replay (its key, exactly this
    target): accepted by the host while the status did not record it. Any other create (an
    earlier attempt's, another CR's) is not the one this state stands for."""
    key = create_key(desired, state)
    return next(
        (
            (operation_id, operation)
            for operation_id, operation in operations
            if operation.idempotency_key == key and same_target(operation, Verb.CREATE, target)
        ),
        None,
    )


def bound_to_unrecorded_create(
    desired: Desired, state: State, target: Target, operations: Iterable[Listed]
) -> State:
    """The state bound to the incarnation an unrecorded create of ours named (one that did
    not fail: a failed create made nothing), else the state as it is. What an Orphan deletion
    releases, so the binding remembers the uid."""
    if not may_have_created(state):
        return state
    found = unrecorded_create(desired, state, target, operations)
    if found is None or found[1].state is OpState.FAILED:
        return state
    return bound_to(state, target, found[1].resource_uid)


def _unrecorded(
    desired: Desired, state: State, planned: Plan, seen: Observation
) -> tuple[State, Observation] | None:
    """The state with the unrecorded create of ours the listing holds recorded pending, and
    that record as the operation consulted; None when the listing holds none."""
    if not planned.list_operations or planned.target is None or not may_have_created(state):
        return None
    found = unrecorded_create(desired, state, planned.target, seen.operations)
    if found is None:
        return None
    operation_id, operation = found
    recorded = bound_to(state, planned.target, operation.resource_uid)
    recorded = recorded.with_pending(Pending(operation_id, Verb.CREATE))
    return recorded, replace(seen, operation=operation)


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
        if importing(state) and state.uid is not None:
            return Decision(_import_gone(desired, base))
        gone = base.unbound()
        if pending.verb is Verb.CREATE and failed:
            return Decision(degraded(gone, Reason.OPERATION_FAILED, failure, NextLook.BACKOFF))
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
        return Decision(degraded(settled, Reason.OPERATION_FAILED, failure, NextLook.BACKOFF))
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
        if importing(state):
            return Decision(_import_gone(desired, state))
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
        # Orphan and Observe deletions never get here: policy.hold let them go before planning.
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
        return Decision(degraded(settled, Reason.INVALID_SPEC, str(exc), NextLook.POLL))
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
            next_look=NextLook.POLL,
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
    """The target is recorded but no incarnation is bound and the listing (if any) holds no
    create of ours under this state's key: import it, adopt our own create whose answer and
    record were lost, or create it (replaying the same key, so never twice)."""
    assert planned.target is not None
    target, resource = planned.target, seen.resource
    if importing(state) and not desired.deleting:
        if resource is None:
            message = f"nothing named {target.name} under {target.form_ref} in space {target.space}"
            return Decision(
                degraded(state, Reason.IMPORT_TARGET_NOT_FOUND, message, NextLook.BACKOFF)
            )
        imported = _settled(state, resource, registry)
        message = f"imported {resource.name} uid {resource.uid} under {resource.form_ref}"
        outcome = waiting(imported, Reason.IMPORTED, message, NextLook.NOW)
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
                # Ours under another key (an earlier attempt's), still running: wait for it,
                # then delete what it made.
                adopted = bound_to(state, target, operation.resource_uid).with_pending(
                    Pending(operation_id, Verb.CREATE)
                )
                return Decision(waiting(adopted, Reason.OPERATION_RUNNING, "create running"))
        return Decision(finalized(state, "nothing was created on the host"))
    codec = registry.codec_for(target.form_ref)
    try:
        spec = codec.encode(target.form_ref, desired.parameters)
    except CodecError as exc:
        return Decision(degraded(state, Reason.INVALID_SPEC, str(exc), NextLook.POLL))
    action = Create(target, spec, create_key(desired, state))
    message = f"creating {target.name} under {target.form_ref}"
    return Decision(waiting(state, Reason.CREATE_PENDING, message), action)


def _import_gone(desired: Desired, state: State) -> Outcome:
    """An imported resource vanished: it was never ours to create, so it is not created again,
    and the uid it was bound to stays (a later incarnation under the name is a UidMismatch)."""
    obj = kubectl_object(desired)
    message = (
        f"the imported host resource {state.name} (uid {state.uid}) is gone from space "
        f"{state.space}; it is not created again (it was imported, not created by this CR)."
    )
    remedies = (
        Remedy("restore it on the host (the same uid), or re-create it and accept the new uid"),
        Remedy(
            "or let this CR go without a host call",
            release_command(obj),
            obj,
        ),
    )
    return blocked(state, Reason.IMPORTED_RESOURCE_GONE, message, remedies)


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
        return degraded(state, Reason.HOST_DEGRADED, message, NextLook.BACKOFF)
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


def _drifted(state: State, reason: Reason, message: str) -> Outcome:
    return not_ready(state, ConditionType.DRIFTED, reason, message, NextLook.NOW)


def _with_event(outcome: Outcome, event: Event | None) -> Outcome:
    return outcome if event is None else replace(outcome, events=(*outcome.events, event))


def _with_events(outcome: Outcome, events: tuple[Event, ...]) -> Outcome:
    return replace(outcome, events=(*outcome.events, *events)) if events else outcome
