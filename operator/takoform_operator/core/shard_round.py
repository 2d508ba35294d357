"""One replica's part in the ring, round by round: the decisions of kube.shards, without I/O.

From each read of the ring's Leases (`SeenLease`, on this observer's clock) it learns which
members are live and what their published views claim (core.shard_ring, the claim rule). From
that it decides which view this replica heads for, which view its next Lease write carries,
and which of the CRs it knows it must start or stop serving (`Plan`). Each watched CR gets one
`Verdict`. kube.shards does the Lease calls, runs the loops and drains.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from takoform_operator.core.shard_ring import (
    NOBODY,
    PLACEMENT,
    SLOTS,
    Claims,
    Liveness,
    slot_key,
    slots_claimed,
    view_of,
)

View = tuple[str, ...]
#: The slot of each slot key (core.shard_ring.slot_key): what Member.keys hold.
_SLOT_OF_KEY = {slot_key(slot): slot for slot in range(SLOTS)}


class Verdict(enum.Enum):
    """What a replica does with a watched CR."""

    #: Its own: the body goes to its loop.
    SERVE = "serve"
    #: The selector's but another replica's: no loop here (one it had is stopped); the body
    #: is kept for the view change that makes it ours.
    STOP = "stop"
    #: Not the selector's (any more): forgotten here.
    DROP = "drop"


@dataclass(frozen=True)
class SeenLease:
    """One member's Lease as a read found it."""

    name: str
    member: str
    version: str
    duration: float
    view: View
    #: How its member places CRs on the ring (core.shard_ring.PLACEMENT; "" when unsaid).
    placement: str = PLACEMENT


@dataclass(frozen=True)
class Plan:
    """The loops to start and to stop so that this replica serves what it may act on."""

    start: tuple[str, ...] = ()
    stop: tuple[str, ...] = ()


