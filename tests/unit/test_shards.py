"""kube.shards without an API server to reach: a member whose Lease was never written acts on
nothing, and stops at its renew deadline; a published view says when its write was sent; the
verdict on a CR the selector does not match, with sharding and without."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import kopf
import pytest

from takoform_operator.core.shard_ring import (
    SLOT_LABEL,
    SLOTS,
    owner,
    shard_key,
    slot_key,
    slot_of,
    slots_claimed,
    watch_selector,
)
from takoform_operator.core.shard_round import SeenLease, Verdict
from takoform_operator.kube.api import ApiConnection, KubeApi
from takoform_operator.kube.cr_step import FINALIZER
from takoform_operator.kube.json_seam import WatchRestarts
from takoform_operator.kube.leader import LeaseTiming, LostLease
from takoform_operator.kube.loops import ReconcileLoops, unpack
from takoform_operator.kube.selector import parse_selector
from takoform_operator.kube.shard_leases import ShardConfig, ShardLeases, lease_name
from takoform_operator.kube.shards import IN_ITS_LOOP, BySelector, ShardMembership

#: Nothing listens on port 1.
UNREACHABLE = ApiConnection(server="http://127.0.0.1:1")


def test_lease_names_are_dns_names() -> None:
    assert lease_name("takoform", "Pod_1.x") == "takoform-shard-pod-1.x"
    assert len(lease_name("r", "a" * 300)) == 253


def test_a_member_that_never_wrote_its_lease_acts_on_nothing() -> None:
    """Its view is not published until the write lands: until then (here: never, nothing
    listens on port 1) it serves no CR, and it gives up at its renew deadline."""
    started: list[str] = []

    async def run(body: Any) -> float:
        started.append(body["metadata"]["name"])
        return 60.0

    async def scenario() -> ShardMembership:
        member = ShardMembership(ShardLeases(
            ShardConfig(namespace="ops", ring="r", identity="m", timing=LeaseTiming(3, 1, 0.2)),
            KubeApi(lambda: UNREACHABLE),
        ))  # fmt: skip
        loops = ReconcileLoops(run, concurrency=2, watched_annotations=(), finalizer="f")
        member.attach(BySelector(), loops, lambda body: None)
        for i in range(5):
            body = {"metadata": {"namespace": "ops", "name": f"cr-{i}", "uid": f"u{i}"}}
            assert member.admit(f"u{i}", body) is Verdict.STOP
        with pytest.raises(LostLease):
            await member.run()
        await loops.close()
        await member.leases.api.close()
        return member

    member = asyncio.run(scenario())
    assert member.lost and member.member.published is None
    assert not member.member.serving and started == []


def test_a_member_stops_at_its_deadline_even_when_a_round_swallows_the_cancellation() -> None:
    """The deadline stops the member by cancelling its task; in Python 3.11,
    `asyncio.wait_for` (each Lease call of a round) returns the call's result instead of
    raising when the cancellation lands just as the call finished, so that one cancellation can
    be lost. The member must still stop and raise LostLease, not go on with rounds that act on
    nothing while its Lease, once writable again, tells the others it serves its share."""
    rounds: list[bool] = []

    class Swallowing(ShardMembership):
        async def round(self) -> bool:
            never = asyncio.Event()
            if rounds:  # a later round: a cancellation goes through, as it mostly does
                await never.wait()
            # The deadline's cancellation lands in the first round and is dropped, as wait_for
            # dropped it when the call finished at that moment.
            with contextlib.suppress(asyncio.CancelledError):
                await never.wait()
            rounds.append(self.lost)
            return False  # the call that finished then had failed: nothing listens on port 1

    async def scenario() -> Swallowing:
        member = Swallowing(ShardLeases(
            ShardConfig(namespace="ops", ring="r", identity="m", timing=LeaseTiming(3, 0.2, 0.05)),
            KubeApi(lambda: UNREACHABLE),
        ))  # fmt: skip
        running = asyncio.create_task(member.run())
        # Bounded only so that the defect fails the test instead of hanging it.
        done, _ = await asyncio.wait({running}, timeout=10)
        assert done, f"still running after the deadline, {len(rounds)} rounds since"
        with pytest.raises(LostLease):
            running.result()
        await member.leases.api.close()
        return member

    member = asyncio.run(scenario())
    assert member.lost and rounds == [True], rounds


def test_a_published_view_says_when_its_write_was_sent(caplog: pytest.LogCaptureFixture) -> None:
    """The `shard view published` line comes after the write landed, on a busy event loop
    long after another replica may have read it; its `sent` field is no later than the write
    itself reached the API (what tests/e2e/test_sharding.py orders the replicas by)."""
    reached: list[float] = []

    class Api:
        """Creates the Lease and lists none."""

        async def request(self, method: str, path: str, body: Any = None, **_: Any) -> Any:
            await asyncio.sleep(0)  # a request yields to the loop, where the drain runs
            if method == "POST":
                reached.append(time.time())
                return {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}
            assert method == "GET", method
            return {"items": []}

    member = ShardMembership(ShardLeases(
        ShardConfig(namespace="ops", ring="r", identity="m", timing=LeaseTiming(3, 1, 0.2)),
        Api(),  # type: ignore[arg-type]
    ))  # fmt: skip
    member.member.members = ("m",)

    async def rounds() -> None:
        # The first round begins the view and drains towards it; a later one publishes it.
        while member.member.published is None:
            await member.round()

    with caplog.at_level(logging.INFO, logger="takoform_operator.shards"):
        asyncio.run(asyncio.wait_for(rounds(), 10))
    [line] = [r for r in caplog.records if r.getMessage() == "shard view published: m"]
    sent = dt.datetime.fromisoformat(line.sent).timestamp()  # type: ignore[attr-defined]
    assert sent <= reached[0] <= line.created


AB = ("a", "b")


def body_labelled(**labels: str) -> dict[str, Any]:
    return {"metadata": {"namespace": "ops", "name": "cr", "uid": "u", "labels": labels}}


@pytest.mark.parametrize(
    ("labels", "verdict"),
    [({"shard": "a"}, Verdict.SERVE), ({"shard": "b"}, Verdict.DROP), ({}, Verdict.DROP)],
)
def test_without_sharding_the_selector_alone_decides(
    labels: dict[str, str], verdict: Verdict
) -> None:
    admission = BySelector(parse_selector("shard=a"))
    assert admission.admit("u", body_labelled(**labels)) is verdict
    assert admission.gone("u")  # every process notes a binding left Lost


def test_with_sharding_a_cr_the_selector_leaves_is_forgotten() -> None:
    """Only CRs of the selector are shared out: one relabelled away is dropped, its body with
    it, and counts as unclaimed no more."""
    member = ShardMembership(ShardLeases(ShardConfig(namespace="ops", ring="r", identity="m"),
                                         KubeApi(lambda: UNREACHABLE)))  # fmt: skip
    member.selector = BySelector(parse_selector("shard=a"))
    assert member.admit("u", body_labelled(shard="a")) is Verdict.STOP  # nothing published yet
    assert member.member.unclaimed() == 1 and "u" in member.bodies
    assert member.admit("u", body_labelled(shard="b")) is Verdict.DROP
    assert member.member.unclaimed() == 0 and member.bodies == {}
    assert not member.gone("u")  # never served here


def _settled(identity: str, view: tuple[str, ...], **others: tuple[str, ...]) -> ShardMembership:
    """A membership whose Lease holds `view`, after a read that found `others` live."""
    found = ShardMembership(ShardLeases(ShardConfig(namespace="ops", ring="r", identity=identity),
                                        KubeApi(lambda: UNREACHABLE)))  # fmt: skip
    found.member.written(view)
    found.member.read(
        [SeenLease(f"r-shard-{m}", m, "1", 10.0, seen) for m, seen in others.items()], now=0.0
    )
    found.member.settle()
    return found


def _named(slot_owner: str, view: tuple[str, ...]) -> tuple[str, int]:
    """A CR name in namespace ops whose slot `slot_owner` owns under `view`, and its slot."""
    for i in range(1000):
        slot = slot_of(shard_key("ops", f"cr-{i}"))
        if owner(slot_key(slot), view) == slot_owner:
            return f"cr-{i}", slot
    raise AssertionError("no such name")


def _cr(name: str, uid: str, version: str = "5", **labels: str) -> kopf.Body:
    """A CR as kopf's watch handler is given it."""
    metadata = {"namespace": "ops", "name": name, "uid": uid, "labels": labels,
                "resourceVersion": version, "finalizers": [FINALIZER]}  # fmt: skip
    return kopf.Body({"metadata": metadata})


