"""The one mutation a reconcile may send (Create, Update, Delete), to an exact Target."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from takoform_spec.identity import FormRef

from .state import OperationView, OpState, State, Verb


@dataclass(frozen=True)
class Target:
    """An exact resource address: space, exact FormRef, name."""

    space: str
    form_ref: FormRef
    name: str


@dataclass(frozen=True)
class Create:
    target: Target
    spec: Mapping[str, Any]
    key: str
    verb: Verb = Verb.CREATE


@dataclass(frozen=True)
class Update:
    target: Target
    spec: Mapping[str, Any]
    expected_generation: str
    expected_uid: str
    key: str
    verb: Verb = Verb.UPDATE


@dataclass(frozen=True)
class Delete:
    target: Target
    expected_uid: str
    key: str
    verb: Verb = Verb.DELETE


Action = Create | Update | Delete


def bound_to(state: State, target: Target, uid: str | None) -> State:
    """State bound to the exact target a create of ours was accepted for."""
    return replace(state, form_ref=target.form_ref, space=target.space, name=target.name, uid=uid)


def same_target(operation: OperationView, verb: Verb, target: Target) -> bool:
    """The operation record names exactly this request's target, member by member."""
    return (
        operation.verb is verb
        and operation.space == target.space
        and operation.form_ref == target.form_ref
        and operation.name == target.name
    )


def foreign_record(operation: OperationView, verb: Verb, target: Target) -> str | None:
    """Why a consulted operation record is not the one recorded as pending (it names another
    verb, space, FormRef or name), or None when it names exactly the pending request's target.
    A record the host no longer has (operation_not_found) names nothing and is not foreign."""
    if operation.state is OpState.NOT_FOUND or same_target(operation, verb, target):
        return None
    return (
        f"the host answered the pending {verb} of {target.name} in space {target.space} under "
        f"{target.form_ref} with a record of {operation.verb} of {operation.name} in space "
        f"{operation.space} under {operation.form_ref}"
    )
