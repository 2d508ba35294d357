"""The placement of slots on members and the claim rule of core.shard_ring."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from takoform_operator.core.shard_ring import (
    SLOT_LABEL,
    SLOTS,
    Claims,
    Liveness,
    claims,
    owner,
    placement,
    shard_key,
    slot_key,
    slot_label_of,
    slot_of,
    slots_claimed,
    stable_hash,
    taken_away,
    view_of,
    watch_selector,
)

KEYS = [shard_key(f"ns-{i % 7}", f"cr-{i}") for i in range(6000)]
#: What members place and claim: a slot's key, one per slot.
SLOT_KEYS = [slot_key(slot) for slot in range(SLOTS)]
members = st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), min_size=1, max_size=6)


def test_the_hash_is_the_same_in_every_process() -> None:
    """Python's hash() is salted per process; the ring must not be."""
    code = "from takoform_operator.core.shard_ring import stable_hash; print(stable_hash('a/b'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert int(other.stdout) == stable_hash("a/b")


def test_keys() -> None:
    assert shard_key("team-a", "logs") == "team-a/logs"
    assert shard_key("team-a", "logs", "namespace") == "team-a"


def test_an_empty_view_places_nothing() -> None:
    assert placement(()) == ()
    assert owner(slot_key(0), ()) is None


@given(members, st.integers(min_value=0, max_value=SLOTS - 1))
def test_every_slot_has_one_owner_among_the_members(names: list[str], slot: int) -> None:
    view = view_of(names)
    assert owner(slot_key(slot), view) in view
    assert placement(view) == placement(tuple(reversed(names)))  # order does not matter


