"""Sharding by slots placed on the live replicas: which replica acts on which CR, with no central
component.

Every replica (a *member*) is active. Each keeps a coordination.k8s.io Lease of its own and
publishes in it the *view* it serves by: the sorted set of members it considers alive. A CR's
key (`namespace/name`, or `namespace` for namespace affinity) falls in one of `SLOTS` slots,
and a view places each slot on one member (`placement`): rendezvous hashing with bounded
loads, so every member holds at most ceil(SLOTS/N) slots (a third of the CRs at three, where a
hash ring gave one member up to 43 %), and one member joining or leaving moves about 1/N of
the slots, a few more than a ring would.

The claim rule
--------------
A member M *claims* CR c under its published view V_M when owner(c, V_M) == M. M may act on c
(reconcile it, delete it, touch its host resource) iff

  1. M claims c under every view it may have published: the one its Lease holds and any whose
     write is still uncertain (timed out; a later write conditioned on the Lease's
     resourceVersion settles it), and
  2. no other *live* member N claims c under N's published view V_N.

A member publishes a new view only after it has stopped acting on every CR that view takes
away from it and their reconciles in flight have finished (it has *drained* them). A member
is live while its Lease's resourceVersion changed within its lease duration, as observed on
the observer's own clock (no trust in clock agreement, only in clock rates). A member whose
Lease write has not succeeded for its renew deadline (< lease duration) stops acting on
everything at once.

Why two members never act on c at the same time
-----------------------------------------------
Each round a member first writes its Lease (renewing it, with its view), then reads every
Lease with a quorum read, and acts until its next round on what that read says. A member's
Lease keeps claiming c for as long as the member acts on c: it withdraws a claim only by
publishing a view without c, and only after it stopped acting on c and drained it (a write
whose outcome is unknown counts as made: the member stops acting before it writes).

Suppose M and N both act on c at instant t. M acts on the read R_M, which followed the write
W_M that published M's claim on c; likewise W_N before R_N; both claims still stand at t.
The API server orders the writes and its quorum reads linearly: say W_M before W_N. Then
W_M < W_N < R_N <= t, and M's claim stood from W_M through t, so R_N saw M's Lease claiming c.
By rule 2, N then acts on c only if it found M not live: M's Lease had not changed for M's
lease duration on N's clock before R_N. M stops acting once its writes have failed for its
renew deadline, shorter than the lease duration, so M had stopped before R_N <= t: it was
not acting at t. The symmetric case is the same with the names swapped.

Handover is therefore: the old owner drains and publishes a view without c; from that moment
only the new owner's claim stands, and it acts at its next read. A joining member publishes
a view including itself at once (it acts on nothing yet), and takes its share only once the
others' published views include it (until then their claims on its share stand, and for the
round in which both claim, neither acts: the share is counted unclaimed). A
member that dies keeps its claims until its Lease expires on the others' clocks.

A CR no live member may act on (none claims it, or two do for the moment of a handover) is
*unclaimed*: counted, never silent.

Pure: no clocks read, no I/O; time is passed in.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

ShardKey = Literal["name", "namespace"]
#: Slots a view places: enough for an even spread at a handful of members, few enough that a
#: label selector naming those a member cannot own stays short.
SLOTS = 256
#: The label carrying a CR's slot, written by its owner with the finalizer.
SLOT_LABEL = "takoform.io/shard-slot"
#: How CRs are placed on the ring, published in each member's Lease: members that place
#: differently (a rolling upgrade) must never act side by side (core.shard_round.Member.read).
PLACEMENT = f"bounded-rendezvous/{SLOTS}"


def stable_hash(text: str) -> int:
    """A hash every process agrees on (Python's `hash()` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def shard_key(namespace: str, name: str, by: ShardKey = "name") -> str:
    """The key a CR is placed by: `namespace/name`, or its namespace (all of a namespace's CRs
    on one member)."""
    return namespace if by == "namespace" else f"{namespace}/{name}"


def slot_of(key: str) -> int:
    """The slot of a CR's key: a pure function of it, never changed by a rebalance."""
    return stable_hash(key) % SLOTS


def slot_key(slot: int) -> str:
    """The key a view places a slot (and every CR of it) by: one string per slot, which every
    CR of the slot shares."""
    return _SLOT_KEYS[slot]


_SLOT_KEYS = tuple(f"slot-{slot}" for slot in range(SLOTS))
_SLOT_OF_KEY = {key: slot for slot, key in enumerate(_SLOT_KEYS)}


def view_of(members: Iterable[str]) -> tuple[str, ...]:
    """A view: the sorted, duplicate-free member set."""
    return tuple(sorted(set(members)))


@functools.lru_cache(maxsize=64)
def placement(view: tuple[str, ...]) -> tuple[str, ...]:
    """The member of `view` each slot belongs to (index: the slot); empty for an empty view.

    Every (member, slot) pair has a score, a hash of both; pairs are taken from the highest
    score down, each slot going to the first member of its pairs that holds fewer than
    ceil(SLOTS/N) slots. So each member's slots are mostly those it scores highest on, which a
    member coming or going does not change: about 1/N of the slots move, and a few more
    between the others as the bound shifts."""
    members = sorted(set(view))
    if not members:
        return ()
    bound = -(-SLOTS // len(members))
    pairs = sorted(
        ((stable_hash(f"{member}/{key}"), slot, member)
         for slot, key in enumerate(_SLOT_KEYS) for member in members),
        reverse=True,
    )  # fmt: skip
    owners: dict[int, str] = {}
    held = dict.fromkeys(members, 0)
    for _score, slot, member in pairs:
        if slot not in owners and held[member] < bound:
            owners[slot] = member
            held[member] += 1
    # Every slot has one: a slot left over would mean every member full, N * bound >= SLOTS.
    return tuple(owners[slot] for slot in range(SLOTS))


def owner(key: str, view: tuple[str, ...]) -> str | None:
    """The member a slot key (`slot_key`) belongs to under `view`; None for an empty view."""
    owners = placement(view)
    return owners[_SLOT_OF_KEY[key]] if owners else None


def claims(member: str, view: tuple[str, ...], key: str) -> bool:
    """`member` claims `key` under its published `view`."""
    return owner(key, view) == member


@functools.lru_cache(maxsize=64)
def slots_claimed(member: str, views: tuple[tuple[str, ...], ...]) -> frozenset[int]:
    """The slots `member` claims under any of `views`."""
    return frozenset(
        slot for slot in range(SLOTS) if any(claims(member, view, slot_key(slot)) for view in views)
    )


def watch_selector(watched: frozenset[int]) -> str:
    """The label selector of the CRs a member watches: every CR but those labelled with a slot
    it does not watch. `notin` matches a CR without the label (a new one) and any value that is
    not a slot, so a CR is never hidden from its owner by what its label says. Empty when every
    slot is watched."""
    excluded = [str(slot) for slot in range(SLOTS) if slot not in watched]
    return f"{SLOT_LABEL} notin ({','.join(excluded)})" if excluded else ""


def slot_label(body: Mapping[str, object]) -> str | None:
    """The value of the slot label an object (a CR, a binding) carries, as written; None
    without one."""
    metadata = body.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    value = labels.get(SLOT_LABEL) if isinstance(labels, Mapping) else None
    return value if isinstance(value, str) else None


def slot_label_of(value: str | None) -> int | None:
    """The slot a label value names; None when it names none (absent, or not a slot)."""
    if value is None or not (value.isascii() and value.isdigit()) or str(int(value)) != value:
        return None
    slot = int(value)
    return slot if slot < SLOTS else None


@dataclass(frozen=True)
class Claims:
    """What one member may act on, from one read of every Lease.

    `me`: this member; `mine`: every view this member may have published (the one its Lease
    holds, plus any whose write is uncertain or that it is draining towards); `others`: the
    published view of every *other live* member."""

    me: str
    mine: tuple[tuple[str, ...], ...]
    others: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def claimants(self, key: str) -> set[str]:
        """The live members claiming `key` (this one counted only if every view of it does)."""
        found = {member for member, view in self.others.items() if claims(member, view, key)}
        if self.mine and all(claims(self.me, view, key) for view in self.mine):
            found.add(self.me)
        return found

    def may_act(self, key: str) -> bool:
        return self.claimants(key) == {self.me}

    def unclaimed(self, key: str) -> bool:
        """No live member may act on `key`: none claims it, or more than one does."""
        return len(self.claimants(key)) != 1


NOBODY = Claims(me="", mine=())


def taken_away(key: str, me: str, old: tuple[str, ...], new: tuple[str, ...]) -> bool:
    """`key` is this member's under `old` but not under `new`: drained before `new` is
    published."""
    return claims(me, old, key) and not claims(me, new, key)


@dataclass
class Liveness:
    """Which members are live, on this observer's clock: a member is live while the version of
    its Lease changed within its lease duration (the first sighting counts as a change)."""

    #: member -> (Lease resourceVersion last seen, when it was first seen with that version)
    seen: dict[str, tuple[str, float]] = field(default_factory=dict)

    def observe(self, member: str, version: str, now: float) -> None:
        last = self.seen.get(member)
        if last is None or last[0] != version:
            self.seen[member] = (version, now)

    def forget_absent(self, present: Iterable[str]) -> None:
        """Members whose Lease is gone (deleted on a clean stop) are not live."""
        keep = set(present)
        for member in [m for m in self.seen if m not in keep]:
            del self.seen[member]

    def live(self, member: str, lease_seconds: float, now: float) -> bool:
        last = self.seen.get(member)
        return last is not None and now - last[1] < lease_seconds

    def expired_for(self, member: str, lease_seconds: float, now: float) -> float:
        """How long past its lease duration the member's Lease is (0: live or unknown)."""
        last = self.seen.get(member)
        return max(0.0, now - last[1] - lease_seconds) if last is not None else 0.0
