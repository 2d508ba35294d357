"""core.shard_round: what one replica makes of each read of the ring, which view it publishes
when, and which CRs it serves, as tables."""

from __future__ import annotations

import pytest

from takoform_operator.core.shard_ring import SLOTS, owner, slot_key, slots_claimed
from takoform_operator.core.shard_round import Member, Plan, SeenLease, Verdict

#: The ring places slots: the keys a member admits are slot keys.
KEYS = [slot_key(slot) for slot in range(SLOTS)]
AB = ("a", "b")


ABC = ("a", "b", "c")
#: Keys by their owners under AB and under ABC.
A_KEY = next(k for k in KEYS if owner(k, AB) == "a" == owner(k, ABC))
B_KEY = next(k for k in KEYS if owner(k, AB) == "b")
MOVING = next(k for k in KEYS if owner(k, AB) == "a" and owner(k, ABC) == "c")


def lease(member: str, version: str, view: tuple[str, ...] = AB) -> SeenLease:
    return SeenLease(f"r-shard-{member}", member, version, duration=10.0, view=view)


def published(me: str, view: tuple[str, ...], **others: tuple[str, ...]) -> Member:
    """A member whose Lease holds `view`, after a read that found `others` live."""
    member = Member(me)
    member.written(view)
    member.read([lease(name, "1", seen) for name, seen in others.items()], now=0.0)
    return member


@pytest.mark.parametrize(
    ("later", "now", "members", "stale"),
    [
        # b renewed (a new version): live, whatever the time since the first sighting
        ("2", 9.0, AB, []),
        ("2", 25.0, AB, []),
        # b unchanged within its lease duration: still live
        ("1", 9.9, AB, []),
        # unchanged for its lease duration: not live, its Lease kept for another duration
        ("1", 10.0, ("a",), []),
        ("1", 20.0, ("a",), []),
        # expired for more than another lease duration: deleted, as it was read
        ("1", 20.1, ("a",), ["1"]),
    ],
)
def test_liveness_and_stale_leases_come_from_the_reads_on_our_clock(
    later: str, now: float, members: tuple[str, ...], stale: list[str]
) -> None:
    member = Member("a")
    assert member.read([lease("a", "9"), lease("b", "1")], now=0.0) == []
    assert member.members == AB
    found = member.read([lease("a", "9"), lease("b", later)], now=now)
    assert member.members == members
    assert [seen.version for seen in found] == stale
    assert set(member.claims.others) == set(members) - {"a"}


def test_leases_without_a_holder_or_of_our_own_count_for_nobody() -> None:
    member = Member("a")
    member.read([lease("", "1"), lease("a", "1", ("a", "x"))], now=0.0)
    assert member.members == ("a",) and dict(member.claims.others) == {}


def test_a_member_that_left_is_not_live_even_before_its_lease_would_run_out() -> None:
    member = Member("a")
    member.read([lease("b", "1")], now=0.0)
    member.read([], now=1.0)  # b deleted its Lease: a clean stop
    assert member.members == ("a",)
    member.read([lease("b", "1")], now=2.0)  # seen again: a first sighting, live
    assert member.members == AB


@pytest.mark.parametrize(
    ("why", "member", "key", "verdict"),
    [
        ("nothing published yet: acts on nothing", Member("a"), A_KEY, Verdict.STOP),
        ("its view gives it the CR, no other claims it", published("a", AB, b=AB), A_KEY,
         Verdict.SERVE),
        ("the other live member's view gives it the CR", published("a", AB, b=AB), B_KEY,
         Verdict.STOP),
        ("alone, every CR", published("a", ("a",)), B_KEY, Verdict.SERVE),
        ("alone under a view with b, b's share waits for b", published("a", AB), B_KEY,
         Verdict.STOP),
        ("b's old view still claims it: nobody acts", published("a", ("a",), b=("b",)), A_KEY,
         Verdict.STOP),
    ],
)  # fmt: skip
def test_the_verdict_on_a_cr_of_the_selector(
    why: str, member: Member, key: str, verdict: Verdict
) -> None:
    assert member.admit("u", key) is verdict, why
    assert ("u" in member.serving) == (verdict is Verdict.SERVE)


def test_a_member_that_stopped_serves_nothing() -> None:
    member = published("a", ("a",))
    assert member.admit("u", A_KEY) is Verdict.SERVE
    member.stopped = True
    assert member.settle() == Plan(stop=("u",))
    assert member.admit("u", A_KEY) is Verdict.STOP and not member.serving


