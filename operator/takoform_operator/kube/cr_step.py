"""The life of one CR in this process: `CrSteps.look`, one look from the body the watch holds
to the status written, and `leave`, the one way out of this process's memory of it.

    finalizer   on before anything is sent (a deletion can never miss a create of ours)
    read        kube.crs.read_cr: desired and state, or the outcome of a CR that cannot be read
    reconcile   service.reconcile: hold, grant, owner, plan, read, decide, act, let go
    persist     the connection Secret, then the status patch: written, or held for one look
    events      kube.events: which of the outcome's events, and which transitions, are posted
    end         finalized: the Secret and the finalizer let go, the memory left; else the
                delay until the next look (core.backoff.next_delay)

The kopf handlers run it against the API server (kube.cr_api.ApiCr), the model checker
(tests/model) against its simulated cluster. Plain async code: no kopf here.

The held write. An outcome that only records an operation just accepted (`replayable`) is not
written but held in memory; the next look reconciles as if it had been written and writes it
with its own news, so a create whose operation settled by then costs one status write, not two.
Two rules bound it: a held write applies only to the body it was made for (same
resourceVersion), and it is held at most once per operation, so the pending operation is in the
status within one look whatever else writes the CR. A process that dies with it loses a write
the next look recovers (a create from the host's operations, read first; any mutation by
replaying its key): docs/crash-safety.md, "The pending write, held for one look".
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from takoform_operator.binding_port import BindingPort
from takoform_operator.core.backoff import failed, next_delay
from takoform_operator.core.conditions import Reason
from takoform_operator.core.connection import ConnectionSecret, connection_secret, secret_name
from takoform_operator.core.outcome import Event, NextLook, Outcome, degraded
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import Remedy
from takoform_operator.kube import events
from takoform_operator.kube.bindings import Contenders
from takoform_operator.kube.cr_locks import CrLocks
from takoform_operator.kube.crs import read_cr, status_change
from takoform_operator.kube.freshness import resource_version
from takoform_operator.kube.loops import pack, unpack
from takoform_operator.service import Reconciled, Tenancy, reconcile
from takoform_operator.settings import Settings

FINALIZER = "takoform.io/finalizer"


class CrApi(Protocol):
    """What a look does to its CR on the API server. Each write returns the CR as the API
    server answered it, and raises (kube.status.StatusWriteFailed) when it did not land."""

    async def write_status(
        self, body: Mapping[str, Any], patch: dict[str, Any]
    ) -> Mapping[str, Any]:
        """Merge-patch the status; `expected` of the answer is the body with the patch merged."""

    async def set_finalizer(self, body: Mapping[str, Any], present: bool) -> Mapping[str, Any]:
        """Put our finalizer on (`present`) or take it off."""

    def post(self, body: Mapping[str, Any], event: Event) -> None:
        """An Event about the CR."""

    async def write_connection(
        self, body: Mapping[str, Any], secret: ConnectionSecret
    ) -> tuple[str, tuple[Remedy, ...]] | None:
        """The CR's connection Secret written (only when it differs). None: written, or failed
        in a way the next look retries; else the message and remedies of a Secret out of the
        operator's reach."""

    async def let_go_of_connection(self, body: Mapping[str, Any]) -> None:
        """Before the finalizer goes: the connection Secret follows the deletion policy."""


@dataclass(frozen=True, slots=True)
class HeldStatus:
    """A status write held until the next look: the patch, the resourceVersion of the CR it
    was made for, and the operation it records. The patch is held packed (kube.loops.pack):
    in a backlog most CRs hold one at once, between their first look and their second, and
    as dicts and strings they were tens of small objects each, whose freed blocks the
    allocator kept after the backlog (docs/performance.md, "The held write packed, and the
    write answers cut")."""

    resource_version: str
    packed: bytes
    #: The pending operation the patch records: never held a second time in a row.
    operation_id: str

    @classmethod
    def of(cls, resource_version: str, patch: dict[str, Any], operation_id: str) -> HeldStatus:
        return cls(resource_version, pack(patch), operation_id)

    @property
    def patch(self) -> dict[str, Any]:
        return dict(unpack(self.packed))

    def applies_to(self, body: Mapping[str, Any]) -> bool:
        """Made for exactly this body: nobody wrote the CR since."""
        return self.resource_version == resource_version(body)


