"""Which watched kinds the API server's discovery does not list yet (kube.discovery)."""

from __future__ import annotations

from takoform_operator.kube.discovery import missing_kinds, watched_kinds
from takoform_operator.registry_data import load_registry

REGISTRY = load_registry()


def test_every_kind_the_handlers_watch_is_waited_for() -> None:
    kinds = watched_kinds(REGISTRY)
    assert ("operator.takoform.io", "v1alpha1", "takoformbindings") in kinds
    assert ("storage.takoform.io", "v1", "buckets") in kinds
    assert len(kinds) == len(REGISTRY.lines()) + 3


def test_a_group_not_served_yet_or_listing_too_few_kinds_is_missing() -> None:
    kinds = watched_kinds(REGISTRY)
    served = {(g, v): {p for gg, vv, p in kinds if (gg, vv) == (g, v)} for g, v, _ in kinds}
    assert missing_kinds(kinds, lambda g, v: served[(g, v)]) == []
    served[("storage.takoform.io", "v1")].discard("buckets")  # storage still initialising
    asked: list[tuple[str, str]] = []

    def answer(group: str, version: str) -> set[str] | None:
        asked.append((group, version))
        return None if group == "operator.takoform.io" else served[(group, version)]

    missing = missing_kinds(kinds, answer)
    assert ("storage.takoform.io", "v1", "buckets") in missing
    assert {p for g, _, p in missing if g == "operator.takoform.io"} == {
        "takoformbindings",
        "takoformhosts",
        "takoformspacegrants",
    }
    assert len(asked) == len(set(asked)), "each group/version asked once"