@dataclass
class Member:
    """This replica's state in the ring. `claims` changes only where the claim rule allows:
    after a read (`read`), when a view is begun (`head_for`) or a read failed (`restrict`)."""

    me: str
    #: The live members on our last read, ourselves included: the view we publish next.
    members: View = ()
    #: The view our Lease holds (None: not written yet).
    published: View | None = None
    #: Views we may have published or are draining towards: each restricts what we act on
    #: until a later write of ours lands.
    pending: list[View] = field(default_factory=list)
    claims: Claims = NOBODY
    liveness: Liveness = field(default_factory=Liveness)
    #: Our Lease could not be renewed in time, or we are stopping: we act on nothing.
    stopped: bool = False
    #: Live members that place CRs otherwise (a rolling upgrade): while one is, we act on
    #: nothing (it may act on any CR by its own placement; it counts ours as its claims).
    foreign: View = ()
    #: CRs this replica's watch delivers (uid -> the key of their slot), served or not.
    keys: dict[str, str] = field(default_factory=dict)
    #: CRs this replica has a loop for.
    serving: set[str] = field(default_factory=set)
    #: The claims the loops were last brought in line with (None: not yet).
    settled: Claims | None = None
    #: Bumped when a CR comes or goes: with the claims, what the unclaimed count depends on.
    _keys_version: int = 0
    _unclaimed: tuple[Claims, int, int] | None = None

    # -- the CRs --------------------------------------------------------------------------------

    def may_act(self, key: str) -> bool:
        return not self.stopped and self.claims.may_act(key)

    def admit(self, uid: str, key: str) -> Verdict:
        """A watch event of a CR of the selector: SERVE when this replica acts on it now,
        else STOP (no longer in `serving`)."""
        if uid not in self.keys:
            self._keys_version += 1
        self.keys[uid] = key
        if self.may_act(key):
            self.serving.add(uid)
            return Verdict.SERVE
        self.serving.discard(uid)
        return Verdict.STOP

    def drop(self, uid: str) -> bool:
        """The CR is gone or left the watch; True when this replica served it."""
        if self.keys.pop(uid, None) is not None:
            self._keys_version += 1
        served = uid in self.serving
        self.serving.discard(uid)
        return served

    def settle(self) -> Plan:
        """Serve what we may act on, and nothing else: the loops to start and to stop."""
        self.settled = self.claims
        start, stop = [], []
        mine_of: dict[str, bool] = {}  # the claim rule once per slot, not once per CR
        for uid, key in self.keys.items():
            mine = mine_of.get(key)
            if mine is None:
                mine = mine_of[key] = self.may_act(key)
            if mine and uid not in self.serving:
                start.append(uid)
            elif not mine and uid in self.serving:
                stop.append(uid)
        self.serving.update(start)
        self.serving.difference_update(stop)
        return Plan(tuple(start), tuple(stop))

    def unclaimed(self) -> int:
        """CRs of the selector that no live member may act on (none claims it, or two do)."""
        if self.foreign:
            return len(self.keys)
        known = self._unclaimed
        if known is None or known[0] != self.claims or known[1] != self._keys_version:
            # Asked after every round (a metric), while CRs come and go: the claim rule once per
            # slot, not once per CR (30,000 of them cost a tenth of a replica's CPU).
            per_slot = Counter(self.keys.values())
            count = sum(n for key, n in per_slot.items() if self.claims.unclaimed(key))
            known = self._unclaimed = (self.claims, self._keys_version, count)
        return known[2]

    def watched(self) -> frozenset[int]:
        """The slots whose CRs our watch must deliver: those we claim under a view our Lease
        holds, one we may have published, or the one we head for (the live members). Any CR we
        may act on is among them, and so is any we are about to take."""
        views = (*self.claims.mine, *self.pending, self.members or (self.me,))
        return slots_claimed(self.me, tuple(dict.fromkeys(views)))

    def unwatched(self, watched: frozenset[int]) -> list[str]:
        """The CRs we know of, serve not, and whose slot is not `watched`: the watch no longer
        delivers them (dropped by the caller)."""
        return [
            uid
            for uid, key in self.keys.items()
            if _SLOT_OF_KEY.get(key) not in watched and uid not in self.serving
        ]

    # -- the views ------------------------------------------------------------------------------

    def read(self, leases: Iterable[SeenLease], now: float) -> list[SeenLease]:
        """Liveness and the others' views from one read of every Lease of the ring; returns
        the Leases expired for more than another lease duration, to delete."""
        views: dict[str, View] = {}
        present, stale, foreign = [], [], []
        for lease in leases:
            if not lease.member or lease.member == self.me:
                continue
            present.append(lease.member)
            self.liveness.observe(lease.member, lease.version, now)
            if self.liveness.live(lease.member, lease.duration, now):
                views[lease.member] = lease.view
                if lease.placement != PLACEMENT:
                    foreign.append(lease.member)
            elif self.liveness.expired_for(lease.member, lease.duration, now) > lease.duration:
                stale.append(lease)
        self.liveness.forget_absent(present)
        self.foreign = view_of(foreign)
        self.members = view_of([self.me, *views])
        self.claims = Claims(self.me, self.claims.mine, views)
        self.restrict()
        return stale

    def restrict(self) -> None:
        """What we act on: claimed under our Lease's view and under every pending view; nothing
        before our Lease holds a view, nor while a live member places CRs otherwise."""
        mine = [*self.pending, self.published] if self.published is not None else []
        if self.foreign:
            mine = []
        self.claims = Claims(self.me, tuple(dict.fromkeys(mine)), self.claims.others)

    def next_view(self) -> View | None:
        """The view to head for, when it is new: the live members (ourselves at least)."""
        target = self.members or (self.me,)
        if target == self.published or (self.pending and self.pending[-1] == target):
            return None
        return target

    def head_for(self, target: View) -> None:
        """Act at once as if `target` were published: what it takes away from us stops here
        (the caller drains it before `to_write` offers `target`)."""
        self.pending.append(target)
        self.restrict()

    def to_write(self, drained: bool) -> View | None:
        """The view our next Lease write carries: the newest pending one once drained, else the
        one published (None: nothing to write yet)."""
        return self.pending[-1] if self.pending and drained else self.published

    def written(self, view: View) -> bool:
        """Our Lease now holds `view`; True when it is a newly published one."""
        new = view != self.published
        self.published = view
        if self.pending and view == self.pending[-1]:
            self.pending.clear()
        return new
