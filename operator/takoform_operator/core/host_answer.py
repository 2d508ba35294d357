"""Step 3 of a reconcile: the state to persist once the host accepted or refused the mutation."""

from __future__ import annotations

from dataclasses import dataclass, replace

from takoform_spec.host_api import ErrorCode

from .actions import Action, Create, bound_to, same_target
from .conditions import Reason
from .decide import Decision
from .keys import is_ours
from .outcome import Event, NextLook, Outcome, blocked, degraded, import_remedies, waiting
from .state import Desired, OperationView, OpState, Pending, Verb


def accepted(
    decision: Decision, operation_id: str, operation: OperationView, desired: Desired
) -> Outcome:
    """The host accepted the decision's mutation: record the pending operation (the one write
    that must follow the 202; if it is lost, the idempotency key replays this same operation).
    Running, and recorded by the host under our key, it is `replayable`: the adapter may hold
    its write until the next look, which usually finds it settled (one write instead of two)."""
    action = decision.action
    assert action is not None
    state = decision.outcome.state
    if isinstance(action, Create):
        state = bound_to(state, action.target, operation.resource_uid)
    state = state.with_pending(Pending(operation_id, action.verb))
    if operation.state is not OpState.RUNNING:
        # A replayed key returned an already-settled operation: look again at once.
        return replace(decision.outcome, state=state, next_look=NextLook.NOW)
    event = Event(
        "Normal", _PENDING_REASON[action.verb], f"{action.verb} accepted as {operation_id}"
    )
    replayable = operation.idempotency_key == action.key
    return replace(
        decision.outcome,
        state=state,
        events=(*decision.outcome.events, event),
        replayable=replayable,
    )


_PENDING_REASON = {
    Verb.CREATE: Reason.CREATE_PENDING,
    Verb.UPDATE: Reason.UPDATE_PENDING,
    Verb.DELETE: Reason.DELETE_PENDING,
}


@dataclass(frozen=True)
class Rejection:
    """A host refusal of a mutation, translated once by the adapter."""

    code: ErrorCode
    message: str
    #: For operation_in_progress and idempotency_key_reused: the operation the host named,
    #: consulted once by the adapter (None when it could not be read).
    operation_id: str | None = None
    operation: OperationView | None = None


#: Another operation holds the name (H-26), or our key was spent (H-29): both name the operation.
_BUSY = frozenset({ErrorCode.OPERATION_IN_PROGRESS, ErrorCode.IDEMPOTENCY_KEY_REUSED})
#: A fence held (H-21, H-23 to H-25): someone else changed the host.
_FENCES = frozenset(
    {
        ErrorCode.RESOURCE_EXISTS,
        ErrorCode.GENERATION_CONFLICT,
        ErrorCode.REVISION_CONFLICT,
        ErrorCode.UID_MISMATCH,
    }
)


def rejected(decision: Decision, refusal: Rejection, desired: Desired) -> Outcome:
    """The host refused the decision's mutation: nothing changed on the host."""
    state = decision.outcome.state
    action = decision.action
    assert action is not None
    code = refusal.code
    if code in _BUSY and refusal.operation_id:
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
            if code == ErrorCode.IDEMPOTENCY_KEY_REUSED:
                # Our key, spent on another request: never adopt that one; use a fresh key.
                message = (
                    f"the key of this {action.verb} was spent on operation "
                    f"{refusal.operation_id} for another request; retrying with a fresh key"
                )
                return waiting(
                    state.fresh_attempt(), Reason.OPERATION_RUNNING, message, NextLook.NOW
                )
        message = f"another operation ({refusal.operation_id}) is running on this name"
        return waiting(state, Reason.NAME_BUSY, message, NextLook.BACKOFF)
    if code == ErrorCode.RESOURCE_EXISTS and isinstance(action, Create):
        message = (
            f"a resource named {action.target.name} already exists in space "
            f"{action.target.space} under another FormRef of {desired.line}; it is never adopted "
            "by name alone."
        )
        return blocked(state, Reason.NAME_TAKEN, message, import_remedies(desired, None))
    if code in _FENCES:
        # A fence held: someone else changed the host. Re-read and decide again; never overwrite.
        message = f"{action.verb} refused ({code}); re-reading the resource"
        return waiting(state, Reason.OPERATION_RUNNING, message, NextLook.NOW)
    if code == ErrorCode.VALIDATION_FAILED:
        return degraded(state, Reason.INVALID_SPEC, refusal.message, NextLook.POLL)
    return degraded(state, Reason.HOST_REJECTED, f"{code}: {refusal.message}", NextLook.BACKOFF)


def _same_request(operation: OperationView, action: Action) -> bool:
    if not same_target(operation, action.verb, action.target):
        return False
    if isinstance(action, Create):
        return True
    return operation.resource_uid == action.expected_uid
