"""One reconcile of one CR body: its state and desired spec read, the service run, its status.

Plain async code over the CR's JSON body, with no kopf and no Kubernetes API calls: the kopf
handlers call it and write the status it returns; the model checker (tests/model) calls it over
a simulated cluster and its bindings. Every error a CR can cause becomes an outcome here, never
an exception; the reconcile itself is service.reconcile. `reconcile_and_persist` is the step both
run: the reconcile, then its status written through the writer they pass.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any

from takoform_operator.binding_port import BindingPort
from takoform_operator.core.conditions import Reason
from takoform_operator.core.connection import ConnectionSecret, connection_secret, secret_name
from takoform_operator.core.depth import pruned_paths, too_deep_message
from takoform_operator.core.outcome import NextLook, Outcome, blocked, degraded, with_deleting
from takoform_operator.core.ownership import let_go, restored
from takoform_operator.core.policy import releases_without_host_call
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import Remedy, kubectl_name, unreadable_status_remedies
from takoform_operator.core.state import (
    Requested,
    ResourceView,
    State,
    StateUnreadable,
    state_from_status,
)
from takoform_operator.kube.crs import (
    InvalidCustomResource,
    desired_for_deletion,
    desired_from_cr,
    merged_status,
    status_diff,
    status_patch,
)
from takoform_operator.kube.freshness import resource_version
from takoform_operator.service import Tenancy, reconcile
from takoform_spec.identity import FormLine


@dataclass(frozen=True)
class CrOutcome:
    outcome: Outcome
    #: The merge-patch for the status subresource; None when there is nothing to write (the
    #: status already says all of it, or the CR may go: outcome.finalized).
    status: dict[str, Any] | None
    #: The connection Secret the sensitive outputs of this reconcile's read go to (None: none
    #: to write: no sensitive output, or no read of the bound incarnation; core.connection).
    connection: ConnectionSecret | None = None


#: Writes a status merge-patch of a CR body; returns the CR as the API server answered the write
#: (its new resourceVersion, and anything else that landed before it). Raises when the write did
#: not land (the handlers' StatusWriteFailed).
WriteStatus = Callable[[Mapping[str, Any], dict[str, Any]], Awaitable[Mapping[str, Any]]]


#: Writes a CR's connection Secret; returns None when it landed (or failed in a way the next
#: look retries), else the message and remedies of a Secret out of the operator's reach.
WriteConnection = Callable[
    [Mapping[str, Any], ConnectionSecret], Awaitable[tuple[str, tuple[Remedy, ...]] | None]
]


@dataclass(frozen=True)
class HeldStatus:
    """A status write held until the next look (core.outcome.Outcome.replayable): the patch,
    the resourceVersion of the CR it was made for, and the operation it records. Memory only:
    a process that dies with it loses a write the next look recovers (a create from the host's
    operations, read first; any mutation by replaying its key)."""

    resource_version: str
    patch: dict[str, Any]
    #: The pending operation the patch records: never held a second time in a row.
    operation_id: str

    def applies_to(self, body: Mapping[str, Any]) -> bool:
        """Made for exactly this body: nobody wrote the CR since."""
        return self.resource_version == resource_version(body)


@dataclass(frozen=True)
class Persisted:
    result: CrOutcome
    #: The CR body as written: the API server's answer to the status write (the body as read
    #: when there was nothing to write).
    body: Mapping[str, Any]
    #: What the write was to make of the body as read: the status patch merged in and the new
    #: resourceVersion. Where the answer differs (someone else's edit landed before the write),
    #: the answer is the truth and the difference is news (kube.loops.ReconcileLoops.wrote).
    expected: Mapping[str, Any] | None = None
    #: The status write this look held instead of writing (pass it to the CR's next look,
    #: whatever writes the CR meanwhile: that look decides whether it still applies).
    held: HeldStatus | None = None


async def reconcile_and_persist(
    body: Mapping[str, Any],
    registry: Registry,
    tenancy: Tenancy,
    bindings: BindingPort,
    write_status: WriteStatus,
    *,
    now: str,
    deleting: bool = False,
    secrets: Collection[str] = (),
    write_connection: WriteConnection | None = None,
    held: HeldStatus | None = None,
) -> Persisted:
    """One reconcile of the CR `body`, its connection Secret, then the write of the status it
    asks for. The handlers run it against the API server, the model checker (no Secrets)
    against its simulated cluster.

    An outcome that only records an operation just accepted (`replayable`) is not written but
    returned as `held`; the next look of the CR reconciles as if it had been written and
    writes it together with its own news: a create whose operation settled by then costs one
    status write, not two. Two rules bound it:

    - a held status applies only to the body it was made for (same resourceVersion): after
      any other write it is dropped, and the next look finds the operation again (the key
      replays it; a create's is read from the host's operations first, core.plan);
    - it is held at most once per operation: a look whose outcome records the operation the
      previous look held (`held`, applicable or not: a replay of the same key) writes at once,
      so the pending operation is in the status within one look whatever else writes the CR.
    """
    persisted = body.get("status") or {}
    view = body
    if held is not None and held.applies_to(body):
        view = {**body, "status": merged_status(persisted, held.patch)}
    result = await reconcile_cr_body(
        view, registry, tenancy, bindings, now=now, deleting=deleting, secrets=secrets
    )
    if result.outcome.finalized:
        return Persisted(result, body)  # the CR may go: nothing to write, a held status neither
    if view is not body:
        # What the API server holds lacks the held write: the patch is from that status.
        final = merged_status(view["status"], result.status or {})
        result = replace(result, status=status_diff(persisted, final) or None)
    elif result.status is not None and result.outcome.replayable:
        pending = result.outcome.state.pending
        assert pending is not None, "a replayable outcome records the operation accepted"
        if held is None or held.operation_id != pending.operation_id:
            return Persisted(
                replace(result, status=None),
                body,
                held=HeldStatus(resource_version(body), result.status, pending.operation_id),
            )
        # Held once already, dropped by another write: written now.
    if result.connection is not None and write_connection is not None:
        # Before the status: a Secret out of reach is the CR's condition (nothing pending here:
        # a connection Secret follows only a read of the settled resource).
        refusal = await write_connection(body, result.connection)
        if refusal is not None:
            result = connection_secret_forbidden(body, result, *refusal, now=now)
    if result.status is None:
        return Persisted(result, body)
    answer = await write_status(body, result.status)
    version = (answer.get("metadata") or {}).get("resourceVersion")
    expected = {
        **body,
        "metadata": {**body["metadata"], "resourceVersion": version},
        "status": merged_status(body.get("status"), result.status),
    }
    return Persisted(result, answer, expected)


async def reconcile_cr_body(
    body: Mapping[str, Any],
    registry: Registry,
    tenancy: Tenancy,
    bindings: BindingPort,
    *,
    now: str,
    deleting: bool = False,
    secrets: Collection[str] = (),
) -> CrOutcome:
    """Reconcile the CR `body` once (service.reconcile) and say what to write. `bindings` are
    the TakoformBindings (binding_port: who owns which host resource). `deleting` forces
    deletion even before the body says so. `secrets`: the values last written into the CR's
    connection Secret, scrubbed from host words with the sensitive outputs read now."""
    metadata = body.get("metadata") or {}
    status = dict(body.get("status") or {})
    generation = int(metadata.get("generation") or 0)
    deleting = deleting or metadata.get("deletionTimestamp") is not None
    try:
        state = state_from_status(status)
        # What state_from_status lets through: a field of a type the operator never writes, a
        # target without its space or name.
        requested = state.requested or Requested("", "")
        texts = {
            "host": state.host,
            "space": state.space,
            "name": state.name,
            "uid": state.uid,
            "generation": state.generation,
            "revision": state.revision,
            "packageDigest": state.package_digest,
            "requested.importId": requested.import_id,
            "requested.hostRef": requested.host_ref,
        }
        wrong = [
            f"{key} is not a string" for key, v in texts.items() if not isinstance(v, str | None)
        ]
        wrong += [
            f"formRef without {key}"
            for key in ("space", "name")
            if state.claimed and texts[key] is None
        ]
        if wrong:
            raise StateUnreadable(f"status does not hold a readable state: {', '.join(wrong)}")
    except (StateUnreadable, AttributeError, TypeError, ValueError) as exc:
        # (state_from_status lets a few malformed shapes out as the error they are.) Never
        # guessed from: it may record a resource, which a deletion must not forget.
        try:
            wanted = replace(desired_from_cr(body), deleting=True) if deleting else None
        except InvalidCustomResource:
            wanted = None
        if wanted is not None and releases_without_host_call(wanted):
            # Orphan (or Observe) leaves the host resource whatever was recorded: the CR goes
            # without a host call, the binding it holds Released with the uid it kept.
            held = bindings.held_by(wanted.cr_uid)
            released = let_go(wanted, State(), held) if held is not None else None
            if released is not None:
                await bindings.replace(released)
            return CrOutcome(Outcome(State(), (), NextLook.NEVER, finalized=True), None)
        unreadable = str(exc)
        if not isinstance(exc, StateUnreadable):
            unreadable = f"status does not hold a readable state: {exc}"
        line = FormLine(str(body.get("apiVersion", "")), str(body.get("kind", "")))
        obj = kubectl_name(line, str(metadata.get("name")), str(metadata.get("namespace") or ""))
        outcome = blocked(
            State(),
            Reason.STATE_UNREADABLE,
            f"{unreadable}; nothing is sent to the host until it reads again.",
            unreadable_status_remedies(obj, deleting=deleting),
        )
        if wanted is not None:
            outcome = with_deleting(outcome, wanted)
        # Only what is written beside the state: the fields as found are what a restore needs.
        patch = status_patch(outcome, status, now=now, cr_generation=generation)
        beside = {k: patch[k] for k in ("conditions", "observedGeneration", "remedies")}
        return CrOutcome(outcome, None if merged_status(status, beside) == status else beside)
    # A status write lost after the binding: the claim (and its identity fields) are in it.
    state = restored(state, bindings.held_by(str(metadata.get("uid"))))
    # Values nested too deep were cut where the object was decoded (core.depth): such a spec
    # is not read, as if it did not parse; a deletion still goes by what was recorded.
    too_deep = pruned_paths(body.get("spec"), "spec")
    try:
        if too_deep:
            raise InvalidCustomResource(too_deep_message(too_deep))
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
            reason = Reason.NESTED_TOO_DEEP if too_deep else Reason.INVALID_SPEC
            outcome = degraded(state, reason, str(exc), NextLook.POLL)
            return CrOutcome(outcome, _patch(outcome, status, now, generation))
    if deleting and not desired.deleting:
        desired = replace(desired, deleting=True)
    reconciled = await reconcile(desired, state, registry, tenancy, bindings, secrets=secrets)
    outcome = reconciled.outcome
    if outcome.finalized:
        return CrOutcome(outcome, None)
    secret = None if deleting else _connection(body, outcome, reconciled.resource, registry)
    return CrOutcome(outcome, _patch(outcome, status, now, generation), secret)


def connection_secret_forbidden(
    body: Mapping[str, Any],
    result: CrOutcome,
    message: str,
    remedies: tuple[Remedy, ...],
    *,
    now: str,
) -> CrOutcome:
    """`result` once its connection Secret turned out to be out of the operator's reach (its
    Secret rights are not bound in the CR's namespace): Degraded ConnectionSecretForbidden with
    the remedy, the state kept, looked at again on the ready poll. The same every look until
    the rights are bound, so it writes nothing more and posts no further Event."""
    outcome = degraded(
        result.outcome.state,
        Reason.CONNECTION_SECRET_FORBIDDEN,
        message,
        NextLook.POLL,
        remedies,
    )
    status = dict(body.get("status") or {})
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    return CrOutcome(outcome, _patch(outcome, status, now, generation))


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


def _patch(
    outcome: Outcome, status: Mapping[str, Any], now: str, generation: int
) -> dict[str, Any] | None:
    """The status patch, or None when it would change nothing: a steady resource costs no write."""
    patch = status_patch(outcome, status, now=now, cr_generation=generation)
    return None if merged_status(status, patch) == dict(status) else patch
