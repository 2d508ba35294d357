"""The shard selector: the Kubernetes label-selector syntax, and what it lets through."""

from __future__ import annotations

import pytest

from takoform_operator.kube.selector import parse_selector


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("", {}, True),
        ("", {"shard": "a"}, True),
        ("shard=a", {"shard": "a"}, True),
        ("shard==a", {"shard": "a"}, True),
        ("shard=a", {"shard": "b"}, False),
        ("shard=a", {}, False),
        ("shard!=a", {"shard": "b"}, True),
        ("shard!=a", {}, True),
        ("shard!=a", {"shard": "a"}, False),
        ("shard in (a, b)", {"shard": "b"}, True),
        ("shard in (a,b)", {"shard": "c"}, False),
        ("shard in (a,b)", {}, False),
        ("shard notin (a,b)", {"shard": "c"}, True),
        ("shard notin (a,b)", {}, True),
        ("shard notin (a,b)", {"shard": "a"}, False),
        ("shard", {"shard": ""}, True),
        ("shard", {}, False),
        ("!shard", {}, True),
        ("!shard", {"shard": "a"}, False),
        ("shard in (a,b),tier!=x,!legacy", {"shard": "a", "tier": "y"}, True),
        ("shard in (a,b),tier!=x,!legacy", {"shard": "a", "legacy": "1"}, False),
        ("takoform.io/shard=a", {"takoform.io/shard": "a"}, True),
    ],
)
def test_matches(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(selector).matches(labels) is matches


def test_no_labels_at_all_is_an_empty_set() -> None:
    assert parse_selector("!shard").matches(None)
    assert not parse_selector("shard=a").matches(None)


@pytest.mark.parametrize("bad", ["shard in (a", "a=b=c", "=x", "shard in ()", "sh ard=a", "a)"])
def test_unreadable_selectors_are_refused_naming_the_requirement(bad: str) -> None:
    with pytest.raises(ValueError, match="label selector"):
        parse_selector(bad)


def test_disjoint_shards_split_every_labelling() -> None:
    shards = [parse_selector("shard=a"), parse_selector("shard notin (a)")]
    for labels in ({}, {"shard": "a"}, {"shard": "b"}, {"other": "a"}):
        assert sum(s.matches(labels) for s in shards) == 1, labels