@given(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,12}", fullmatch=True), min_size=1, max_size=12))
def test_each_member_holds_at_most_its_share_of_the_slots_rounded_up(names: list[str]) -> None:
    """A hash ring gave one of three replicas up to 43 % of the CRs; the busiest sets what the
    replicas need."""
    view = view_of(names)
    held = Counter(placement(view))
    assert sum(held.values()) == SLOTS
    assert max(held.values()) <= -(-SLOTS // len(view)), held


def test_the_keys_spread_evenly() -> None:
    """Slots spread the CRs' keys, and the members hold even shares of slots: each of three
    holds a third of the keys, within the keys' own spread over the slots."""
    view = ("a", "b", "c")
    keys = Counter(owner(slot_key(slot_of(k)), view) for k in KEYS)
    assert all(abs(n - len(KEYS) / 3) < 0.05 * len(KEYS) for n in keys.values()), keys


@pytest.mark.parametrize("size", [2, 3, 5])
def test_a_member_joining_or_leaving_moves_about_one_nth_of_the_slots(size: int) -> None:
    before = tuple(f"m{i}" for i in range(size))
    after = (*before, "new")
    moved = [s for s in range(SLOTS) if placement(before)[s] != placement(after)[s]]
    ideal = SLOTS / (size + 1)
    # The newcomer's share, and a few more between the others as the bound shifts (up to 1.44
    # times the share for 200 random views of 2 to 8 names; a hash ring moved about the share
    # but placed unevenly).
    assert ideal <= len(moved) < 1.5 * ideal, (len(moved), ideal)
    shuffled = [s for s in moved if placement(after)[s] != "new"]
    assert len(shuffled) <= SLOTS // 16, shuffled


def test_the_live_members_claims_decide() -> None:
    view = ("a", "b")
    key = next(k for k in SLOT_KEYS if owner(k, view) == "a")
    a = Claims("a", mine=(view,), others={"b": view})
    b = Claims("b", mine=(view,), others={"a": view})
    assert a.may_act(key) and not b.may_act(key)
    assert not a.unclaimed(key)


def test_a_joining_member_waits_for_the_others_views() -> None:
    old, new = ("a", "b"), ("a", "b", "c")
    key = next(k for k in SLOT_KEYS if owner(k, old) == "a" and owner(k, new) == "c")
    c = Claims("c", mine=(new,), others={"a": old, "b": old})
    assert not c.may_act(key)  # a still claims it
    assert Claims("a", mine=(old,), others={"b": old}).may_act(key)  # before c's first write
    # both claim it for the moment: neither acts, and it is counted
    contested = Claims("a", mine=(old,), others={"b": old, "c": new})
    assert not contested.may_act(key) and contested.unclaimed(key)
    # a drains it and publishes the new view: now c alone claims it
    assert taken_away(key, "a", old, new)
    assert Claims("c", mine=(new,), others={"a": new, "b": old}).may_act(key)
    assert not Claims("a", mine=(new,), others={"b": old, "c": new}).may_act(key)


def test_a_view_being_published_restricts_until_the_write_is_known() -> None:
    old, new = ("a", "b"), ("a",)
    key = next(k for k in SLOT_KEYS if owner(k, old) == "b")
    # a publishes its view without b: it may act on b's keys only when b is no longer live
    assert not Claims("a", mine=(old, new), others={}).may_act(key)
    assert Claims("a", mine=(new,), others={}).may_act(key)
    moving = ("a", "b", "c")
    key = next(k for k in SLOT_KEYS if owner(k, old) == "a" and owner(k, moving) == "c")
    assert not Claims("a", mine=(old, moving), others={}).may_act(key)


def test_two_claims_leave_a_cr_unclaimed_not_doubly_served() -> None:
    key = SLOT_KEYS[0]
    a = Claims("a", mine=(("a",),), others={"b": ("b",)})
    assert not a.may_act(key) and a.unclaimed(key)
    assert Claims("a", mine=(), others={}).unclaimed(key)


@settings(max_examples=200)
@given(
    st.lists(st.sampled_from("abcd"), min_size=1, max_size=4, unique=True),
    st.dictionaries(
        st.sampled_from("abcd"),
        st.lists(st.sampled_from("abcd"), max_size=4).map(view_of),
        min_size=1,
    ),
)
def test_at_most_one_member_may_act_on_a_key(
    live: list[str], views: dict[str, tuple[str, ...]]
) -> None:
    """Whatever views the live members published, no key has two members that may act."""
    live_views = {m: v for m, v in views.items() if m in live}
    for key in SLOT_KEYS:
        acting = [
            m
            for m, v in live_views.items()
            if Claims(m, (v,), {n: w for n, w in live_views.items() if n != m}).may_act(key)
        ]
        assert len(acting) <= 1, (key, acting)
        claimed = {m for m, v in live_views.items() if claims(m, v, key)}
        assert (len(acting) == 1) == (len(claimed) == 1)


def test_agreed_views_serve_every_key_exactly_once() -> None:
    view = ("a", "b", "c")
    for key in SLOT_KEYS:
        acting = [
            m for m in view if Claims(m, (view,), {n: view for n in view if n != m}).may_act(key)
        ]
        assert acting == [owner(key, view)]


def test_liveness_is_on_the_observers_clock() -> None:
    seen = Liveness()
    seen.observe("b", "1", now=100.0)
    assert seen.live("b", 15, now=114.9)
    seen.observe("b", "1", now=110.0)  # unchanged: no renewal
    assert not seen.live("b", 15, now=115.0)
    assert seen.expired_for("b", 15, now=120.0) == pytest.approx(5.0)
    seen.observe("b", "2", now=116.0)  # renewed
    assert seen.live("b", 15, now=130.0)
    seen.forget_absent(["c"])
    assert not seen.live("b", 15, now=130.0)
    assert seen.expired_for("b", 15, now=130.0) == 0.0


def test_views_are_sorted_sets() -> None:
    assert view_of(["b", "a", "b"]) == ("a", "b")
    assert list(itertools.islice(iter(view_of([])), 1)) == []


def test_a_slot_is_a_pure_function_of_the_key_spread_over_every_slot() -> None:
    slots = Counter(slot_of(key) for key in KEYS)
    assert set(slots) == set(range(SLOTS))
    assert slot_of("ns-1/cr-1") == slot_of(shard_key("ns-1", "cr-1"))
    assert max(slots.values()) < 3 * len(KEYS) / SLOTS


@pytest.mark.parametrize(
    ("value", "slot"),
    [
        ("0", 0),
        ("255", 255),
        (None, None),  # a new CR: no label yet
        ("256", None),  # past the last slot
        ("007", None),  # not as a slot is written
        ("-1", None),
        ("", None),
        ("²", None),  # a digit, but not an ASCII one
        ("slot-3", None),
    ],
)
def test_the_slot_a_label_names(value: str | None, slot: int | None) -> None:
    assert slot_label_of(value) == slot


@pytest.mark.parametrize(
    ("labels", "watched"),
    [
        ({}, True),  # a new CR: seen until its owner labels it
        ({SLOT_LABEL: "3"}, True),  # a slot watched
        ({SLOT_LABEL: "4"}, False),  # a slot not watched
        ({SLOT_LABEL: "300"}, True),  # no slot at all: never hidden from its owner
        ({SLOT_LABEL: "a"}, True),
        ({"other": "4"}, True),
    ],
)
def test_the_watch_selector_hides_only_the_slots_not_watched(
    labels: dict[str, str], watched: bool
) -> None:
    from takoform_operator.kube.selector import parse_selector

    text = watch_selector(frozenset({1, 2, 3}))
    assert text.startswith(f"{SLOT_LABEL} notin (0,4,5,")
    assert parse_selector(text).matches(labels) is watched


def test_watching_every_slot_needs_no_selector() -> None:
    assert watch_selector(frozenset(range(SLOTS))) == ""


@pytest.mark.parametrize("view", [("a",), ("a", "b"), ("a", "b", "c"), ("a", "b", "c", "d")])
def test_each_slot_is_claimed_by_one_member_of_a_view(view: tuple[str, ...]) -> None:
    shares = [slots_claimed(member, (view,)) for member in view]
    assert sorted(slot for share in shares for slot in share) == list(range(SLOTS))
    if len(view) >= 3:  # even enough that a share stays under 45 % of the whole
        assert all(len(share) < 0.45 * SLOTS for share in shares), [len(s) for s in shares]


def test_the_slots_claimed_under_several_views_are_their_union() -> None:
    both = slots_claimed("a", (("a", "b"), ("a", "b", "c")))
    assert both == slots_claimed("a", (("a", "b"),)) | slots_claimed("a", (("a", "b", "c"),))
