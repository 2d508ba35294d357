"""Drive the reconcile against a real host the way the operator does, with crashes on demand.

`SimulatedCr` holds what Kubernetes would hold for one CR: the desired spec and the persisted
status. `reconcile(persist=False)` is a process death right after the reconcile's host calls and
before its status write — the crash window of docs/crash-safety.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from memory_bindings import MemoryBindings
from one_host import reconcile_with_one_host
from waiting import TimedOut, await_for

from takoform_operator.core.actions import Action, Target
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.outcome import NextLook, Outcome
from takoform_operator.core.registry import Registry
from takoform_operator.core.state import Desired, OperationView, ResourceView, State
from takoform_operator.host_client.client import HostClient
from takoform_operator.host_client.port import HostClientPort


class SpyPort:
    """The real HostClientPort, counting what the reconcile sent."""

    def __init__(self, client: HostClient) -> None:
        self._port = HostClientPort(client)
        self.calls: list[str] = []
        self.mutations: list[Action] = []

    async def get_operation(self, operation_id: str) -> OperationView:
        self.calls.append(f"get_operation {operation_id}")
        return await self._port.get_operation(operation_id)

    async def read(self, target: Target) -> ResourceView | None:
        self.calls.append(f"read {target.name}")
        return await self._port.read(target)

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        self.calls.append(f"list_operations {target.name}")
        return await self._port.list_operations(target)

    async def execute(self, action: Action) -> tuple[str, OperationView]:
        self.calls.append(f"{action.verb} {action.target.name}")
        self.mutations.append(action)
        return await self._port.execute(action)


@dataclass
class SimulatedCr:
    desired: Desired
    state: State = field(default_factory=State)
    outcomes: list[Outcome] = field(default_factory=list)
    #: The API server's bindings: they survive a lost status write.
    bindings: MemoryBindings = field(default_factory=MemoryBindings)

    async def reconcile(self, host: Any, registry: Registry, *, persist: bool = True) -> Outcome:
        """One reconcile as the operator runs it; `persist=False` loses its status write (the
        binding it wrote stays, as on the API server)."""
        outcome = await reconcile_with_one_host(
            self.desired, self.state, host, registry, self.bindings
        )
        self.outcomes.append(outcome)
        if persist:
            self.state = outcome.state
        return outcome

    def change(self, **changes: Any) -> None:
        generation = self.desired.cr_generation + (1 if "parameters" in changes else 0)
        self.desired = replace(self.desired, cr_generation=generation, **changes)

    async def converge(self, host: Any, registry: Registry, *, timeout: float = 30) -> Outcome:
        """Reconcile until the outcome is stable: ready, blocked, finalized or waiting long."""

        async def stable() -> Outcome | None:
            outcome = await self.reconcile(host, registry)
            if outcome.finalized or condition(outcome, ConditionType.BLOCKED):
                return outcome
            if outcome.next_look in (NextLook.POLL, NextLook.BACKOFF, NextLook.NEVER):
                return outcome
            return None

        try:
            return await await_for(stable, "a stable outcome", timeout=timeout, interval=0.05)
        except TimedOut as exc:
            raise TimedOut(f"{exc}; the last outcome: {self.outcomes[-1]}") from None


def condition(outcome: Outcome, kind: ConditionType) -> Reason | None:
    """The reason of a True condition of that type, or None."""
    return outcome.asserted().get(kind)


def message(outcome: Outcome, kind: ConditionType) -> str:
    return next((c.message for c in outcome.conditions if c.type is kind and c.status), "")