@dataclass(slots=True)
class CrMemory:
    """What this process remembers of one CR between its looks. Memory only: a restart loses
    it, and nothing of it is needed for correctness."""

    #: The status write the last look held.
    held: HeldStatus | None = None
    #: Looks in a row that failed: the back-off's exponent.
    failures: int = 0
    #: Looks in a row that found it waiting on a pending operation.
    pending_looks: int = 0
    #: Looks in a row that changed nothing: the idle poll's exponent.
    steady_looks: int = 0
    #: The values last written into its connection Secret: scrubbed from host words
    #: (core.scrub) even when the look that meets them could not read the resource.
    secrets: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Looked:
    #: None: the CR was released already (no finalizer of ours while deleting).
    outcome: Outcome | None
    #: The CR as the last write of the look answered (the body as read when none was made).
    body: Mapping[str, Any]
    #: Seconds until the next look; None: no further look (the CR may go).
    delay: float | None
    #: The status patch written (None: nothing written).
    wrote: dict[str, Any] | None = None


@dataclass
class CrSteps:
    """The looks of the CRs one process serves, and what it remembers of each."""

    registry: Registry
    tenancy: Tenancy
    bindings: BindingPort
    api: CrApi
    settings: Settings
    #: The status timestamp of a look ("2026-01-01T00:00:00Z").
    now: Callable[[], str]
    #: The jitter of the back-off and of the idle poll, in [0, 1).
    random: Callable[[], float] = field(default=random.random)
    #: Whether the CR changed since its last look (kube.loops.ReconcileLoops.take_change):
    #: a new generation or watched annotation, a write of ours, new to this process. By
    #: default every look counts as a change: the poll stays at poll_ready_seconds.
    changed: Callable[[str], bool] = field(default=lambda uid: True)
    #: Each CR's looks, serialised.
    locks: CrLocks = field(default_factory=CrLocks)
    memory: dict[str, CrMemory] = field(default_factory=dict)
    #: CRs whose last look found their identity bound to another CR, by the binding's name:
    #: woken by a change of that binding only.
    contending: Contenders = field(default_factory=Contenders)

    async def look(self, body: Mapping[str, Any]) -> Looked:
        """One look at the CR `body`. Raises what the API server or the bindings refused
        (kube.status.StatusWriteFailed, binding_port.BindingError): the caller ends the look
        with `next_look(uid, None)`."""
        metadata = body["metadata"]
        uid = sys.intern(str(metadata["uid"]))  # the key its loop holds too (kube.loops)
        deleting = metadata.get("deletionTimestamp") is not None
        if FINALIZER not in (metadata.get("finalizers") or ()):
            if deleting:
                return Looked(None, body, None)  # released already (or never ours to hold)
            body = await self.api.set_finalizer(body, True)
        async with self.locks.held(uid):
            memory = self._memory_of(uid)
            held, memory.held = memory.held, None
            # The held write applies to exactly the body it was made for: nobody wrote it since.
            applied = held.patch if held is not None and held.applies_to(body) else None
            read = read_cr(body, self.bindings.held_by(uid), deleting=deleting, held=applied)
            if isinstance(read, Outcome):
                reconciled = Reconciled(read)
            else:
                reconciled = await reconcile(
                    *read, self.registry, self.tenancy, self.bindings, secrets=memory.secrets
                )
            outcome = reconciled.outcome
            self.contending.hold(uid, outcome.contends_for)
            if outcome.finalized:
                return await self._let_go(body, outcome)
            patch = self._patch(body, applied, outcome)
            if applied is None and patch is not None and _holds(outcome, held):
                assert outcome.state.pending is not None
                pending = outcome.state.pending.operation_id
                memory.held, patch = HeldStatus.of(resource_version(body), patch, pending), None
            elif (secret := self._connection(body, reconciled, deleting)) is not None:
                # Before the status: a Secret out of reach is the CR's condition.
                memory.secrets = frozenset(secret.data.values())
                refusal = await self.api.write_connection(body, secret)
                if refusal is not None:
                    outcome = degraded(
                        outcome.state,
                        Reason.CONNECTION_SECRET_FORBIDDEN,
                        refusal[0],
                        NextLook.POLL,
                        refusal[1],
                    )
                    patch = self._patch(body, None, outcome)
            written = body
            if patch is not None:
                written = await self.api.write_status(body, patch)
            for event in events.to_post(outcome, body, patch):
                self.api.post(written, event)
            return Looked(outcome, written, self.next_look(uid, outcome), patch)

    def leave(self, uid: str) -> HeldStatus | None:
        """The CR is no longer this process's (gone, let go, relabelled, another replica's):
        forget it. Returns the status write its last look held, if any."""
        self.contending.drop(uid)
        memory = self.memory.pop(uid, None)
        return memory.held if memory is not None else None

    def going_on(self, uid: str) -> bool:
        """Whether the CR has work in progress: a status write held, an operation it waits on,
        failures it backs off from. Its looks go before the first looks and polls queued in its
        namespace (kube.loops, kube.slots)."""
        memory = self.memory.get(uid)
        if memory is None:
            return False
        return memory.held is not None or memory.pending_looks > 0 or memory.failures > 0

    def _memory_of(self, uid: str) -> CrMemory:
        # get first: setdefault alone would make a CrMemory at every call.
        return self.memory.get(uid) or self.memory.setdefault(uid, CrMemory())

    def next_look(self, uid: str, outcome: Outcome | None) -> float:
        """The end of a look that goes on: the delay until the next, from the outcome (None:
        the look raised before one was written) and the looks in a row that were pending,
        failed or steady before it. A look is steady when it asked for the poll and the CR did
        not change since the one before (`changed`): no status write, no new generation or
        watched annotation."""
        memory = self._memory_of(uid)
        looks, failures = memory.pending_looks, memory.failures
        pending = outcome is not None and outcome.next_look is NextLook.PENDING
        polled = outcome is not None and outcome.next_look is NextLook.POLL
        steady = not self.changed(uid) and polled
        memory.pending_looks = looks + 1 if pending else 0
        memory.failures = failures + 1 if outcome is None or failed(outcome) else 0
        memory.steady_looks = memory.steady_looks + 1 if steady else 0
        return next_delay(outcome, self.settings, looks, failures, self.random, memory.steady_looks)

    async def _let_go(self, body: Mapping[str, Any], outcome: Outcome) -> Looked:
        """A finished deletion: its events, the connection Secret and the finalizer let go, and
        the CR left (nothing to write: the CR goes)."""
        for event in outcome.events:
            self.api.post(body, event)
        await self.api.let_go_of_connection(body)
        body = await self.api.set_finalizer(body, False)
        self.leave(str(body["metadata"]["uid"]))
        return Looked(outcome, body, None)

    def _patch(
        self, body: Mapping[str, Any], held: Mapping[str, Any] | None, outcome: Outcome
    ) -> dict[str, Any] | None:
        """The status patch of the outcome over what the API server holds (`held`: the held
        write the look reconciled with), or None: a steady resource costs no write."""
        generation = int(body["metadata"].get("generation") or 0)
        return status_change(
            body.get("status"), held, outcome, now=self.now(), generation=generation
        )

    def _connection(
        self, body: Mapping[str, Any], reconciled: Reconciled, deleting: bool
    ) -> ConnectionSecret | None:
        """The CR's connection Secret after this look (spec.writeConnectionSecretToRef, or the
        default name), or None when nothing may be written (core.connection)."""
        if deleting:
            return None
        metadata = body["metadata"]
        ref = (body.get("spec") or {}).get("writeConnectionSecretToRef")
        wanted = ref.get("name") if isinstance(ref, Mapping) else None
        return connection_secret(
            self.registry,
            reconciled.outcome.state,
            reconciled.resource,
            namespace=str(metadata.get("namespace")),
            name=secret_name(str(metadata.get("name")), str(wanted) if wanted else None),
        )


def _holds(outcome: Outcome, held: HeldStatus | None) -> bool:
    """The write of this outcome waits for the next look: it only records an operation just
    accepted, and the previous look did not hold that operation's write already (a replay of
    the same key, its held write dropped by another write: written now)."""
    pending = outcome.state.pending
    return (
        outcome.replayable
        and pending is not None
        and (held is None or held.operation_id != pending.operation_id)
    )