def test_the_watch_selector_follows_the_slots_a_member_may_serve() -> None:
    """kopf's label selector of each Form CR resource is the user's selector and the slots
    not watched; a watch opened with another one ends."""
    membership = _settled("a", AB, b=AB)
    membership.selector = BySelector(parse_selector("shard=a"))
    selectors: dict[Any, str] = {}
    restarts = WatchRestarts([("storage.takoform.io", "v1", "buckets")])
    membership.steady.set()  # a read found the members its Lease publishes, twice
    asyncio.run(membership.steer(selectors, [("storage.takoform.io", "buckets")], restarts))
    expected = "shard=a," + watch_selector(slots_claimed("a", (AB,)))
    assert selectors == {("storage.takoform.io", "buckets"): expected}
    assert restarts.selector == expected


def test_a_cr_labelled_out_of_the_watch_is_dropped_but_one_of_ours_stays() -> None:
    """A DELETED event whose CR is labelled with a slot we do not watch is a CR that left the
    watch, not one that is gone: another replica's is forgotten, ours is still served."""
    membership = _settled("a", AB, b=AB)
    membership.steady.set()
    asyncio.run(membership.steer({}, [], WatchRestarts([])))
    assert membership.watching is not None
    theirs, their_slot = _named("b", AB)
    mine, my_slot = _named("a", AB)
    assert membership.admit("t", _cr(theirs, "t")) is Verdict.STOP  # new: every watch has it
    assert "t" not in membership.bodies  # of a slot we do not watch: not kept
    labelled = _cr(theirs, "t", **{SLOT_LABEL: str(their_slot)})
    assert membership.left(labelled)
    assert membership.admit("t", labelled) is Verdict.STOP and "t" not in membership.bodies
    handing = _settled("a", ("a",), b=AB)  # b joined: a still claims every slot
    handing.steady.set()
    asyncio.run(handing.steer({}, [], WatchRestarts([])))
    assert handing.admit("t", _cr(theirs, "t")) is Verdict.STOP  # claimed by both for now
    assert "t" in handing.bodies  # of a slot a may serve: kept
    assert membership.admit("m", _cr(mine, "m", **{SLOT_LABEL: str(my_slot)})) is Verdict.SERVE
    moved = _cr(mine, "m", **{SLOT_LABEL: str(their_slot)})  # edited by hand
    assert membership.left(moved)
    assert membership.admit("m", moved) is Verdict.SERVE and "m" in membership.member.serving


