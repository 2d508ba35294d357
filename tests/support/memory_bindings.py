"""TakoformBindings held in memory with the API server's semantics (create is the lock, writes carry
a resourceVersion precondition): the binding store of tests about the reconcile and of the model
checker's simulated cluster, where the CRs live in memory too."""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import replace

from takoform_operator.binding_port import BindingConflict, BindingExists
from takoform_operator.core.binding import Binding, ClaimRef, Identity, Phase

_versions = itertools.count(1)


class MemoryBindings:
    """`exists(identity, claim)` says whether a claimed CR still exists (default: always);
    `recorded(identity, cr_uid, creator)` whether another CR records the identity or is its
    creator (default: none does)."""

    def __init__(
        self,
        exists: Callable[[Identity, ClaimRef], bool] | None = None,
        recorded: Callable[[Identity, str, str | None], bool] | None = None,
    ) -> None:
        self.objects: dict[str, Binding] = {}
        self._exists = exists or (lambda identity, claim: True)
        self._recorded = recorded or (lambda identity, cr_uid, creator: False)
        #: The names of the bindings deleted (the API server's tombstones, as a watch sees them).
        self.gone: set[str] = set()
        #: Every write, in order: (verb, binding name).
        self.writes: list[tuple[str, str]] = []

    async def get(self, identity: Identity) -> Binding | None:
        return self.objects.get(identity.binding_name())

    async def read(self, identity: Identity) -> Binding | None:
        return self.objects.get(identity.binding_name())

    def held_by(self, cr_uid: str) -> Binding | None:
        return next((b for b in self.objects.values() if b.owned_by(cr_uid)), None)

    async def create(self, binding: Binding) -> Binding:
        if binding.name in self.objects:
            raise BindingExists(f"{binding.name} exists")
        return self._store("create", binding)

    async def replace(self, binding: Binding) -> Binding:
        current = self.objects.get(binding.name)
        if current is None or current.resource_version != binding.resource_version:
            raise BindingConflict(f"{binding.name} changed")
        return self._store("replace", binding)

    async def delete(self, binding: Binding) -> None:
        current = self.objects.get(binding.name)
        if current is None:
            return
        if current.resource_version != binding.resource_version:
            raise BindingConflict(f"{binding.name} changed")
        del self.objects[binding.name]
        self.gone.add(binding.name)
        self.writes.append(("delete", binding.name))

    async def claim_exists(self, identity: Identity, claim: ClaimRef) -> bool:
        return self._exists(identity, claim)

    def went(self, identity: Identity) -> bool:
        name = identity.binding_name()
        return name in self.gone and name not in self.objects

    async def recorded_elsewhere(
        self, identity: Identity, cr_uid: str, creator: str | None
    ) -> bool:
        return self._recorded(identity, cr_uid, creator)

    def _store(self, verb: str, binding: Binding) -> Binding:
        stored = replace(binding, resource_version=str(next(_versions)))
        self.objects[binding.name] = stored
        self.writes.append((verb, binding.name))
        return stored

    # -- what an admin does with kubectl (the plugin's release) ---------------------------------

    def pre_bind(self, name: str, namespace: str, cr_name: str) -> None:
        """`kubectl takoform release NAME --to NAMESPACE/NAME`."""
        current = self.objects[name]
        assert current.phase is not Phase.BOUND or not (current.claim and current.claim.uid)
        self._store("replace", replace(current, claim=ClaimRef(namespace, cr_name)))
