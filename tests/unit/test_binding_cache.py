"""The binding cache the watch feeds (kube.bindings.BindingBook): the newest body of each binding,
and which CR holds which; a late watch event never undoes what the operator just wrote."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from takoform_operator.core.binding import Binding, ClaimRef, Identity, Phase
from takoform_operator.kube.bindings import BindingBook
from takoform_spec.identity import FormLine

IDENTITY = Identity("team-a", FormLine("storage.takoform.io/v1", "Bucket"), "logs", "prod")
OWNER = ClaimRef("team-a", "logs", "cr-1")


def _body(binding: Binding, version: str) -> dict[str, Any]:
    return replace(binding, resource_version=version).to_json()


def _book() -> BindingBook:
    return BindingBook(lambda: (_ for _ in ()).throw(AssertionError("no API call expected")))


def test_the_cache_knows_who_holds_which_binding_and_forgets_it_when_it_goes() -> None:
    book = _book()
    bound = Binding(IDENTITY, Phase.BOUND, OWNER)
    assert book.observe(_body(bound, "5"))
    assert book.held_by("cr-1") == replace(bound, resource_version="5")
    assert not book.observe(_body(bound, "5")), "the same body again changes nothing"
    released = bound.released(OWNER, "h-1")
    assert book.observe(_body(released, "6"))
    assert book.held_by("cr-1") is None, "a Released binding is held by nobody"
    rebound = replace(released, phase=Phase.BOUND, claim=ClaimRef("team-a", "again", "cr-2"))
    book.observe(_body(rebound, "7"))
    assert book.held_by("cr-2") is not None and book.held_by("cr-1") is None
    assert book.forget(_body(rebound, "8"))
    assert book.held_by("cr-2") is None


def test_a_late_watch_event_never_undoes_a_newer_binding() -> None:
    book = _book()
    bound = Binding(IDENTITY, Phase.BOUND, OWNER)
    book.observe(_body(bound, "9"))
    assert not book.observe(_body(bound.lost(None), "8")), "older than what is held"
    assert not book.forget(_body(bound, "8")), "a delete older than the binding held"
    assert book.held_by("cr-1") is not None


def test_an_object_under_a_name_that_is_not_its_identitys_binds_nothing() -> None:
    book = _book()
    forged = _body(Binding(IDENTITY, Phase.BOUND, OWNER), "3")
    forged["metadata"]["name"] = "tb-" + "0" * 40
    book.observe(forged)
    assert book.held_by("cr-1") is None
    unreadable = {"metadata": {"name": "tb-x", "resourceVersion": "4"}, "spec": {"phase": "?"}}
    book.observe(unreadable)
    assert book.held_by("cr-1") is None
