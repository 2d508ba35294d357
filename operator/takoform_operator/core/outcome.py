"""What one reconcile concludes (Outcome, Event), and the builders of its conditions."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum

from .conditions import Condition, ConditionType, Reason
from .import_id import canonical_import_id
from .remedies import Remedy, kubectl_object, remedies_text
from .state import Desired, ResourceView, State


class NextLook(Enum):
    """When the CR is looked at again: what comes next, never how many seconds. The adapter
    turns it into seconds from the settings in one place (core.backoff.next_delay)."""

    #: At once: something changed that the next look acts on (a recorded claim, an import).
    NOW = "now"
    #: An operation (or a host resource not ready yet) is in flight: fast first, then slower.
    PENDING = "pending"
    #: Settled (Ready, Blocked, a spec that needs a user): re-observed on the ready poll.
    POLL = "poll"
    #: The look failed: the CR's exponential back-off, honouring the host's Retry-After.
    BACKOFF = "backoff"
    #: Put off by the operator's own pacing (a namespace's share of a host's budget spent):
    #: nothing was sent or observed; backs off as BACKOFF does, no sooner than the next token.
    LATER = "later"
    #: Finished (finalized): no further look.
    NEVER = "never"


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
    next_look: NextLook
    events: tuple[Event, ...] = ()
    #: Deletion is complete (or orphaned): the adapter may let the CR go.
    finalized: bool = False
    #: Nothing was observed (a paused CR, core.policy): conditions not named here keep their
    #: last value, and the status does not claim to reflect the current generation.
    holds_conditions: bool = False
    #: The ways out of the condition this outcome sets, as data (core.remedies.Remedy); its
    #: message states them too.
    remedies: tuple[Remedy, ...] = ()
    #: Seconds the host asked to wait (Retry-After), honoured by the back-off up to its cap.
    retry_after: float | None = None
    #: The host could not be asked: conditions this outcome does not set keep their last known
    #: value (an outage does not make a Ready resource not Ready), and the status does not claim
    #: the current generation (a lost Update is not an applied one).
    keeps_last_known: bool = False
    #: All this outcome has to record is an operation the host just accepted, running, under
    #: our idempotency key as the host's own record of it says: a status lost with it costs a
    #: replay of that key, which returns the same operation. Its write may wait for the next
    #: look, which writes it with whatever that look found (docs/crash-safety.md).
    replayable: bool = False
    #: Blocked AlreadyManaged: the name of the TakoformBinding whose holder keeps this CR off
    #: (held by another CR, or to be written again by one). A change of it, and only of it,
    #: wakes this CR.
    contends_for: str | None = None

    def asserted(self) -> dict[ConditionType, Reason]:
        """The reason of every condition this outcome sets True, by type."""
        return {c.type: c.reason for c in self.conditions if c.status}


def _cond(kind: ConditionType, status: bool, reason: Reason, message: str = "") -> Condition:
    return Condition(kind, status, reason, message)


def not_ready(
    state: State,
    kind: ConditionType,
    reason: Reason,
    message: str,
    next_look: NextLook,
    *,
    warn: bool = True,
    remedies: Sequence[Remedy] = (),
) -> Outcome:
    """The one shape of every not-Ready outcome: `kind` True, Ready False, same reason; the
    message ends with the remedies, which the outcome also carries as data. Blocked comes with
    Stalled, kstatus's name for it."""
    if remedies:
        message = f"{message} {remedies_text(remedies)}"
    stalled = (ConditionType.STALLED,) if kind is ConditionType.BLOCKED else ()
    return Outcome(
        state=state,
        conditions=(
            *(_cond(each, True, reason, message) for each in (kind, *stalled)),
            _cond(ConditionType.READY, False, reason, message),
        ),
        next_look=next_look,
        events=(Event("Warning", reason, message),) if warn else (),
        remedies=tuple(remedies),
    )


def blocked(state: State, reason: Reason, message: str, remedies: Sequence[Remedy] = ()) -> Outcome:
    """Blocked until a user acts: re-observed on the ready poll (and at once on a CR change)."""
    return not_ready(
        state, ConditionType.BLOCKED, reason, message, NextLook.POLL, remedies=remedies
    )


def waiting(
    state: State, reason: Reason, message: str, next_look: NextLook = NextLook.PENDING
) -> Outcome:
    return not_ready(state, ConditionType.RECONCILING, reason, message, next_look, warn=False)


