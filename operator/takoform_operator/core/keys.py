"""Idempotency keys: each recomputable from persisted state, and the ownership it proves.

Every mutation carries an idempotency key the next reconcile can recompute from what is
already persisted, which is what makes a crash between the host's 202 and the status write
harmless (docs/crash-safety.md).
"""

from __future__ import annotations

from .state import Desired, OperationView, ResourceView, State


def key_prefix(cr_uid: str) -> str:
    """Every key of ours starts with the CR's own uid: ownership is provable from the key."""
    return f"{cr_uid}:"


def create_key(desired: Desired, state: State) -> str:
    return f"{desired.cr_uid}:create:{state.attempt}"


def update_key(desired: Desired, state: State, uid: str, host_generation: str) -> str:
    """Per incarnation: a rebind to a new uid can never replay an update sent to the old one."""
    return (
        f"{desired.cr_uid}:update:{uid}:{desired.cr_generation}:{host_generation}:{state.attempt}"
    )


def delete_key(desired: Desired, state: State, uid: str) -> str:
    return f"{desired.cr_uid}:delete:{uid}:{state.attempt}"


def proves_ours(resource: ResourceView, desired: Desired) -> bool:
    """Ownership evidence: the resource was created with one of OUR idempotency keys, or with
    one of the CR this one restores (the same namespace and name, whose binding went Lost
    before it recorded the incarnation: core.ownership.restores)."""
    key = resource.creation_key
    if key is None:
        return False
    uids = (desired.cr_uid, desired.restores) if desired.restores else (desired.cr_uid,)
    return any(key.startswith(key_prefix(uid) + "create:") for uid in uids)


def is_ours(operation: OperationView, desired: Desired) -> bool:
    """Our CR uid is in the operation's key: it was sent by this CR."""
    return (operation.idempotency_key or "").startswith(key_prefix(desired.cr_uid))


def creator_of(resource: ResourceView) -> str | None:
    """The uid of the CR whose create made `resource`, when its creation key is one of ours
    (any CR's, of any release): the evidence an import weighs before it binds a resource
    nobody has bound (kube.bindings.recorded_elsewhere)."""
    uid, verb, _ = (resource.creation_key or "").partition(":create:")
    return uid if verb and uid else None
