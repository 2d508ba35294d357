"""One CR held in memory as the API server would hold it, looked at by the operator's own look
(kube.cr_step.CrSteps): what the handlers run, without kopf or an API server."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Mapping
from typing import Any

from builders import REGISTRY
from memory_bindings import MemoryBindings

from takoform_operator.core.connection import ConnectionSecret
from takoform_operator.core.outcome import Event
from takoform_operator.core.registry import Registry
from takoform_operator.core.remedies import Remedy
from takoform_operator.kube.cr_step import CrSteps, Looked
from takoform_operator.kube.crs import merged_status
from takoform_operator.service import Tenancy
from takoform_operator.settings import Settings

NOW = "2026-11-30T10:00:00Z"


class WithoutSecrets:
    """A look's CR whose connection Secrets are not modelled: none written, none let go."""

    async def write_connection(
        self, body: Mapping[str, Any], secret: ConnectionSecret
    ) -> tuple[str, tuple[Remedy, ...]] | None:
        return None

    async def let_go_of_connection(self, body: Mapping[str, Any]) -> None:
        pass


class MemoryCr(WithoutSecrets):
    """The CR (kube.cr_step.CrApi): every write a new resourceVersion; the status writes and
    the Events recorded. Connection Secrets are not written."""

    def __init__(self, body: Mapping[str, Any]) -> None:
        self.body: dict[str, Any] = copy.deepcopy(dict(body))
        self.body["metadata"].setdefault("resourceVersion", "1")
        self.status_writes: list[dict[str, Any]] = []
        self.events: list[Event] = []
        self.gone = False
        self._versions = itertools.count(int(self.body["metadata"]["resourceVersion"]) + 1)

    @property
    def status(self) -> dict[str, Any]:
        return dict(self.body.get("status") or {})

    def _written(self) -> None:
        self.body["metadata"]["resourceVersion"] = str(next(self._versions))

    async def write_status(
        self, body: Mapping[str, Any], patch: dict[str, Any]
    ) -> Mapping[str, Any]:
        self.status_writes.append(patch)
        self.body["status"] = merged_status(self.body.get("status"), patch)
        self._written()
        return copy.deepcopy(self.body)

    async def set_finalizer(self, body: Mapping[str, Any], present: bool) -> Mapping[str, Any]:
        kept = [
            f for f in self.body["metadata"].get("finalizers") or () if f != "takoform.io/finalizer"
        ]
        self.body["metadata"]["finalizers"] = [
            *kept,
            *(["takoform.io/finalizer"] if present else []),
        ]
        self.gone = not present and self.body["metadata"].get("deletionTimestamp") is not None
        self._written()
        return copy.deepcopy(self.body)

    def post(self, body: Mapping[str, Any], event: Event) -> None:
        self.events.append(event)


def steps_over(
    api: Any,
    tenancy: Tenancy,
    bindings: MemoryBindings | None = None,
    registry: Registry = REGISTRY,
) -> CrSteps:
    """The looks of one process at CRs written through `api`."""
    store = MemoryBindings() if bindings is None else bindings
    return CrSteps(registry, tenancy, store, api, Settings(), lambda: NOW)


async def look_once(
    body: Mapping[str, Any],
    tenancy: Tenancy,
    bindings: MemoryBindings | None = None,
    registry: Registry = REGISTRY,
) -> tuple[Looked, MemoryCr]:
    """One look at the CR `body` by a process that never saw it, and the CR after it."""
    cr = MemoryCr(body)
    looked = await steps_over(cr, tenancy, bindings, registry).look(copy.deepcopy(cr.body))
    return looked, cr