def degraded(
    state: State,
    reason: Reason,
    message: str,
    next_look: NextLook,
    remedies: Sequence[Remedy] = (),
) -> Outcome:
    return not_ready(state, ConditionType.DEGRADED, reason, message, next_look, remedies=remedies)


def unavailable(state: State, message: str, retry_after: float | None) -> Outcome:
    """The host could not be asked (connection refused, timeout, 5xx): Degraded HostUnavailable,
    every other condition as last known, retried with back-off (honouring Retry-After)."""
    return Outcome(
        state=state,
        conditions=(_cond(ConditionType.DEGRADED, True, Reason.HOST_UNAVAILABLE, message),),
        next_look=NextLook.BACKOFF,
        events=(Event("Warning", Reason.HOST_UNAVAILABLE, message),),
        retry_after=retry_after,
        keeps_last_known=True,
    )


def put_off(state: State, wait: float | None) -> Outcome:
    """The namespace's share of the host's budget is spent and nothing was sent: nothing is
    observed, written or told (no Degraded, no Event: the operator pacing itself is no host
    outage); the CR backs off as after a failure, no sooner than `wait` seconds."""
    return Outcome(
        state=state, conditions=(), next_look=NextLook.LATER, holds_conditions=True,
        retry_after=wait,
    )  # fmt: skip


def finalized(state: State, message: str) -> Outcome:
    return Outcome(
        state=state,
        conditions=(),
        next_look=NextLook.NEVER,
        events=(Event("Normal", Reason.DELETING, message),),
        finalized=True,
    )


def with_deleting(outcome: Outcome, desired: Desired) -> Outcome:
    if not desired.deleting or outcome.finalized:
        return outcome
    marker = _cond(ConditionType.DELETING, True, Reason.DELETING, "deletion in progress")
    return replace(outcome, conditions=(*outcome.conditions, marker))


def refused(
    desired: Desired,
    state: State,
    reason: Reason,
    message: str,
    remedies: Sequence[Remedy] = (),
) -> Outcome:
    """Blocked before anything is sent (tenancy: no grant, unknown host); state kept, looked
    at again on the ready poll and whenever the policy changes."""
    return with_deleting(blocked(state, reason, message, remedies), desired)


def uid_mismatch(desired: Desired, state: State, expected: str, current: str) -> Outcome:
    annotation = shlex.quote(f"takoform.io/accept-uid={current}")
    obj = kubectl_object(desired)
    message = (
        f"uid mismatch: state is bound to uid {expected} but the host serves uid {current} "
        f"under the same name; nothing is mutated while blocked."
    )
    remedies = (
        Remedy(
            "import the new incarnation explicitly",
            f"kubectl annotate {obj} {annotation} --overwrite",
            obj,
        ),
        Remedy(f"restore the prior incarnation {expected} on the host"),
        Remedy(
            f"delete the host-side replacement {current} (the operator then re-creates the "
            "resource)"
        ),
    )
    return blocked(state, Reason.UID_MISMATCH, message, remedies)


def not_ours(desired: Desired, state: State, resource: ResourceView) -> Outcome:
    import_id = canonical_import_id(resource.space, resource.name, resource.form_ref)
    if resource.creation_key is None:
        reason = Reason.OWNERSHIP_UNPROVABLE
        why = "the host records no creation key, so it cannot be proven to be ours"
    else:
        reason = Reason.NAME_TAKEN
        why = "it was created by someone else"
    message = (
        f"a resource named {resource.name} (uid {resource.uid}) already exists and {why}; "
        f"it is never adopted by name alone."
    )
    return blocked(state, reason, message, import_remedies(desired, import_id))


def import_remedies(desired: Desired, import_id: str | None) -> tuple[Remedy, ...]:
    """Import is chosen when the CR is made: its identity is fixed once a target is recorded
    (metadata.name always), so either remedy starts with this CR deleted (nothing of ours is on
    the host: the deletion sends nothing but reads), made again with spec.importId or under
    another name."""
    obj = kubectl_object(desired)
    import_id_text = (
        shlex.quote(import_id) if import_id else "the resource's canonical JSON import id"
    )
    return (
        Remedy(
            "import it explicitly: delete this CR, then apply it again with spec.importId set "
            f"to {import_id_text}",
            f"kubectl delete {obj}",
            obj,
        ),
        Remedy(
            "or use another name: delete this CR, then create one with another metadata.name "
            "(or spec.resourceName)",
            f"kubectl delete {obj}",
            obj,
        ),
    )
