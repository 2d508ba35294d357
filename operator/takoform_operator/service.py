"""One reconcile against a host: the reads the core plans, at most one mutation, the outcome.

This is the service layer between the pure core (takoform_operator.core: plan, decide,
host_answer) and the adapters (the host client, kopf). It performs I/O in the order the core asks
for and returns the Outcome whose state the caller persists. Crash safety does not depend on
anything here being atomic: if the caller dies before persisting, the next reconcile recomputes
the same idempotency key and the host answers with the operation it already accepted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from takoform_operator.core.conditions import Reason
from takoform_operator.core.decide import Decision, Observation, decide
from takoform_operator.core.host_answer import Rejection, accepted, rejected
from takoform_operator.core.outcome import NextLook, Outcome, degraded, unavailable
from takoform_operator.core.ownership import Claimant
from takoform_operator.core.plan import plan
from takoform_operator.core.policy import hold, observe_only
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import Desired, OperationView, State
from takoform_operator.host_port import (
    FormUnknown,
    HostPort,
    HostProtocolError,
    HostRejected,
    HostUnavailable,
    OperationInProgress,
    SpaceNotFound,
)


async def reconcile_once(
    desired: Desired,
    state: State,
    host: HostPort,
    registry: Registry,
    claimants: Sequence[Claimant] = (),
) -> Outcome:
    """Observe, decide, act at most once. Never raises for host trouble: it becomes an Outcome
    that keeps the state and says when to look again. `claimants`: the CRs that name the same
    identity (the ownership index); a CR that does not own its identity sends nothing. A
    paused CR sends nothing at all, and an Observe CR never a mutation (core.policy)."""
    held = hold(desired, state)
    if held is not None:
        return held
    planned = plan(desired, state, registry, claimants)
    if isinstance(planned, Outcome):
        return planned
    try:
        operation = await host.get_operation(planned.operation_id) if planned.operation_id else None
        resource = await host.read(planned.target) if planned.target else None
        operations = (
            tuple(await host.list_operations(planned.target))
            if planned.list_operations and planned.target
            else ()
        )
    except HostUnavailable as exc:
        return _unavailable(state, f"host unavailable while reading: {exc}", exc.retry_after)
    except (FormUnknown, SpaceNotFound) as exc:
        # Never read as deletion: the host cannot serve this exact identity right now.
        return _trouble(state, Reason.HOST_REJECTED, f"the host refused the read: {exc}")
    except (HostRejected, HostProtocolError) as exc:
        return _trouble(state, Reason.HOST_REJECTED, f"the host answer is unusable: {exc}")
    seen = Observation(operation, resource, operations)
    decision = decide(desired, state, planned, seen, registry)
    decision = observe_only(desired, decision, seen, registry)
    if decision.action is None:
        return decision.outcome
    return await _act(desired, decision, host)


async def _act(desired: Desired, decision: Decision, host: HostPort) -> Outcome:
    assert decision.action is not None
    try:
        operation_id, operation = await host.execute(decision.action)
    except HostUnavailable as exc:
        # The outcome is unknown; the next reconcile replays the same key, never a blind re-send.
        message = f"{decision.action.verb} answer lost ({exc}); it will be replayed with its key"
        return _unavailable(decision.outcome.state, message, exc.retry_after)
    except HostRejected as exc:
        refusal = Rejection(exc.code, exc.message)
        if isinstance(exc, OperationInProgress) and exc.operation_id:
            named: OperationView | None
            try:
                named = await host.get_operation(exc.operation_id)
            except (HostUnavailable, HostRejected, HostProtocolError):
                named = None
            refusal = replace(refusal, operation_id=exc.operation_id, operation=named)
        return rejected(decision, refusal, desired)
    except HostProtocolError as exc:
        return _trouble(decision.outcome.state, Reason.HOST_REJECTED, str(exc))
    return accepted(decision, operation_id, operation, desired)


def _unavailable(state: State, message: str, retry_after: float | None) -> Outcome:
    return unavailable(state, message, retry_after)


def _trouble(state: State, reason: Reason, message: str) -> Outcome:
    return degraded(state, reason, message, NextLook.BACKOFF)