@pytest.mark.parametrize(
    ("whose", "label", "finalized", "written"),
    [
        ("a", None, True, True),  # ours, finalized before labels existed
        ("a", "wrong-slot", True, True),  # ours, edited by hand
        ("a", "anything", True, True),
        ("a", None, False, False),  # ours, new: the finalizer's write carries the label
        ("a", "right", True, False),
        ("b", "wrong-slot", True, True),  # theirs, labelled with a slot b may not watch
        ("b", None, True, False),  # theirs, unlabelled: b sees it too and writes it
        ("b", "anything", True, False),
    ],
)
def test_who_puts_a_slot_label_right(
    whose: str, label: str | None, finalized: bool, written: bool
) -> None:
    membership = _settled("a", AB, b=AB)
    name, slot = _named(whose, AB)
    value = {"wrong-slot": str((slot + 1) % SLOTS), "right": str(slot)}.get(label or "", label)
    body = _cr(name, "u", **({SLOT_LABEL: value} if value is not None else {}))
    if not finalized:
        body["metadata"]["finalizers"] = []

    async def scenario() -> None:
        membership.admit("u", body)
        membership.admit("u", body)  # the same version again: written once
        await asyncio.gather(*membership._writes)
        membership.admit("u", body)  # older than our write: not again

    assert _labels_written(membership, scenario) == ([str(slot)] if written else [])


def test_a_served_cr_has_one_body_its_loops_and_comes_back_from_the_latest() -> None:
    """A replica keeps no second copy of a body its loop holds. Given away by a view change, a
    CR keeps the body its loop held last (our own write's answer), and should it come back, its
    loop starts from that body."""
    membership = _settled("a", ("a",))  # alone: every slot is ours
    name, _ = _named("b", AB)  # b's once b joins
    forgotten: list[Any] = []

    def version(body: Any) -> str:
        return str(body["metadata"]["resourceVersion"])

    async def look(found: Any) -> float:
        return 60.0

    async def scenario() -> None:
        loops = ReconcileLoops(look, concurrency=1, watched_annotations=(), finalizer=FINALIZER)
        membership.attach(BySelector(), loops, forgotten.append)
        body = _cr(name, "u")
        assert membership.admit("u", body) is Verdict.SERVE
        loops.seen("u", body)  # as the watch handler does
        assert membership.bodies == {"u": IN_ITS_LOOP}
        loops.wrote("u", _cr(name, "u", "9"))  # our own write's answer
        membership.member.head_for(AB)  # b joined: its slots leave us at once
        membership._apply()
        assert loops.body_of("u") is None and "u" not in membership.member.serving
        assert version(unpack(membership.bodies["u"])) == "9"
        assert [version(gone) for gone in forgotten] == ["9"]
        membership.member.pending.clear()  # b went again before we published AB
        membership.member.restrict()
        membership._apply()
        back = loops.body_of("u")
        assert back is not None and version(back) == "9"
        assert membership.bodies == {"u": IN_ITS_LOOP}
        await loops.close()

    asyncio.run(scenario())


