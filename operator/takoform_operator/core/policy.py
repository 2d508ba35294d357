"""What a CR allows the reconcile to send: the pause annotation and spec.managementPolicy.

Pure, like the rest of the core. Two steps frame the reconcile of core.plan and core.decide:

    hold()          before anything is planned: a deletion that needs no host call is let go
                    (deletionPolicy Orphan, managementPolicy Observe, nothing ever sent); a
                    paused CR, or one whose pause is unclear, sends nothing at all, not even a
                    read. unparsed() is the same rule for a CR whose spec does not parse.
    observe_only()  after decide(): under managementPolicy Observe a mutation is never sent;
                    what it would have repaired is reported instead

Neither changes what the core decides about identity, ownership or the rule 6/7 tables: Observe
reads the exact recorded identity exactly as Full does and only withholds the mutation.
"""

from __future__ import annotations

from dataclasses import replace

from .actions import Create, Delete, Update
from .conditions import Condition, ConditionType, Reason
from .decide import Decision, Observation
from .errors import CodecError
from .outcome import NextLook, Outcome, degraded, not_ready
from .registry import Registry
from .remedies import Remedy, kubectl_object, patch_command
from .state import DeletionPolicy, Desired, ManagementPolicy, State

#: The annotation that pauses a CR, and the only value that does.
PAUSED_ANNOTATION = "takoform.io/paused"
PAUSED_VALUE = "true"


def releases_without_host_call(desired: Desired) -> bool:
    """A deletion that leaves the host resource alone: Orphan, or an Observe CR (it never
    mutates, and deleting the CR is no exception). A CR that never claimed a target is let go
    too (hold): every request is preceded by the write that records its target."""
    return (
        desired.deletion_policy is DeletionPolicy.ORPHAN
        or desired.management is ManagementPolicy.OBSERVE
    )


def hold(desired: Desired, state: State) -> Outcome | None:
    """The outcome of a CR that must send nothing this time, or None to go on and plan. The one
    place a deletion is let go without a host call (a paused CR's too, and Orphan over an
    unclear pause: nothing is sent either way); it needs no grant either, so this comes before
    the tenancy check."""
    if desired.deleting and (releases_without_host_call(desired) or _never_sent(state)):
        return may_go(state)
    if desired.unclear_pause is not None:
        return degraded(state, Reason.INVALID_SPEC, desired.unclear_pause, NextLook.POLL)
    if desired.paused:
        return paused(desired, state)
    return None


def unparsed(state: State, reason: Reason, message: str, *, deleting: bool) -> Outcome:
    """A CR whose spec does not parse (and whose recorded target cannot stand in for it): it
    sends nothing. A deletion that never sent anything is let go; any other waits, Degraded,
    for a spec that parses."""
    if deleting and _never_sent(state):
        return may_go(state)
    return degraded(state, reason, message, NextLook.POLL)


def may_go(state: State) -> Outcome:
    """The CR may go: nothing more to send, or nothing ever sent."""
    return Outcome(state=state, conditions=(), next_look=NextLook.NEVER, finalized=True)


def _never_sent(state: State) -> bool:
    """Every request is preceded by the write that records its target."""
    return not state.claimed and state.pending is None


def paused(desired: Desired, state: State) -> Outcome:
    """Reconciling False, reason Paused; every other condition keeps its last value (nothing
    was observed, so nothing new can be said about the host). Looked at on the ready poll;
    removing the annotation wakes the CR at once (kube.loops watches it)."""
    message = (
        f'paused by the annotation {PAUSED_ANNOTATION}: "{PAUSED_VALUE}": nothing is sent to the '
        "host, not even a read; remove the annotation to resume"
    )
    conditions = [Condition(ConditionType.RECONCILING, False, Reason.PAUSED, message)]
    if desired.deleting:
        waiting = (
            "the deletion waits while the CR is paused (deletionPolicy Orphan lets it go "
            "without a host call)"
        )
        conditions.append(Condition(ConditionType.DELETING, True, Reason.PAUSED, waiting))
    return Outcome(
        state=state, conditions=tuple(conditions), next_look=NextLook.POLL, holds_conditions=True
    )


def observe_only(
    desired: Desired, decision: Decision, seen: Observation, registry: Registry
) -> Decision:
    """Under managementPolicy Observe: the decision without its mutation, and what the
    mutation would have done reported instead. Under Full: the decision as it is."""
    if desired.management is not ManagementPolicy.OBSERVE:
        return decision
    outcome = decision.outcome
    action = decision.action
    if isinstance(action, Update):
        return Decision(_spec_drift(outcome, action, seen, registry))
    if isinstance(action, Create) or _repairs_a_deletion(outcome):
        return Decision(_missing(desired, outcome))
    # hold() lets an Observe deletion go before anything is planned: no Delete is decided.
    assert not isinstance(action, Delete), "an Observe deletion is let go by hold()"
    return decision


def _spec_drift(outcome: Outcome, action: Update, seen: Observation, registry: Registry) -> Outcome:
    changed = _changed_fields(action, seen, registry)
    message = (
        f"the host spec differs from spec.parameters in {', '.join(changed) or 'some fields'} "
        f"under {action.target.form_ref.definition_version}; not repaired: "
        "spec.managementPolicy is Observe (switch it to Full to update the host)"
    )
    reported = not_ready(
        outcome.state, ConditionType.DRIFTED, Reason.SPEC_DRIFT, message, NextLook.POLL
    )
    return _carry_events(reported, outcome)


def _changed_fields(action: Update, seen: Observation, registry: Registry) -> list[str]:
    resource = seen.resource
    if resource is None:
        return []
    codec = registry.codec_for(resource.form_ref)
    try:
        current = codec.normalize(resource.form_ref, codec.decode(resource.form_ref, resource.spec))
    except CodecError:
        return []
    wanted = action.spec
    return sorted(k for k in set(wanted) | set(current) if wanted.get(k) != current.get(k))


def _repairs_a_deletion(outcome: Outcome) -> bool:
    """The core concluded the bound resource is gone and will be created again."""
    return outcome.asserted().get(ConditionType.DRIFTED) is Reason.RESOURCE_DELETED


def _missing(desired: Desired, outcome: Outcome) -> Outcome:
    state = outcome.state
    where = f"{state.name or desired.name} in space {state.space or desired.space}" + (
        f" under {state.form_ref}" if state.form_ref is not None else ""
    )
    message = (
        f"the observed host resource {where} does not exist; spec.managementPolicy is Observe, "
        "so it is not created."
    )
    obj = kubectl_object(desired)
    remedies = (
        Remedy("create it on the host"),
        Remedy(
            "or switch spec.managementPolicy to Full to let the operator create it",
            patch_command(obj, {"managementPolicy": "Full"}),
            obj,
        ),
    )
    reported = degraded(state, Reason.OBSERVED_RESOURCE_MISSING, message, NextLook.POLL, remedies)
    return _carry_events(reported, outcome)


def _carry_events(reported: Outcome, decided: Outcome) -> Outcome:
    """Keep the Normal events of what was concluded (an import, an accepted rebind)."""
    kept = tuple(e for e in decided.events if e.type == "Normal")
    return replace(reported, events=(*kept, *reported.events))