def test_dropping_a_cr_says_whether_it_was_served() -> None:
    member = published("a", AB, b=AB)
    member.admit("mine", A_KEY)
    member.admit("theirs", B_KEY)
    assert member.drop("mine") and not member.drop("theirs") and not member.drop("unknown")
    assert member.keys == {} and member.serving == set()


def test_a_view_is_published_only_once_drained_and_restricts_until_written() -> None:
    """b leaves: a heads for the view without b, writes it only once drained, and takes b's
    CRs only once that write landed and b's old view no longer stands."""
    member = published("a", AB, b=AB)
    member.admit("a1", A_KEY)
    member.admit("b1", B_KEY)
    assert member.settle() == Plan()
    assert member.next_view() is None  # the live members are the view published
    member.read([], now=1.0)  # b's Lease went
    target = member.next_view()
    assert target == ("a",)
    member.head_for(target)
    assert member.next_view() is None  # already heading there
    assert member.to_write(drained=False) == AB  # a renewal of the view held
    assert member.to_write(drained=True) == ("a",)
    assert not member.may_act(B_KEY)  # the write of ("a",) may not land: AB restricts still
    assert member.written(("a",))
    assert not member.written(("a",))  # a renewal publishes nothing new
    assert member.pending == []
    member.read([], now=2.0)
    assert member.settle() == Plan(start=("b1",))


def test_a_view_that_takes_a_cr_away_stops_it_at_once() -> None:
    """c joins: what the view with c gives c stops here as soon as a heads for that view,
    before it is written (c's own view, unreadable here, claims nothing yet)."""
    member = published("a", AB, b=AB)
    member.admit("moving", MOVING)
    member.admit("staying", A_KEY)
    member.read([lease("b", "1"), lease("c", "1", ())], now=0.0)
    assert member.settle() == Plan()
    target = member.next_view()
    assert target == ABC
    member.head_for(target)
    assert member.settle() == Plan(stop=("moving",))
    assert member.serving == {"staying"}


def test_the_unclaimed_count_follows_the_claims_and_the_crs() -> None:
    member = published("a", ("a",), b=("b",))  # both claim every key: none is served
    member.admit("u1", A_KEY)
    assert member.unclaimed() == 1
    member.admit("u2", B_KEY)
    assert member.unclaimed() == 2
    member.drop("u1")
    assert member.unclaimed() == 1
    member.read([lease("b", "1", ())], now=0.0)  # b's view now claims nothing
    assert member.unclaimed() == 0


def test_a_live_member_that_places_otherwise_stops_every_act_until_it_is_gone() -> None:
    """A rolling upgrade: a replica of another placement (or of none said) may act on any CR
    by its own; while it is live this one acts on nothing, and counts every CR unclaimed."""
    member = published("a", AB, b=AB)
    member.admit("a1", A_KEY)
    assert member.settle() == Plan()
    old = SeenLease("r-shard-b", "b", "2", duration=10.0, view=AB, placement="")
    member.read([old], now=1.0)
    assert member.foreign == ("b",)
    assert member.settle() == Plan(stop=("a1",))
    assert member.admit("a1", A_KEY) is Verdict.STOP and member.unclaimed() == 1
    member.read([old], now=11.0)  # its Lease ran out: gone
    assert member.foreign == ()
    member.head_for(member.next_view() or ())
    member.written(("a",))
    member.read([], now=12.0)
    assert member.settle() == Plan(start=("a1",))


def test_the_watch_covers_every_slot_we_may_come_to_serve() -> None:
    """The slots of the view published and of the one we head for (the live members): a CR
    handed to us is delivered before its claim is settled."""
    member = published("a", AB, b=AB)
    assert member.watched() == slots_claimed("a", (AB,))
    member.read([lease("b", "1"), lease("c", "1", ())], now=0.0)  # c joins: a heads for ABC
    assert member.watched() == slots_claimed("a", (AB, ABC))
    member.head_for(ABC)
    member.written(ABC)
    member.read([lease("b", "2", ABC), lease("c", "2", ABC)], now=1.0)
    assert member.watched() == slots_claimed("a", (ABC,))


def test_what_the_watch_no_longer_delivers_is_what_we_do_not_serve() -> None:
    member = published("a", AB, b=AB)
    member.admit("mine", A_KEY)
    member.admit("theirs", B_KEY)
    assert member.unwatched(frozenset()) == ["theirs"]  # a served CR is never dropped so
    assert member.unwatched(member.watched()) == ["theirs"]
