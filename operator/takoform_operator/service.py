"""The one reconcile of a CR against its host, as a straight line:

    read        kube.crs.read_cr (the caller's first step): what the CR asks for and what it
                recorded, restored from its binding; a CR that cannot be read stops there
    hold        core.policy.hold: the one policy of "send nothing / let go": a paused CR (or
                one whose pause is unclear) sends nothing, not even a read; a deletion that
                needs no host call (Orphan, Observe, never claimed: no binding of it on the API
                server, read there, not in the cache) is let go here and only here,
                its binding Released (the host resource stays) with the uid of a create of ours
                the status may not record (one read of the host's operations)
    grant       core.tenancy.access: the CR's namespace must hold a grant for the host and space
                the requests would go to, before anything is sent (deny by default)
    owner       core.ownership.claim: the TakoformBinding of the identity, created (the lock)
                or taken over on the API server before anything is sent; not ours: Blocked
    plan        core.plan.plan: identity unchanged? which operation and resource to read
    read        the planned reads, once each: the operations first, then the exact resource
                (0017 rule 7), so a create committing in between is seen, never missed
    decide      core.decide.decide, then core.policy.observe_only (Observe never mutates)
    act         at most one mutation; core.host_answer records what the host said
    let go      a finished deletion deletes the binding (or releases it: Orphan)

It performs I/O in the order the core asks for and returns the Outcome whose state the caller
persists. Crash safety does not depend on anything here being atomic: if the caller dies before
persisting, the next reconcile recomputes the same idempotency key and the host answers with the
operation it already accepted. The CR body and its status write (kube.cr_step) stay outside:
this module knows no Kubernetes; the bindings are a port (binding_port) like the host.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from takoform_operator.binding_port import (
    BindingConflict,
    BindingError,
    BindingExists,
    BindingPort,
)
from takoform_operator.core.actions import Action, Target, foreign_record
from takoform_operator.core.binding import Binding, Identity
from takoform_operator.core.conditions import Reason
from takoform_operator.core.decide import (
    Decision,
    Observation,
    bound_to_unrecorded_create,
    decide,
)
from takoform_operator.core.host_answer import Rejection, accepted, rejected
from takoform_operator.core.outcome import (
    Event,
    NextLook,
    Outcome,
    degraded,
    put_off,
    refused,
    unavailable,
)
from takoform_operator.core.ownership import (
    Bind,
    Contested,
    Ours,
    by_evidence,
    claim,
    creator_to_weigh,
    let_go,
    rebuilt,
    restored,
    restores,
    waits_for_its_owner,
)
from takoform_operator.core.plan import host_of, may_have_created, plan, reclaims, target_of
from takoform_operator.core.policy import hold, observe_only
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import kubectl_object
from takoform_operator.core.scrub import known_secrets, scrub_outcome
from takoform_operator.core.state import Desired, OperationView, ResourceView, State
from takoform_operator.core.tenancy import SpaceGrant, access, resolve_host
from takoform_operator.host_port import (
    BudgetSpent,
    FormUnknown,
    HostPort,
    HostProtocolError,
    HostRejected,
    HostUnavailable,
    OperationInProgress,
    SpaceNotFound,
)

#: A binding that changes under us this many times in one reconcile is decided again later.
_BIND_TRIES = 4


class Tenancy(Protocol):
    """The hosts and grants a cluster admin wrote (kube.tenancy), and a port per host."""

    def default_host(self) -> str | None: ...

    def marked_default(self) -> Collection[str]: ...

    def hosts(self) -> Collection[str]: ...

    def grants(self) -> Iterable[SpaceGrant]: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str]: ...

    def namespace_uid(self, namespace: str) -> str: ...

    def port(self, host: str, namespace: str) -> HostPort:
        """The port the CRs of `namespace` reach `host` by."""


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
    bindings: BindingPort,
    *,
    secrets: Collection[str] = (),
) -> Reconciled:
    """Hold, grant, owner, plan, read, decide, act, let go: see the module docstring. `state`
    is the CR's as kube.crs.read_cr restored it from its binding. Never
    raises for host trouble: it becomes an Outcome that keeps the state and says when to look
    again. A binding write the API server did not take raises BindingError (retried).

    Every outcome leaves here scrubbed (core.scrub) of the secret values it may carry in host
    words: the sensitive outputs of the representation read, and `secrets` (the values last
    written into the CR's connection Secret)."""
    reconciled = await _reconcile(desired, state, registry, tenancy, bindings)
    known = known_secrets(registry, reconciled.resource, secrets)
    return replace(reconciled, outcome=scrub_outcome(reconciled.outcome, known))


async def _reconcile(
    desired: Desired,
    state: State,
    registry: Registry,
    tenancy: Tenancy,
    bindings: BindingPort,
) -> Reconciled:
    # The namespace's incarnation, recorded beside its name in every binding this CR writes.
    desired = replace(desired, namespace_uid=tenancy.namespace_uid(desired.namespace))
    mine = bindings.held_by(desired.cr_uid)
    held = hold(desired, state)
    if held is not None and held.finalized and not state.claimed and mine is None:
        # Let go as never claimed: this process's cache may lag another process's claim (a
        # shard handover), so the API server is asked first (a quorum read of one binding).
        mine = await _claimed_elsewhere(desired, registry, tenancy, bindings) or mine
        state = restored(state, mine)
        held = hold(desired, state)
    # Neither recorded nor bound before this look: its binding is written before anything is
    # sent, so nothing of ours can be running on the target yet.
    claimed_now = not state.claimed
    if held is not None:
        if held.finalized:
            held = await _released_with_incarnation(desired, held, registry, tenancy)
        if held.finalized:
            held = await _let_go(desired, held, mine, bindings)
        return Reconciled(held)
    granted = _grant(desired, state, tenancy)
    if isinstance(granted, Outcome):
        return Reconciled(granted)
    desired, port = granted
    owned = await _own(desired, state, registry, bindings, port)
    if isinstance(owned, Outcome):
        return Reconciled(owned)
    binding, state, events = owned
    desired = replace(desired, restores=restores(binding, desired))
    planned = plan(desired, state, registry, claimed_now=claimed_now)
    if isinstance(planned, Outcome):
        return Reconciled(_with_events(planned, events))
    host = _ReadRecorder(port)
    try:
        # The operations first (0017 rule 7): a create that commits after they were read is
        # then still seen running, never taken for "nothing was created".
        operation = await host.get_operation(planned.operation_id) if planned.operation_id else None
        operations = (
            tuple(await host.list_operations(planned.target))
            if planned.list_operations and planned.target
            else ()
        )
        resource = await host.read(planned.target) if planned.target else None
    except HostUnavailable as exc:
        message = f"host unavailable while reading: {exc}"
        return Reconciled(_unavailable(state, exc, message), host.resource)
    except (FormUnknown, SpaceNotFound) as exc:
        # Never read as deletion: the host cannot serve this exact identity right now.
        message = f"the host refused the read: {exc}"
        return Reconciled(_trouble(state, Reason.HOST_REJECTED, message), host.resource)
    except (HostRejected, HostProtocolError) as exc:
        message = f"the host answer is unusable: {exc}"
        return Reconciled(_trouble(state, Reason.HOST_REJECTED, message), host.resource)
    if operation is not None and state.pending is not None and planned.target is not None:
        # The record consulted must be the pending request's: one naming another resource
        # settles nothing of ours (the marker stays until the host answers for it).
        foreign = foreign_record(operation, state.pending.verb, planned.target)
        if foreign is not None:
            return Reconciled(_trouble(state, Reason.HOST_REJECTED, foreign), host.resource)
    seen = Observation(operation, resource, operations)
    decided = decide(desired, state, planned, seen, registry)
    decision = observe_only(desired, decided, seen, registry)
    outcome = decision.outcome
    if decision.action is not None:
        outcome = await _act(desired, decision, host)
    if outcome.finalized:
        outcome = await _let_go(desired, outcome, binding, bindings)
    return Reconciled(_with_events(outcome, events), host.resource)


async def _own(
    desired: Desired, state: State, registry: Registry, bindings: BindingPort, port: HostPort
) -> tuple[Binding, State, tuple[Event, ...]] | Outcome:
    """The binding of the CR's target, held by this CR (created or taken over here, after the
    grant check and before anything is sent), with the state to go on with; or the Outcome of
    a CR that may not act (core.ownership). The API server decides every race: a create that
    finds the binding there, or a replace that finds it changed, is decided again."""
    if reclaims(desired, state):
        held = bindings.held_by(desired.cr_uid)
        if held is not None:
            await bindings.delete(held)
        state = State(attempt=state.attempt)
    target = target_of(desired, state, registry)
    if isinstance(target, Outcome):
        return target
    identity = Identity(target.space, target.form_ref.line, target.name, host_of(desired, state))
    for _ in range(_BIND_TRIES):
        verdict = claim(desired, state, target, await bindings.get(identity))
        if isinstance(verdict, Outcome):
            return verdict
        if isinstance(verdict, Ours):
            return verdict.binding, verdict.state, ()
        if isinstance(verdict, Contested):
            rival = verdict.binding
            if not await bindings.claim_exists(identity, verdict.owner):
                with contextlib.suppress(BindingConflict):
                    # Its owner went without releasing it (finalizer removed, namespace gone).
                    await bindings.replace(rival.lost(None))
                continue
            taken = await _by_evidence(desired, state, target, verdict, port)
            if taken is None:
                return verdict.outcome
            verdict = taken
        unbound = not verdict.binding.resource_version
        if unbound and (desired.import_id is not None or bindings.went(identity)):
            waits = await _waits_for_owner(desired, state, target, identity, bindings, port)
            if waits is not None:
                return waits
        try:
            if verdict.binding.resource_version:
                written = await bindings.replace(verdict.binding)
            else:
                written = await bindings.create(verdict.binding)
        except (BindingExists, BindingConflict):
            continue  # somebody else wrote it first: decide again on what they wrote
        return written, verdict.state, (verdict.event,) if verdict.event else ()
    raise BindingError(f"the TakoformBinding of {identity} kept changing; deciding again later")


async def _waits_for_owner(
    desired: Desired,
    state: State,
    target: Target,
    identity: Identity,
    bindings: BindingPort,
    port: HostPort,
) -> Outcome | None:
    """A CR about to bind a resource nobody holds: an import, or any CR where this process saw
    the binding go (an admin's forced release, the binding CRD reinstalled). A live CR that
    records it (in its status, or, for an import, by the creation key of the host resource:
    one read) binds it again, and this one waits (core.ownership.waits_for_its_owner). A
    missing binding is rebuilt from evidence, never won by a race. A create elsewhere needs no
    list: the binding it writes is the lock, and its create is fenced."""
    try:
        resource = await port.read(target) if desired.import_id is not None else None
    except HostUnavailable as exc:
        return _unavailable(state, exc, f"host unavailable while reading: {exc}")
    except (FormUnknown, SpaceNotFound, HostRejected, HostProtocolError) as exc:
        return _trouble(state, Reason.HOST_REJECTED, f"the host refused the read: {exc}")
    creator = creator_to_weigh(desired, resource)
    if await bindings.recorded_elsewhere(identity, desired.cr_uid, creator):
        return waits_for_its_owner(desired, state, identity)
    return None


async def _claimed_elsewhere(
    desired: Desired, registry: Registry, tenancy: Tenancy, bindings: BindingPort
) -> Binding | None:
    """The binding of the target this CR's spec asks for, as the API server holds it, when it
    is this CR's: written by a process whose status write this one never saw."""
    target = target_of(desired, State(), registry)
    host = resolve_host(desired.host_ref, tenancy.default_host())
    if isinstance(target, Outcome) or host is None:
        return None
    found = await bindings.read(Identity(target.space, target.form_ref.line, target.name, host))
    return found if found is not None and found.owned_by(desired.cr_uid) else None


async def _released_with_incarnation(
    desired: Desired, outcome: Outcome, registry: Registry, tenancy: Tenancy
) -> Outcome:
    """A deletion let go without a mutation (Orphan, Observe) while a create of ours may be
    unrecorded (core.plan.may_have_created): bound first to the incarnation that create named,
    from the host's listing (a read), so the Released binding remembers its uid. Best effort: a
    paused CR, one without a grant, or a host that cannot answer now releases what the status
    and binding recorded; the host resource stays either way, and a deletion that needs no host
    call is never held up by one (it is the way out of a host in trouble)."""
    state = outcome.state
    if desired.paused or not may_have_created(state):
        return outcome
    granted = _grant(desired, state, tenancy)
    if isinstance(granted, Outcome):
        return outcome
    desired, port = granted
    target = target_of(desired, state, registry)
    if isinstance(target, Outcome):
        return outcome
    try:
        listed = await port.list_operations(target)
    except (HostUnavailable, HostRejected, HostProtocolError):
        return outcome
    return replace(outcome, state=bound_to_unrecorded_create(desired, state, target, listed))


async def _let_go(
    desired: Desired, outcome: Outcome, binding: Binding | None, bindings: BindingPort
) -> Outcome:
    """A finished deletion: its binding Released (the host resource stays) or deleted (it
    went), before the finalizer goes. Not ours: nothing to write. None in the cache while the
    status records a target: the API server is asked, and a binding that went (forced, its CRD
    reinstalled) is rebuilt from the status, so a release still remembers this CR."""
    state = outcome.state
    if binding is None and (recorded := rebuilt(desired, state, host_of(desired, state))):
        binding = await bindings.read(recorded.identity)
        if binding is None:
            released = let_go(desired, state, recorded)
            if released is not None:
                with contextlib.suppress(BindingExists):  # bound by another CR meanwhile
                    await bindings.create(released)
            return outcome
    if binding is None or not binding.owned_by(desired.cr_uid):
        return outcome
    after = let_go(desired, outcome.state, binding)
    if after is None:
        await bindings.delete(binding)
    else:
        await bindings.replace(after)
    return outcome


async def _by_evidence(
    desired: Desired, state: State, target: Target, contested: Contested, port: HostPort
) -> Bind | None:
    """Two recorded claims (an upgrade from a release without bindings): one read of the
    recorded target, granted to this CR's namespace, and core.ownership.by_evidence decides."""
    if not contested.recorded:
        return None
    try:
        resource = await port.read(target)
    except (HostUnavailable, HostRejected, HostProtocolError):
        return None  # no evidence this time: Blocked, and asked again at the next look
    return by_evidence(desired, state, contested.binding, resource)


def _with_events(outcome: Outcome, events: tuple[Event, ...]) -> Outcome:
    return replace(outcome, events=(*events, *outcome.events)) if events else outcome


def _grant(desired: Desired, state: State, tenancy: Tenancy) -> Outcome | tuple[Desired, HostPort]:
    """The tenancy check, before anything is sent (brief section 9): the desired state with its
    host resolved and the port of the host requests go to, or a Blocked outcome."""
    resolved = resolve_host(desired.host_ref, tenancy.default_host())
    desired = replace(desired, host=resolved or "")
    # The target the requests go to: the recorded one, unless an import that never found it
    # claims afresh (core.plan.reclaims), which is granted for the one it is about to bind.
    claimed = state.claimed and state.space is not None and not reclaims(desired, state)
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
    return desired, tenancy.port(host, desired.namespace)


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
        return _unavailable(decision.outcome.state, exc, message)
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


def _unavailable(state: State, exc: HostUnavailable, message: str) -> Outcome:
    """Degraded HostUnavailable with `message`, or the look put off when only the budget held
    it back (nothing was sent)."""
    if isinstance(exc, BudgetSpent):
        return put_off(state, exc.retry_after)
    return unavailable(state, message, exc.retry_after)


def _trouble(state: State, reason: Reason, message: str) -> Outcome:
    return degraded(state, reason, message, NextLook.BACKOFF)
