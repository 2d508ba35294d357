"""One reconcile of one CR body: its state and desired spec read, the service run, its status.

Plain async code over the CR's JSON body, with no kopf and no Kubernetes API calls: the kopf
handlers call it and write the status it returns; the model checker (tests/model) calls it over a
simulated cluster. Every error a CR can cause becomes an outcome here, never an exception.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from takoform_operator.core.actions import Action, Target
from takoform_operator.core.conditions import Reason
from takoform_operator.core.connection import ConnectionSecret, connection_secret, secret_name
from takoform_operator.core.outcome import NextLook, Outcome, degraded, refused
from takoform_operator.core.ownership import Claimant, Identity
from takoform_operator.core.plan import host_of, identity_of
from takoform_operator.core.policy import hold
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import kubectl_object
from takoform_operator.core.state import (
    DeletionPolicy,
    Desired,
    OperationView,
    ResourceView,
    State,
    StateUnreadable,
    state_from_status,
)
from takoform_operator.core.tenancy import SpaceGrant, access, resolve_host
from takoform_operator.host_port import HostPort
from takoform_operator.kube.crs import (
    InvalidCustomResource,
    desired_for_deletion,
    desired_from_cr,
    merged_status,
    status_patch,
)
from takoform_operator.service import reconcile_once


class ClaimIndex(Protocol):
    """Every CR of the cluster that names an identity (the CR being reconciled included)."""

    def claimants(self, identity: Identity) -> Sequence[Claimant]: ...


class Tenancy(Protocol):
    """The hosts and grants a cluster admin wrote (kube.tenancy), and a port per host."""

    def default_host(self) -> str | None: ...

    def marked_default(self) -> Collection[str]: ...

    def hosts(self) -> Collection[str]: ...

    def grants(self) -> Iterable[SpaceGrant]: ...

    def namespace_labels(self, namespace: str) -> Mapping[str, str]: ...

    def port(self, host: str) -> HostPort: ...


@dataclass(frozen=True)
class CrOutcome:
    outcome: Outcome
    #: The merge-patch for the status subresource; None when there is nothing to write (the
    #: status already says all of it, or the CR may go: outcome.finalized).
    status: dict[str, Any] | None
    #: The connection Secret the sensitive outputs of this reconcile's read go to (None: none
    #: to write: no sensitive output, or no read of the bound incarnation; core.connection).
    connection: ConnectionSecret | None = None


async def reconcile_cr_body(
    body: Mapping[str, Any],
    host: HostPort,
    registry: Registry,
    claims: ClaimIndex,
    *,
    now: str,
    deleting: bool = False,
    tenancy: Tenancy | None = None,
) -> CrOutcome:
    """Reconcile the CR `body` once. `deleting` forces deletion even before the body says so.

    With `tenancy` (the operator always passes it) the CR's namespace must hold a grant for the
    host and space requests would go to, checked before anything is sent; `host` is then
    unused and the port of that host is taken from `tenancy`. Without it (single-host test
    harnesses) every request goes to `host`."""
    metadata = body.get("metadata") or {}
    status = dict(body.get("status") or {})
    generation = int(metadata.get("generation") or 0)
    try:
        state = state_from_status(status)
    except StateUnreadable as exc:
        outcome = degraded(State(), Reason.STATE_UNREADABLE, str(exc), NextLook.POLL)
        patch = status_patch(outcome, status, now=now, cr_generation=generation)
        return CrOutcome(outcome, {k: patch[k] for k in ("conditions", "observedGeneration")})
    deleting = deleting or metadata.get("deletionTimestamp") is not None
    try:
        desired = desired_from_cr(body)
    except InvalidCustomResource as exc:
        if deleting and not state.claimed:
            # Nothing was ever sent for a CR that never claimed a target: let it go.
            return CrOutcome(Outcome(state, (), NextLook.NEVER, finalized=True), None)
        try:
            if not (deleting and state.requested is not None):
                raise
            # A deletion needs only what was recorded, not the spec that no longer parses.
            desired = desired_for_deletion(body, state.requested)
        except InvalidCustomResource:
            outcome = degraded(state, Reason.INVALID_SPEC, str(exc), NextLook.POLL)
            return CrOutcome(outcome, _patch(outcome, status, now, generation))
    if deleting and not desired.deleting:
        desired = replace(desired, deleting=True)
    held = hold(desired, state)
    if held is not None:
        # Before the tenancy gate: a paused CR reports its pause, and a deletion that sends
        # nothing needs no grant (reconcile_once checks the same for its other callers).
        if held.finalized:
            return CrOutcome(held, None)
        return CrOutcome(held, _patch(held, status, now, generation))
    if tenancy is not None:
        gate = _gate(desired, state, tenancy)
        if isinstance(gate, Outcome):
            return CrOutcome(gate, _patch(gate, status, now, generation))
        desired, host = gate
    identity = identity_of(desired, state)
    reads = ReadRecorder(host)
    outcome = await reconcile_once(desired, state, reads, registry, claims.claimants(identity))
    if outcome.finalized:
        return CrOutcome(outcome, None)
    secret = None if deleting else _connection(body, outcome, reads.resource, registry)
    return CrOutcome(outcome, _patch(outcome, status, now, generation), secret)


def _connection(
    body: Mapping[str, Any],
    outcome: Outcome,
    resource: ResourceView | None,
    registry: Registry,
) -> ConnectionSecret | None:
    """The CR's connection Secret after this reconcile (spec.writeConnectionSecretToRef, or
    the default name), or None when nothing may be written."""
    metadata = body.get("metadata") or {}
    ref = (body.get("spec") or {}).get("writeConnectionSecretToRef")
    wanted = ref.get("name") if isinstance(ref, Mapping) else None
    return connection_secret(
        registry,
        outcome.state,
        resource,
        namespace=str(metadata.get("namespace")),
        name=secret_name(str(metadata.get("name")), str(wanted) if wanted else None),
    )


class ReadRecorder:
    """The host port, remembering the last representation read: the sensitive outputs come
    from the same read the reconcile decided on, and never enter its state."""

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


def _patch(
    outcome: Outcome, status: Mapping[str, Any], now: str, generation: int
) -> dict[str, Any] | None:
    """The status patch, or None when it would change nothing: a steady resource costs no write."""
    patch = status_patch(outcome, status, now=now, cr_generation=generation)
    return None if merged_status(status, patch) == dict(status) else patch


def _gate(desired: Desired, state: State, tenancy: Tenancy) -> Outcome | tuple[Desired, HostPort]:
    """The tenancy check, before anything is sent (brief section 9): the desired state with its
    host resolved and the port of the host requests go to, or a Blocked outcome."""
    resolved = resolve_host(desired.host_ref, tenancy.default_host())
    desired = replace(desired, host=resolved or "")
    if desired.deleting and (desired.deletion_policy is DeletionPolicy.ORPHAN or not state.claimed):
        # These deletions send nothing (core.plan.plan): no grant is needed to let go.
        return desired, NoHost()
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
        return refused(desired, state, denied.reason, denied.message)
    assert host is not None
    return desired, tenancy.port(host)


class NoHost:
    """The port of a reconcile that must send nothing: any call is a bug, refused loudly."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"host call {name} on a path that sends nothing")
