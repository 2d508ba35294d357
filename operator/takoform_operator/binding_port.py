"""The TakoformBindings as the service needs them: the BindingPort protocol and its errors.

The implementation (kube.bindings) writes the objects on the API server, whose answers are the
only arbiter of ownership: `create` fails with BindingExists when any process created the same
binding first, and `replace`/`delete` carry the resourceVersion read, failing with BindingConflict
when anything wrote it since. `held_by` and `get` may answer from a watch cache: a stale answer
costs a refused write and a fresh read, never a second owner.
"""

from __future__ import annotations

from typing import Protocol

from takoform_operator.core.binding import Binding, ClaimRef, Identity


class BindingError(Exception):
    """A binding write did not land for a reason other than a rival (API server trouble)."""


class BindingExists(BindingError):
    """`create` found the binding there already: somebody bound the identity first."""


class BindingConflict(BindingError):
    """The binding changed (or went) since it was read: read it again and decide again."""


class BindingPort(Protocol):
    async def get(self, identity: Identity) -> Binding | None:
        """The binding of `identity`, or None when there is none."""

    async def read(self, identity: Identity) -> Binding | None:
        """The binding of `identity` as the API server holds it now (a quorum read, never a
        cache). Raises BindingError when it cannot be read."""

    def held_by(self, cr_uid: str) -> Binding | None:
        """The binding Bound to the CR with this uid, whatever identity it names (a CR holds at
        most one): where a CR whose status was lost finds the claim it wrote."""

    async def create(self, binding: Binding) -> Binding:
        """Create it (the lock); returns it as written. Raises BindingExists."""

    async def replace(self, binding: Binding) -> Binding:
        """Replace it, on the condition that it is still at binding.resource_version; returns
        it as written. Raises BindingConflict."""

    async def delete(self, binding: Binding) -> None:
        """Delete it, on the same condition (one already gone is fine). Raises BindingConflict."""

    async def claim_exists(self, identity: Identity, claim: ClaimRef) -> bool:
        """The CR the claim names (its Form line is the identity's) exists with the claim's uid.
        When that cannot be told (forbidden, API trouble) the answer is True: only a CR proven
        gone is treated as gone."""

    def went(self, identity: Identity) -> bool:
        """The binding of `identity` existed and went, as far as this process saw (a
        tombstone): whoever binds it next weighs the evidence first (`recorded_elsewhere`)."""

    async def recorded_elsewhere(
        self, identity: Identity, cr_uid: str, creator: str | None
    ) -> bool:
        """A CR other than `cr_uid` exists that records `identity` in its status, or is the
        CR `creator` (the uid a creation key names): a quorum read of the API server. When
        that cannot be told, the answer is True: an import waits rather than bind on a guess."""
