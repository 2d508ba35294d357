"""The one reconcile of a CR against its host, as a straight line:

    hold        core.policy.hold: a paused CR sends nothing, not even a read; a deletion that
                needs no host call (Orphan, Observe, never claimed) is let go here and only here
    grant       core.tenancy.access: the CR's namespace must hold a grant for the host and space
                the requests would go to, before anything is sent (deny by default)
    owner/plan  core.plan.plan: one owner per identity; which operation and resource to read
    read        the planned reads, once each
    decide      core.decide.decide, then core.policy.observe_only (Observe never mutates)
    act         at most one mutation; core.host_answer records what the host said

It performs I/O in the order the core asks for and returns the Outcome whose state the caller
persists. Crash safety does not depend on anything here being atomic: if the caller dies before
persisting, the next reconcile recomputes the same idempotency key and the host answers with the
operation it already accepted. The CR body (kube.cr_reconcile) and the status write
(kube.handlers) stay outside: this module knows no Kubernetes.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from takoform_operator.core.actions import Action, Target
from takoform_operator.core.conditions import Reason
from takoform_operator.core.decide import Decision, Observation, decide
from takoform_operator.core.host_answer import Rejection, accepted, rejected
from takoform_operator.core.outcome import NextLook, Outcome, degraded, refused, unavailable
from takoform_operator.core.ownership import Claimant, Identity
from takoform_operator.core.plan import host_of, identity_of, plan
from takoform_operator.core.policy import hold, observe_only
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import kubectl_object
from takoform_operator.core.state import Desired, OperationView, ResourceView, State
from takoform_operator.core.tenancy import SpaceGrant, access, resolve_host
from takoform_operator.host_port import (
    FormUnknown,
    HostPort,
    HostProtocolError,
    HostRejected,
    HostUnavailable,
    OperationInProgress,
    SpaceNotFound,
)


class Tenancy(Protocol):
    """The hosts and grants a cluster admin wrote (kube.tenancy), and a port per host."""

    def default_host(self) -> str | None: ...

    def marked_default(self) -> Collection[str]: ...

    def hosts(self) -> Collection[str]: ...

    def grants(self) -> Iterable[SpaceGrant]: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str]: ...

    def port(self, host: str) -> HostPort: ...


class ClaimIndex(Protocol):
    """Every CR of the cluster that names an identity (the CR being reconciled included)."""

    def claimants(self, identity: Identity) -> Sequence[Claimant]: ...


@dataclass(frozen=True)
class Reconciled:
    outcome: Outcome
    #: The last representation of the target read by this reconcile (None: none was read).
    #: Sensitive outputs come from the same read the decision was made on, never from state.
    resource: ResourceView | None = None


async def reconcile(
    desired: Desired,
    state: State,
    registry: Registry,
    tenancy: Tenancy,
    claims: ClaimIndex,
) -> Reconciled:
    """Hold, grant, plan, read, decide, act: see the module docstring. Never raises for host
    trouble: it becomes an Outcome that keeps the state and says when to look again."""
    held = hold(desired, state)
    if held is not None:
        return Reconciled(held)
    granted = _grant(desired, state, tenancy)
    if isinstance(granted, Outcome):
        return Reconciled(granted)
    desired, port = granted
    planned = plan(desired, state, registry, claims.claimants(identity_of(desired, state)))
    if isinstance(planned, Outcome):
        return Reconciled(planned)
    host = _ReadRecorder(port)
    try:
        operation = await host.get_operation(planned.operation_id) if planned.operation_id else None
        resource = await host.read(planned.target) if planned.target else None
        operations = (
            tuple(await host.list_operations(planned.target))
            if planned.list_operations and planned.target
            else ()
        )
    except HostUnavailable as exc:
        message = f"host unavailable while reading: {exc}"
        return Reconciled(unavailable(state, message, exc.retry_after), host.resource)
    except (FormUnknown, SpaceNotFound) as exc:
        # Never read as deletion: the host cannot serve this exact identity right now.
        message = f"the host refused the read: {exc}"
        return Reconciled(_trouble(state, Reason.HOST_REJECTED, message), host.resource)
    except (HostRejected, HostProtocolError) as exc:
        message = f"the host answer is unusable: {exc}"
        return Reconciled(_trouble(state, Reason.HOST_REJECTED, message), host.resource)
    seen = Observation(operation, resource, operations)
    decided = decide(desired, state, planned, seen, registry)
    decision = observe_only(desired, decided, seen, registry)
    if decision.action is None:
        return Reconciled(decision.outcome, host.resource)
    return Reconciled(await _act(desired, decision, host), host.resource)


def _grant(desired: Desired, state: State, tenancy: Tenancy) -> Outcome | tuple[Desired, HostPort]:
    """The tenancy check, before anything is sent (brief section 9): the desired state with its
    host resolved and the port of the host requests go to, or a Blocked outcome."""
    resolved = resolve_host(desired.host_ref, tenancy.default_host())
    desired = replace(desired, host=resolved or "")
    claimed = state.claimed and state.space is not None
    host = host_of(desired, state) if claimed else resolved
    space = str(state.space) if claimed else desired.space
    denied = access(
        namespace=desired.namespace,
        namespace_labels=tenancy.namespace_labels(desired.namespace),
        host=host,
        host_ref=desired.host_ref,
        space=space,
        hosts=tenancy.hosts(),
        grants=tenancy.grants(),
        marked_default=tenancy.marked_default(),
        obj=kubectl_object(desired),
    )
    if denied is not None:
        return refused(desired, state, denied.reason, denied.message, denied.remedies)
    assert host is not None
    return desired, tenancy.port(host)


class _ReadRecorder:
    """The host port, remembering the last representation read."""

    def __init__(self, port: HostPort) -> None:
        self._port = port
        self.resource: ResourceView | None = None

    async def get_operation(self, operation_id: str) -> OperationView:
        return await self._port.get_operation(operation_id)

    async def read(self, target: Target) -> ResourceView | None:
        self.resource = await self._port.read(target)
        return self.resource

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        return await self._port.list_operations(target)

    async def execute(self, action: Action) -> tuple[str, OperationView]:
        return await self._port.execute(action)


async def _act(desired: Desired, decision: Decision, host: HostPort) -> Outcome:
    assert decision.action is not None
    try:
        operation_id, operation = await host.execute(decision.action)
    except HostUnavailable as exc:
        # The outcome is unknown; the next reconcile replays the same key, never a blind re-send.
        message = f"{decision.action.verb} answer lost ({exc}); it will be replayed with its key"
        return unavailable(decision.outcome.state, message, exc.retry_after)
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


def _trouble(state: State, reason: Reason, message: str) -> Outcome:
    return degraded(state, reason, message, NextLook.BACKOFF)