def test_a_slot_label_seen_written_keeps_no_guard() -> None:
    """Once the watch delivers the label our write set, the guard against writing it twice
    goes (a replica keeps nothing per CR for it), and a later edit by hand is put right."""
    membership = _settled("a", AB, b=AB)
    name, slot = _named("a", AB)

    async def scenario() -> None:
        membership.admit("u", _cr(name, "u"))
        await asyncio.gather(*membership._writes)
        membership.admit("u", _cr(name, "u", "6", **{SLOT_LABEL: str(slot)}))  # our write
        assert membership._labelled == {}
        membership.admit("u", _cr(name, "u", "7", **{SLOT_LABEL: str((slot + 1) % SLOTS)}))

    assert _labels_written(membership, scenario) == [str(slot), str(slot)]


def _labels_written(
    membership: ShardMembership,
    scenario: Callable[[], Awaitable[None]],
    selector: BySelector | None = None,
) -> list[str]:
    """The slot labels `membership` writes while `scenario` runs (each write answered as
    resourceVersion 6), its CRs of `selector` served by loops that look every minute."""
    calls: list[str] = []

    async def relabel(found: Any, value: str) -> dict[str, Any]:
        calls.append(value)
        return {"metadata": {"resourceVersion": "6"}}

    async def look(found: Any) -> float:
        return 60.0

    async def run() -> None:
        loops = ReconcileLoops(look, concurrency=1, watched_annotations=(), finalizer=FINALIZER)
        membership.attach(selector or BySelector(), loops, lambda body: None, relabel)
        await scenario()
        await asyncio.gather(*membership._writes)
        await loops.close()

    asyncio.run(run())
    return calls


@pytest.mark.parametrize(
    ("type", "whose", "label", "selected"),
    [
        ("ADDED", "b", None, True),  # another replica's new CR: every watch has it
        ("DELETED", "b", "right", True),  # it left our watch, labelled by its owner
        ("DELETED", "b", None, True),  # gone before anyone labelled it
        ("ADDED", "b", None, False),  # not the selector's
        ("ADDED", "a", None, True),  # ours
        ("DELETED", "a", "theirs", True),  # ours, labelled out of our watch by hand
        ("MODIFIED", "b", "ours", True),  # theirs, labelled with a slot we watch: put right
    ],
)
def test_only_an_event_that_changes_nothing_is_passed_over(
    type: str, whose: str, label: str | None, selected: bool
) -> None:
    """kopf is not given an event of a CR this replica does not know when handling it would
    change nothing: no loop, no body kept, no label written. A CR it knows is always given."""
    name, slot = _named(whose, AB)
    _, our_slot = _named("a", AB)
    _, their_slot = _named("b", AB)
    value = {"right": slot, "ours": our_slot, "theirs": their_slot}.get(label or "")
    labels = {SLOT_LABEL: str(value)} if value is not None else {}
    body = _cr(name, "u", **labels, **({"shard": "a"} if selected else {}))

    membership = _settled("a", AB, b=AB)
    membership.steady.set()
    asyncio.run(membership.steer({}, [], WatchRestarts([])))

    def state() -> Any:
        return dict(membership.bodies), dict(membership.member.keys), set(membership.member.serving)

    before = state()
    passed: list[bool] = []

    async def scenario() -> None:
        passed.append(membership.passes_over(type, body))
        # As the watch handler does (kube.handlers.register).
        if type == "DELETED" and not membership.left(body):
            membership.gone("u")
        else:
            membership.admit("u", body)

    written = _labels_written(membership, scenario, BySelector(parse_selector("shard=a")))
    assert passed == [state() == before and not written]
    known = "u" in membership.member.keys
    assert not (known and membership.passes_over(type, body)), "a CR it knows is always given"
    if (type, whose, label) in (("ADDED", "b", None), ("DELETED", "b", "right")):
        assert passed == [True], "both backlog events of another replica's CR"
