"""kopf handlers: registration-thin. Each one reads the CR, runs one reconcile, writes status.

The status write happens right after the reconcile, before kopf is told anything: a pending
operation accepted by the host is recorded as soon as possible, and if the process dies first the
next reconcile replays the same idempotency key (docs/crash-safety.md).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import kopf

from takoform_operator.core.conditions import ConditionType, Reason, transitions
from takoform_operator.core.reconcile import Outcome, degraded
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import State, StateUnreadable, state_from_status
from takoform_operator.host_port import HostPort
from takoform_operator.kube.crs import InvalidCustomResource, desired_from_cr, status_patch
from takoform_operator.kube.status import StatusWriter
from takoform_operator.metrics import Metrics
from takoform_operator.service import reconcile_once
from takoform_operator.settings import Settings
from takoform_spec.identity import plural_of

FINALIZER = "takoform.io/finalizer"
logger = logging.getLogger("takoform_operator")


@dataclass
class Runtime:
    """What every handler shares: the composition root fills it at start-up."""

    registry: Registry
    settings: Settings
    host: HostPort
    status: StatusWriter
    metrics: Metrics
    clock: Callable[[], datetime.datetime] = field(
        default=lambda: datetime.datetime.now(datetime.UTC)
    )
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)


def _now(runtime: Runtime) -> str:
    return runtime.clock().strftime("%Y-%m-%dT%H:%M:%SZ")


async def reconcile_cr(runtime: Runtime, body: kopf.Body, *, deleting: bool = False) -> Outcome:
    """One reconcile of one CR, its status write, its events and metrics. Serialised per CR."""
    uid = str(body.metadata.uid)
    lock = runtime.locks.setdefault(uid, asyncio.Lock())
    async with lock:
        return await _reconcile_locked(runtime, body, deleting)


async def _reconcile_locked(runtime: Runtime, body: kopf.Body, deleting: bool) -> Outcome:
    raw = dict(body)
    status = dict(raw.get("status") or {})
    try:
        state = state_from_status(status)
    except StateUnreadable as exc:
        outcome = degraded(State(), Reason.STATE_UNREADABLE, str(exc), None)
        await _persist(runtime, body, outcome, status, write_state=False)
        return outcome
    try:
        desired = desired_from_cr(raw)
    except InvalidCustomResource as exc:
        outcome = degraded(state, Reason.INVALID_SPEC, str(exc), None)
        await _persist(runtime, body, outcome, status)
        return outcome
    if deleting and not desired.deleting:
        desired = replace(desired, deleting=True)
    started = runtime.clock()
    outcome = await reconcile_once(desired, state, runtime.host, runtime.registry)
    runtime.metrics.reconciled(body, outcome, (runtime.clock() - started).total_seconds())
    if not outcome.finalized:
        await _persist(runtime, body, outcome, status)
    for event in outcome.events:
        if event.type == "Normal":  # warnings are posted once, as condition transitions
            kopf.event(body, type=event.type, reason=str(event.reason), message=event.message)
    return outcome


_WARNING_CONDITIONS = {"Blocked", "Degraded", "Drifted"}


def _post_transitions(
    body: kopf.Body, before: list[dict[str, Any]] | None, after: list[dict[str, Any]]
) -> None:
    """One Event per condition that changed: a Warning when trouble starts, Normal otherwise."""
    for condition in transitions(before, after):
        kind, true = condition["type"], condition["status"] == "True"
        if kind == "Ready" and not true:
            continue  # the condition that made it not Ready says why
        if true:
            level = "Warning" if kind in _WARNING_CONDITIONS else "Normal"
            message = condition["message"]
        else:
            level, message = "Normal", f"{kind} cleared"
        kopf.event(body, type=level, reason=str(condition["reason"]), message=message)


async def _persist(
    runtime: Runtime,
    body: kopf.Body,
    outcome: Outcome,
    status: dict[str, Any],
    *,
    write_state: bool = True,
) -> None:
    generation = int(body.metadata.get("generation") or 0)
    patch = status_patch(
        outcome, status.get("conditions"), now=_now(runtime), cr_generation=generation
    )
    if not write_state:
        patch = {"conditions": patch["conditions"], "observedGeneration": generation}
    _post_transitions(body, status.get("conditions"), patch["conditions"])
    group, version = str(body["apiVersion"]).split("/", 1)
    await runtime.status.write(
        group,
        version,
        plural_of(str(body["kind"])),
        str(body.metadata.namespace),
        str(body.metadata.name),
        patch,
    )


def _requeue(outcome: Outcome, runtime: Runtime) -> None:
    """Tell kopf when to look again: soon while something is pending, else leave it to the
    timer. A Ready, Blocked or permanently failed resource returns normally."""
    delay = outcome.requeue_after
    if delay is None or delay >= runtime.settings.poll_ready_seconds:
        return
    if ConditionType.BLOCKED in outcome.asserted():
        return
    raise kopf.TemporaryError(_summary(outcome), delay=max(delay, 0.5))


def _summary(outcome: Outcome) -> str:
    true = [f"{kind}:{reason}" for kind, reason in outcome.asserted().items()]
    return ", ".join(true) or "reconciling"


def register(runtime: Runtime, kopf_registry: kopf.OperatorRegistry) -> None:
    """One set of handlers per Form line of the build's registry."""
    for line in runtime.registry.lines():
        group, version, plural = line.group, line.version, line.plural

        async def changed(body: kopf.Body, **_: Any) -> None:
            _requeue(await reconcile_cr(runtime, body), runtime)

        async def observe(body: kopf.Body, **_: Any) -> None:
            # The host cannot be watched: re-observe for drift, uid changes, remedies applied.
            if body.metadata.get("deletionTimestamp") is None:
                await reconcile_cr(runtime, body)

        async def deleted(body: kopf.Body, **_: Any) -> None:
            outcome = await reconcile_cr(runtime, body, deleting=True)
            if outcome.finalized:
                runtime.metrics.forget(body)
                runtime.locks.pop(str(body.metadata.uid), None)
                return
            delay = outcome.requeue_after if outcome.requeue_after is not None else 30.0
            raise kopf.TemporaryError(_summary(outcome), delay=max(delay, 0.5))

        for on in (kopf.on.resume, kopf.on.create, kopf.on.update):
            on(group, version, plural, id="reconcile", registry=kopf_registry)(changed)
        kopf.timer(
            group,
            version,
            plural,
            id="observe",
            interval=runtime.settings.poll_ready_seconds,
            initial_delay=runtime.settings.poll_ready_seconds,
            registry=kopf_registry,
        )(observe)
        kopf.on.delete(group, version, plural, id="delete", registry=kopf_registry)(deleted)
