"""Which Events a look posts about its CR (kube.cr_step), and the one place they go out.

A human acts on transitions, not on repeats: a Warning when trouble starts, a Normal Event when
it clears or a pause starts or ends, and the core's Normal events but those that only say an
operation was accepted (the status says it too, and one Event per CR per step would be most of
the operator's API writes). Events are signed as this operator's (kube.cr_api).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.conditions import transitions as changed
from takoform_operator.core.limits import event_message
from takoform_operator.core.outcome import Event, Outcome
from takoform_operator.kube.kopf_alone import kopf

_WARNING_CONDITIONS = {"Blocked", "Degraded", "Drifted"}
_QUIET_REASONS = {"CreatePending", "UpdatePending", "DeletePending"}


def to_post(
    outcome: Outcome, body: Mapping[str, Any], patch: Mapping[str, Any] | None
) -> list[Event]:
    """The Events of one look: the transitions its status write `patch` over `body` makes
    (None: nothing written), and the core's events worth an Event, each posted once. A Warning
    that states a condition this outcome sets is posted as that condition's transition, so a
    repeated outcome -- every reconcile of a host outage -- posts nothing again. Any other
    Warning goes with the status write that records what it reports: an outcome that changes
    nothing writes nothing and posts nothing."""
    wrote = patch is not None
    stated = {(str(c.reason), c.message) for c in outcome.conditions if c.status}
    chosen = transitions(body, patch) if patch is not None else []
    for event in outcome.events:
        if event.type == "Normal":
            if event.reason not in _QUIET_REASONS:
                chosen.append(event)
        elif wrote and (str(event.reason), event.message) not in stated:
            chosen.append(event)
    return chosen


def transitions(body: Mapping[str, Any], patch: Mapping[str, Any]) -> list[Event]:
    """The Events of the condition transitions a status write of `patch` over `body` makes.
    Becoming Ready is in the status and needs no Event."""
    if "conditions" not in patch:
        return []
    before = (body.get("status") or {}).get("conditions")
    after = patch["conditions"]
    found = []
    was_paused, now_paused = _pause_of(before), _pause_of(after)
    if now_paused is not None and was_paused is None:
        found.append(Event("Normal", Reason.PAUSED, now_paused))
    elif was_paused is not None and now_paused is None:
        found.append(Event("Normal", Reason.RESUMED, "reconciliation resumed: the pause is over"))
    for condition in changed(before, after):
        kind, true = condition["type"], condition["status"] == "True"
        if kind in _WARNING_CONDITIONS:
            # Not Reason(...): a condition kept from a hand-edited status may name any reason.
            reason = cast(Reason, str(condition["reason"]))
            if true:
                found.append(Event("Warning", reason, condition["message"]))
            else:
                found.append(Event("Normal", reason, f"{kind} cleared"))
    return found


def _pause_of(conditions: list[dict[str, Any]] | None) -> str | None:
    """The message of the condition reporting a pause (core.policy), or None."""
    for condition in conditions if isinstance(conditions, list) else ():
        # A status edited by hand may hold anything: what is not a condition reports nothing.
        if (
            isinstance(condition, Mapping)
            and condition.get("type") == ConditionType.RECONCILING
            and (condition.get("reason") == Reason.PAUSED)
        ):
            return str(condition.get("message") or "")
    return None


def post(body: Mapping[str, Any], event: Event) -> None:
    """Every Event of a Form CR goes out here, its message cut to the Event cap (saying so)."""
    raw = cast(kopf.RawBody, dict(body))
    message = event_message(event.message)
    kopf.event(kopf.Body(raw), type=event.type, reason=str(event.reason), message=message)
