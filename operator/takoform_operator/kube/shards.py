"""Active-active shards (TAKOFORM_SHARDING=hash): the membership loop around core.shard_round,
and the admission of each watched CR (one Verdict, with sharding or without).

Every replica keeps a Lease of its own, `<ring>-shard-<identity>` in the operator's namespace,
labelled `takoform.io/shard-ring=<ring>` so that the members find each other. Every retry
period it writes its Lease (a renewal carrying its published view in the annotation
`takoform.io/shard-view`), then lists the ring's Leases with a quorum read (never a cache),
and from that read decides which CRs it may act on (core.shard_ring, the claim rule). When the
live members differ from its published view it first stops and drains the CRs the new view
takes away from it, then publishes the new view. CRs that became its own get a loop at once,
from the last body the watch delivered, without waiting for their next watch event.

Each replica watches only the slots it may come to serve (core.shard_ring.watch_selector,
given to kopf as the label selector of the Form CRs, `steer`): the owner of a CR writes its
slot label with its finalizer (kube.cr_api), so a labelled CR reaches only the replicas that
may own its slot, and a new one every replica until then. When the watched slots change, the
watches end and kopf lists again (kube.json_seam.WatchRestarts). The bodies kept here are
those the watch delivers; a CR that leaves the watch (its label set, or a view change) is
dropped, never taken for a CR that is gone. A label that names the wrong slot is corrected by
the owner, or by the replica whose watch it reaches (the owner may not see it).

A replica whose Lease writes have failed for its renew deadline raises LostLease: the process
stops acting on everything at once and exits (the kubelet restarts it), before any other
replica may take its CRs. A replica that stops cleanly deletes its Lease, so the others take
its CRs at their next round. The Lease of a replica that died is deleted by the others once it
has been expired for another lease duration (conditioned on its resourceVersion).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from takoform_operator.core.binding import ClaimRef
from takoform_operator.core.shard_ring import (
    shard_key,
    slot_key,
    slot_label,
    slot_label_of,
    slot_of,
    watch_selector,
)
from takoform_operator.core.shard_round import Member, Verdict, View
from takoform_operator.kube.cr_step import FINALIZER
from takoform_operator.kube.crs import log_fields
from takoform_operator.kube.freshness import older, resource_version
from takoform_operator.kube.json_seam import WatchRestarts
from takoform_operator.kube.leader import LostLease
from takoform_operator.kube.loops import pack, unpack
from takoform_operator.kube.selector import LabelSelector
from takoform_operator.kube.shard_leases import ShardLeases

logger = logging.getLogger("takoform_operator.shards")
#: `ShardMembership.bodies` of a CR we serve: its loop holds the body.
IN_ITS_LOOP = b""
_T = TypeVar("_T")
#: Reads in a row that find the same members before the first watch (`steer`).
STEADY_READS = 3


class Admission(Protocol):
    """What the watch asks about each event of a CR."""

    def admit(self, uid: str, body: Mapping[str, Any]) -> Verdict: ...

    def left(self, body: Mapping[str, Any]) -> bool:
        """A DELETED event of a CR that only left this replica's watch (it is not gone): it
        is admitted as it now is."""
        ...

    def gone(self, uid: str) -> bool:
        """The CR went: True when this replica served it (it notes a binding left Lost)."""
        ...


@dataclass(frozen=True)
class BySelector:
    """Sharding off: the label selector alone decides, and this process serves every CR it
    matches."""

    selector: LabelSelector = field(default_factory=LabelSelector)

    def admit(self, uid: str, body: Mapping[str, Any]) -> Verdict:
        labels = (body.get("metadata") or {}).get("labels")
        return Verdict.SERVE if self.selector.matches(labels) else Verdict.DROP

    def left(self, body: Mapping[str, Any]) -> bool:
        return False

    def gone(self, uid: str) -> bool:
        return True


class Loops(Protocol):
    """What the membership needs of kube.loops.ReconcileLoops."""

    def seen(self, uid: str, body: Mapping[str, Any]) -> None: ...

    def stop_many(self, uids: list[str]) -> list[asyncio.Task[None]]: ...

    def body_of(self, uid: str) -> Mapping[str, Any] | None: ...


@dataclass
class ShardMembership:
    leases: ShardLeases
    clock: Callable[[], float] = time.monotonic
    #: Called after each round (metrics).
    observe: Callable[[ShardMembership], None] = lambda membership: None
    member: Member = field(init=False)
    #: Every CR the watch delivers that we keep, served or not: the last body the watch
    #: delivered of one we do not serve, packed as a loop packs it (kube.loops.pack: a body as
    #: dicts and strings is about fifteen times that), and IN_ITS_LOOP for one we serve, whose
    #: loop holds its body: one copy of each, not two.
    bodies: dict[str, bytes] = field(default_factory=dict)
    #: The slots our watch delivers (None: not chosen yet, every CR comes).
    watching: frozenset[int] | None = None
    #: Where the watch selector goes (`steer`): kopf's label selectors of the Form CRs
    #: (None: not steered, every CR comes), and the watches to end when it changes.
    _selectors: MutableMapping[Any, str] | None = None
    _resources: tuple[tuple[str, str], ...] = ()
    _restarts: WatchRestarts | None = None
    #: Set once STEADY_READS reads in a row found the same members, those our Lease publishes:
    #: what the first watch waits for (`steer`), so that a replica that starts beside others
    #: (a replica writes its first Lease a round or two after it starts) lists its share.
    steady: asyncio.Event = field(default_factory=asyncio.Event)
    _members_read: tuple[View, int] = ((), 0)
    #: Writes a CR's slot label (kube.cr_api.ApiCr.set_slot_label); None: never written here.
    relabel: Callable[[Mapping[str, Any], str], Awaitable[Mapping[str, Any]]] | None = None
    #: The resourceVersion our slot label write made of each CR: not written again before.
    _labelled: dict[str, str] = field(default_factory=dict)
    _writes: set[asyncio.Task[None]] = field(default_factory=set)
    #: Which CRs are ours to share out at all.
    selector: BySelector = field(default_factory=BySelector)
    loops: Loops | None = None
    #: Called with the body of each CR whose loop stopped here (its metrics go).
    forget: Callable[[Mapping[str, Any]], object] = lambda body: None
    #: Our Lease could not be renewed in time: we stopped acting (and leave the Lease alone).
    lost: bool = False
    #: Reconciles in flight of CRs whose loop we stopped: a view is published only after the
    #: ones that were running when it was chosen have ended.
    _in_flight: set[asyncio.Task[None]] = field(default_factory=set)
    _drain: asyncio.Task[None] | None = None
    #: Watch events kopf was not given (`passes_over`).
    passed_over: int = 0
    _context: contextvars.Context | None = None
    #: Called when the slots we watch changed: the TakoformBinding watch lists them again
    #: (kube.binding_watch; this membership is its book's Slots, kube.bindings).
    steer_bindings: Callable[[], None] = lambda: None

    def __post_init__(self) -> None:
        self.member = Member(self.leases.config.identity)

    def attach(
        self,
        selector: BySelector,
        loops: Loops,
        forget: Callable[[Mapping[str, Any]], object],
        relabel: Callable[[Mapping[str, Any], str], Awaitable[Mapping[str, Any]]] | None = None,
    ) -> ShardMembership:
        """Share out the CRs `selector` admits, serving ours with `loops` and correcting slot
        labels with `relabel`; the watch's admission."""
        self.selector, self.loops, self.forget, self.relabel = selector, loops, forget, relabel
        return self

    async def steer(
        self,
        selectors: MutableMapping[Any, str],
        resources: Iterable[tuple[str, str]],
        restarts: WatchRestarts,
    ) -> None:
        """Watch the Form CRs of `resources` ((group, plural) each) with our selector from now
        on: `selectors` is kopf's settings.watching.label_selectors, read at each list and
        watch; `restarts` ends a watch whose selector is not the current one. Returns once the
        ring looks steady (at most a lease duration): a replica starting alone watches every
        slot, and one starting beside others its share."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.leases.config.timing.lease_seconds):
                await self.steady.wait()
        self._selectors, self._resources, self._restarts = selectors, tuple(resources), restarts
        self.watching = None
        self._watch()

    def selector_text(self) -> str:
        """The label selector of our watch: the user's selector and the slots we watch."""
        slots = watch_selector(self.watching) if self.watching is not None else ""
        return ",".join(text for text in (self.selector.selector.text, slots) if text)

    def _watch(self) -> None:
        """Bring the watch in line with the slots we may come to serve; forget the CRs it no
        longer delivers."""
        watched = self.member.watched()
        if self._selectors is None or self._restarts is None or watched == self.watching:
            return
        self.watching = watched
        for uid in self.member.unwatched(watched):
            self.gone(uid)
        text = self.selector_text()
        for resource in self._resources:
            self._selectors[resource] = text
        self._restarts.change(text)
        self.steer_bindings()

    # -- kube.bindings.Slots: the bindings are shared out as their owners are ---------------------

    def slot_selector(self) -> str:
        """The slots part of our watch selector: the TakoformBindings we list and watch (those
        Bound to a CR of a slot we watch, and every binding without a slot label), and the CRs
        a start checks their owners against."""
        return watch_selector(self.watching) if self.watching is not None else ""

    def label(self, claim: ClaimRef) -> str:
        return str(self._slot_of_claim(claim))

    def serves(self, claim: ClaimRef) -> bool:
        return self.member.may_act(slot_key(self._slot_of_claim(claim)))

    def _slot_of_claim(self, claim: ClaimRef) -> int:
        return slot_of(shard_key(claim.namespace, claim.name, self.leases.config.key))

    # -- what the watch asks -------------------------------------------------------------------

    def slot_of(self, body: Mapping[str, Any]) -> int:
        metadata = body.get("metadata") or {}
        return slot_of(
            shard_key(
                str(metadata.get("namespace") or ""),
                str(metadata.get("name") or ""),
                self.leases.config.key,
            )
        )

    def watches(self, body: Mapping[str, Any]) -> bool:
        """Whether our watch delivers the CR (or the binding) as `body` is labelled."""
        slot = slot_label_of(slot_label(body))
        return self.watching is None or slot is None or slot in self.watching

    def _kept(self, body: Mapping[str, Any], slot: int) -> bool:
        """Whether we keep the body of a CR we do not serve: our watch delivers it and its slot
        is one we may come to serve. A new CR (not labelled yet) of another slot is not kept:
        should its slot come to us, our watch changes and lists it again."""
        return self.watches(body) and (self.watching is None or slot in self.watching)

    def admit(self, uid: str, body: Mapping[str, Any]) -> Verdict:
        """SERVE: this replica acts on the CR now (the caller gives the body to its loop).
        STOP: another replica's; a loop it had is stopped here. DROP: not the selector's. The
        body of a CR our watch delivers is kept, for the view change that makes it ours; one
        it no longer delivers is forgotten."""
        if self.selector.admit(uid, body) is Verdict.DROP:
            self.gone(uid)
            return Verdict.DROP
        if self._context is None:
            # kopf's context (its settings, for Events): the loops we start ourselves run in it
            # as those a watch event starts do.
            self._context = contextvars.copy_context()
        served = uid in self.member.serving
        slot = self.slot_of(body)
        verdict = self.member.admit(uid, slot_key(slot))
        serve = verdict is Verdict.SERVE
        kept, relabel = self._effects(body, slot, serve)
        if serve:
            self.bodies[uid] = IN_ITS_LOOP  # the caller gives the body to its loop
        elif kept or served:
            # Trimmed as it was decoded (kube.json_seam). Not packed when not kept: in a
            # backlog most new CRs a replica sees are another's.
            self.bodies[uid] = pack(dict(body))
        if serve and not served:
            _note("serving", body)
        elif not serve and served:
            self._stop([uid])
        if not kept:
            self.gone(uid)  # left our watch (its label written), or never ours to keep
        if relabel:
            self._write_label(uid, body, str(slot))
        elif slot_label(body) == str(slot) and self._labelled.get(uid):
            del self._labelled[uid]  # our write is seen: no older body comes after this one
        return verdict

    def _effects(self, body: Mapping[str, Any], slot: int, serve: bool) -> tuple[bool, bool]:
        """What admitting a CR of `slot` that we `serve` (or not) does beside its loop: whether
        we keep its body, and whether we write its slot label."""
        kept = serve or self._kept(body, slot)
        return kept, slot_label(body) != str(slot) and self._corrects(serve, body)

    def left(self, body: Mapping[str, Any]) -> bool:
        """A DELETED event of a CR whose slot label our watch does not deliver: it left the
        watch (a label written, by its owner or by hand), it is not gone."""
        return not self.watches(body)

    def passes_over(self, type: str, body: Mapping[str, Any]) -> bool:
        """Whether a watch event of a Form CR would change nothing here, so that kopf is not
        given it (kube.json_seam): the CR is unknown to this replica and stays so, neither
        served, nor kept, nor relabelled. In a backlog that is both events of another
        replica's new CR: its creation, and its leaving our watch once its owner labelled it.
        Should the ring give us its slot later, our watch changes and lists it again."""
        unconcerned = self._unconcerned(type, body)
        self.passed_over += unconcerned
        return unconcerned

    def _unconcerned(self, type: str, body: Mapping[str, Any]) -> bool:
        uid = str((body.get("metadata") or {}).get("uid") or "")
        if not uid or uid in self.member.keys or uid in self.bodies:
            return False
        if self.selector.admit(uid, body) is Verdict.DROP:
            return True
        if type == "DELETED" and not self.left(body):
            return True  # gone, and never ours
        slot = self.slot_of(body)
        serve = self.member.may_act(slot_key(slot))
        kept, relabel = self._effects(body, slot, serve)
        return not (serve or kept or relabel)

    def _corrects(self, serve: bool, body: Mapping[str, Any]) -> bool:
        """Whether we write the right slot label on a CR whose label is not it: its owner does
        (once it has our finalizer: until then the finalizer's write carries the label), and so
        does a replica that sees it labelled with another slot (its owner may not watch that
        slot)."""
        if self.relabel is None:
            return False
        if serve:
            return FINALIZER in ((body.get("metadata") or {}).get("finalizers") or ())
        return slot_label_of(slot_label(body)) is not None

    def _write_label(self, uid: str, body: Mapping[str, Any], slot: str) -> None:
        """One write of the CR's slot label, unless ours is in flight or landed after `body`."""
        written = self._labelled.get(uid)
        if written is not None and (written == "" or not older(written, resource_version(body))):
            return
        relabel = self.relabel
        assert relabel is not None
        self._labelled[uid] = ""  # in flight

        async def write() -> None:
            try:
                answer = await relabel(body, slot)
            except Exception as exc:
                self._labelled.pop(uid, None)
                logger.warning("slot label of %s not written: %s", _where(body), exc)
                return
            self._labelled[uid] = resource_version(answer)
            logger.info("slot label of %s set to %s", _where(body), slot)

        task = asyncio.get_running_loop().create_task(write())
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    def gone(self, uid: str) -> bool:
        """The CR is gone, or our watch no longer delivers it (the caller stops its loop)."""
        self.bodies.pop(uid, None)
        self._labelled.pop(uid, None)
        return self.member.drop(uid)

    def _stop(self, uids: Sequence[str]) -> None:
        for uid in uids:
            packed = self.bodies.get(uid)
            body = unpack(packed) if packed else None
            latest = self.loops.body_of(uid) if self.loops is not None else None
            if latest is not None and (
                body is None or not older(resource_version(latest), resource_version(body))
            ):
                # What our own writes made of it: should the CR come back to us before anyone
                # else writes it, its loop starts from there.
                body = latest
            if packed is not None:
                if body is None:
                    del self.bodies[uid]  # its loop had ended (let go): nothing to start from
                elif body is latest:
                    self.bodies[uid] = pack(body)
            if body is not None:
                _note("not serving", body)
                self.forget(body)
        if self.loops is not None:
            for task in self.loops.stop_many(list(uids)):
                self._in_flight.add(task)
                task.add_done_callback(self._in_flight.discard)

    def _apply(self) -> None:
        """Start the loops of CRs that became ours, stop those that are not ours any more."""
        if self.loops is None:
            return
        plan = self.member.settle()
        for uid in plan.start:
            packed = self.bodies.get(uid)
            if not packed:
                continue  # its loop ended, or it has one: nothing to start
            body = unpack(packed)
            self.bodies[uid] = IN_ITS_LOOP
            _note("serving", body)
            if self._context is not None:
                self._context.copy().run(self.loops.seen, uid, body)
            else:
                self.loops.seen(uid, body)
        if plan.stop:
            self._stop(plan.stop)

    # -- the loop ------------------------------------------------------------------------------

    async def _call(self, what: Awaitable[_T]) -> _T:
        # asyncio.timeout, not wait_for: in Python 3.11 wait_for returns the call's result
        # instead of raising when a cancellation (the deadline's) arrives as the call finished.
        async with asyncio.timeout(self.leases.config.timing.retry_seconds * 2):
            return await what

    def _begin(self, target: View) -> None:
        """Head for `target`: stop what it takes away from us at once, and drain it (the
        reconciles in flight end) in the background while the Lease keeps being renewed."""
        self.member.head_for(target)
        self._apply()
        self._watch()
        waiting = set(self._in_flight)
        previous = self._drain

        async def drain() -> None:
            if previous is not None:
                await previous
            if waiting:
                await asyncio.wait(waiting)

        self._drain = asyncio.create_task(drain(), name="shard drain")

    async def round(self) -> bool:
        """One round: write our Lease (a renewal, or a new view once drained), then read every
        Lease and act on that read. True when our write landed."""
        member = self.member
        target = member.next_view()
        if target is not None:
            self._begin(target)
        view = member.to_write(drained=self._drain is None or self._drain.done())
        wrote = False
        if view is not None:
            # Before the write: no other replica can have read it earlier (`sent` in the log).
            sent = time.time()
            try:
                await self._call(self.leases.write(view))
                wrote = True
                if member.written(view):
                    logger.info("shard view published: %s", ", ".join(view),
                                extra={"sent": _log_time(sent)})  # fmt: skip
            except Exception as exc:
                logger.warning("shard lease %s: %s", self.leases.config.lease_name, exc)
        try:
            leases = await self._call(self.leases.read())
        except Exception as exc:
            logger.warning("shard leases of ring %s: %s", self.leases.config.ring, exc)
            member.restrict()
            self._apply()
            self._watch()
            return wrote
        stale = member.read(leases, self.clock())
        same = member.members == self._members_read[0] and member.published == member.members
        self._members_read = (member.members, self._members_read[1] + 1 if same else 0)
        if self._members_read[1] + 1 >= STEADY_READS:
            self.steady.set()
        if stale:
            await self.leases.delete_expired(stale)
        if member.claims != member.settled:
            # Unchanged claims: the watch keeps the loops in line (admit) between changes.
            self._apply()
        self._watch()
        self.observe(self)
        return wrote

    async def run(self) -> None:
        """Rounds every retry period until cancelled; raises LostLease (after stopping every
        loop) when our Lease could not be written for the renew deadline."""
        c = self.leases.config
        logger.info("shard member %s of ring %s (lease %s/%s)", c.identity, c.ring,
                    c.namespace, c.lease_name)  # fmt: skip
        # A first read, so that the first view we publish names the members alive already.
        try:
            self.member.read(await self._call(self.leases.read()), self.clock())
        except Exception as exc:
            logger.warning("shard leases of ring %s: %s", c.ring, exc)
        task = asyncio.current_task()
        loop = asyncio.get_running_loop()
        lost = False

        def deadline() -> None:
            # Not renewed for the renew deadline: stop acting now, whatever the round waits on.
            nonlocal lost
            lost = self.lost = True
            self.stop_acting()
            if task is not None:
                task.cancel()

        watchdog = loop.call_later(c.timing.renew_deadline_seconds, deadline)
        try:
            while True:
                began = loop.time()
                wrote = await self.round()
                # Whatever a round awaits may drop a cancellation (as asyncio.wait_for did in
                # Python 3.11 when it landed just as the call finished): the deadline's, or a
                # stop asked for.
                if lost:
                    break
                if task is not None and task.cancelling():
                    raise asyncio.CancelledError
                if wrote:
                    watchdog.cancel()
                    watchdog = loop.call_at(began + c.timing.renew_deadline_seconds, deadline)
                await asyncio.sleep(max(0.0, c.timing.retry_seconds - (loop.time() - began)))
        except asyncio.CancelledError:
            if not lost:
                raise
        finally:
            watchdog.cancel()
            if self._drain is not None:
                self._drain.cancel()
        logger.error("shard lease %s/%s not renewed in %.0fs: stopped acting", c.namespace,
                     c.lease_name, c.timing.renew_deadline_seconds)  # fmt: skip
        raise LostLease(c.lease_name)

    def stop_acting(self) -> None:
        """Stop every loop at once (reconciles in flight end with the process)."""
        self.member.stopped = True
        self._apply()


def _where(body: Mapping[str, Any]) -> str:
    metadata = body.get("metadata") or {}
    return f"{metadata.get('namespace')}/{metadata.get('name')}"


def _note(what: str, body: Mapping[str, Any]) -> None:
    """One debug line per CR whose loop starts or stops here (which replica served what)."""
    if logger.isEnabledFor(logging.DEBUG):
        metadata = body.get("metadata") or {}
        logger.debug("%s %s/%s", what, metadata.get("namespace"), metadata.get("name"),
                     extra=log_fields(body))  # fmt: skip


def _log_time(seconds: float) -> str:
    """As the JSON log writes a line's own time (milliseconds, truncated), so the two compare."""
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat(timespec="milliseconds")
