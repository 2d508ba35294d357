"""The one mutation a reconcile may send (Create, Update, Delete), to an exact Target."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from takoform_spec.identity import FormRef

from .state import OperationView, State, Verb


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
