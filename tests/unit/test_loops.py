"""The level-triggered reconcile loops: what wakes a CR's loop, and what does not."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from takoform_operator.kube.loops import ReconcileLoops, Trigger, pack, unpack

FINALIZER = "takoform.io/finalizer"
ACCEPT = "takoform.io/accept-uid"
TIMEOUT = 5.0


def _body(generation: int = 1, **changes: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"uid": "u-1", "generation": generation, "finalizers": [FINALIZER]}
    metadata.update(changes.pop("metadata", {}))
    return {"metadata": metadata, **changes}


def _trigger(body: Mapping[str, Any]) -> Trigger:
    return Trigger.of(body, (ACCEPT,), FINALIZER)


def test_the_echo_of_our_own_status_write_is_not_a_trigger() -> None:
    written = _body(status={"observedGeneration": 1, "uid": "h-1"})
    echoed = _body(status={"observedGeneration": 1, "uid": "h-1", "revision": "7"})
    assert _trigger(written) == _trigger(echoed)


def test_what_a_reconcile_must_act_on_is_a_trigger() -> None:
    base = _body(status={"observedGeneration": 1})
    changed = {
        "new generation": _body(2, status={"observedGeneration": 1}),
        "accept-uid set": _body(metadata={"annotations": {ACCEPT: "h-2"}}, status=base["status"]),
        "status missing (restored from a backup)": _body(),
        "finalizer added": {**base, "metadata": {**base["metadata"], "finalizers": []}},
        "deletion": _body(metadata={"deletionTimestamp": "2026-11-30T00:00:00Z"}, status={}),
    }
    for why, body in changed.items():
        assert _trigger(body) != _trigger(base), why


class _Recorder:
    """A loop body that records each run and returns the delay it is told to."""

    def __init__(self, delay: float | None = 3600.0) -> None:
        self.runs: list[Mapping[str, Any]] = []
        self.delay = delay
        self.ran = asyncio.Event()

    async def __call__(self, body: Mapping[str, Any]) -> float | None:
        self.runs.append(body)
        self.ran.set()
        return self.delay

    async def next_run(self) -> None:
        await asyncio.wait_for(self.ran.wait(), TIMEOUT)
        self.ran.clear()


def _loops(recorder: _Recorder) -> ReconcileLoops:
    return ReconcileLoops(
        recorder, concurrency=2, watched_annotations=(ACCEPT,), finalizer=FINALIZER
    )


async def test_first_sight_runs_once_and_an_unchanged_event_does_not_run_again() -> None:
    recorder = _Recorder()
    loops = _loops(recorder)
    loops.seen("u-1", _body(status={"observedGeneration": 1}))
    await recorder.next_run()
    loops.seen("u-1", _body(status={"observedGeneration": 1, "revision": "9"}))
    loops.seen("u-1", _body(2, status={"observedGeneration": 1}))  # a spec edit
    await recorder.next_run()
    assert [run["metadata"]["generation"] for run in recorder.runs] == [1, 2]
    await loops.close()


async def test_our_own_write_does_not_wake_the_loop_but_the_next_edit_does() -> None:
    recorder = _Recorder()
    loops = _loops(recorder)
    loops.seen("u-1", _body())
    await recorder.next_run()
    written = _body(status={"observedGeneration": 1})
    loops.wrote("u-1", written)
    loops.seen("u-1", written)  # the echo
    loops.seen("u-1", _body(metadata={"annotations": {ACCEPT: "h-2"}}, status=written["status"]))
    await recorder.next_run()
    assert len(recorder.runs) == 2
    assert recorder.runs[1]["metadata"]["annotations"] == {ACCEPT: "h-2"}
    await loops.close()


async def test_the_delay_of_the_outcome_brings_the_next_run_and_wake_cuts_it_short() -> None:
    recorder = _Recorder(delay=0.01)
    loops = _loops(recorder)
    loops.seen("u-1", _body())
    await recorder.next_run()
    await recorder.next_run()  # requeued by its own short delay, no event needed
    recorder.delay = 3600.0
    await recorder.next_run()
    loops.wake("u-1")  # e.g. the owner of its identity went away
    await recorder.next_run()
    await loops.close()


async def test_a_loop_that_returns_none_ends_and_a_stopped_loop_never_runs_again() -> None:
    recorder = _Recorder(delay=None)
    loops = _loops(recorder)
    loops.seen("u-1", _body())
    await recorder.next_run()
    assert len(loops) == 0, "the loop ended (the CR is being deleted)"
    recorder.delay = 3600.0
    loops.seen("u-2", {"metadata": {"uid": "u-2", "generation": 1}})
    await recorder.next_run()
    loops.stop("u-2")
    assert len(loops) == 0
    loops.wake("u-2")  # nothing left to wake
    await loops.close()
    assert len(recorder.runs) == 2


async def test_a_loop_stopped_while_queued_never_runs_and_its_turn_goes_to_the_next() -> None:
    gate = asyncio.Event()
    ran: list[str] = []

    async def run(body: Mapping[str, Any]) -> float:
        ran.append(body["metadata"]["uid"])
        await gate.wait()
        return 3600.0

    before = asyncio.all_tasks()
    loops = ReconcileLoops(run, concurrency=2, watched_annotations=(), finalizer=FINALIZER)
    for uid in ("u-0", "u-1", "u-2", "u-3"):
        loops.seen(uid, _body(metadata={"uid": uid}))
    assert loops.slots.free == 0 and loops.slots.waiting() == 2
    loops.stop("u-2")  # the CR went away while queued
    gate.set()

    async def settled() -> None:  # every reconcile ended, the ones granted meanwhile too
        while running := asyncio.all_tasks() - before - {asyncio.current_task()}:
            await asyncio.wait(running)

    await asyncio.wait_for(settled(), TIMEOUT)
    assert loops.slots.free == 2 and loops.slots.waiting() == 0
    assert ran == ["u-0", "u-1", "u-3"]
    await loops.close()


async def test_a_namespace_change_wakes_only_the_loops_of_that_namespace() -> None:
    # A namespace relabelled or deleted can change only its own CRs' grants: the CRs of every
    # other namespace must not be woken (each wake is a host read for a Ready CR).
    recorder = _Recorder()
    loops = _loops(recorder)
    for uid, namespace in (("u-a", "team-a"), ("u-b", "team-b")):
        loops.seen(uid, _body(metadata={"uid": uid, "namespace": namespace}))
        await recorder.next_run()
    loops.wake_namespace("team-a")
    await recorder.next_run()
    loops.wake("u-b")
    await recorder.next_run()
    namespaces = [run["metadata"]["namespace"] for run in recorder.runs]
    assert sorted(namespaces[:2]) == ["team-a", "team-b"]
    assert namespaces[2:] == ["team-a", "team-b"]
    await loops.close()


async def test_a_watch_event_older_than_our_own_write_neither_wakes_nor_replaces_it() -> None:
    # The watch can lag behind the operator's own writes (a new leader's watch, a busy API
    # server): the event of the finalizer it added arrives after it recorded the target. Acting
    # on that event would decide from a status without the target, and send the create again.
    recorder = _Recorder()
    loops = _loops(recorder)
    loops.seen("u-1", _body(metadata={"resourceVersion": "10", "finalizers": []}))
    await recorder.next_run()
    recorded = {"observedGeneration": 1, "space": "team-a", "name": "logs"}
    written = _body(metadata={"resourceVersion": "12"}, status=recorded)
    loops.wrote("u-1", written)
    loops.seen("u-1", _body(metadata={"resourceVersion": "11"}))  # the finalizer's event, late
    loops.wake("u-1")  # e.g. its pending operation's next look
    await recorder.next_run()
    assert recorder.runs[1].get("status") == recorded, "decided from the stale body"
    loops.seen("u-1", {**written, "status": {**recorded, "revision": "3"}})  # the echo
    newer = _body(2, metadata={"resourceVersion": "13"}, status=recorded)  # a spec edit
    loops.seen("u-1", newer)
    await recorder.next_run()
    assert recorder.runs[2]["metadata"]["generation"] == 2
    assert len(recorder.runs) == 3
    await loops.close()


async def test_queued_and_idle_loops_hold_no_task_and_still_come_back_on_time_or_when_woken() -> (
    None
):
    # Thousands of CRs are due at once, or settled: each must cost a queue entry or a timer, not
    # a task; only the reconciles running in a slot hold one.
    recorder = _Recorder()
    loops = _loops(recorder)
    before = asyncio.all_tasks()
    for i in range(50):
        loops.seen(f"u-{i}", _body(metadata={"uid": f"u-{i}"}))
    assert len(asyncio.all_tasks() - before) == loops.slots.capacity == 2
    assert loops.slots.waiting() == 48
    while len(recorder.runs) < 50:  # every CR runs once, in turn, and goes idle
        await recorder.next_run()
    last = asyncio.all_tasks() - before  # the last run, returning
    if last:
        await asyncio.wait(last, timeout=TIMEOUT)
    assert asyncio.all_tasks() == before
    assert loops.slots.waiting() == 0 and loops.slots.free == 2
    recorder.delay = 0.01
    loops.wake("u-7")
    await recorder.next_run()
    await recorder.next_run()  # its own short delay brought it back, from a timer
    assert {run["metadata"]["uid"] for run in recorder.runs[50:]} == {"u-7"}
    await loops.close()


async def test_a_step_that_raises_does_not_end_the_loop() -> None:
    """A defect in a step is logged and the CR is looked at again, not dropped for good."""
    recorder = _Recorder(delay=0.01)
    failures = [RuntimeError("a defect")]

    async def step(body: Mapping[str, Any]) -> float | None:
        if failures:
            recorder.ran.set()
            raise failures.pop()
        return await recorder(body)

    loops = ReconcileLoops(
        step, concurrency=2, watched_annotations=(ACCEPT,), finalizer=FINALIZER,
        failed_step_delay=0.01,
    )  # fmt: skip
    loops.seen("u-1", _body())
    await recorder.next_run()  # the step that raised
    await recorder.next_run()  # looked at again after it
    assert len(recorder.runs) == 1
    await loops.close()


class _Held:
    """A loop body that holds each run until the test lets it end; records who got a slot."""

    def __init__(self, soon: frozenset[str] = frozenset()) -> None:
        self.started: asyncio.Queue[str] = asyncio.Queue()
        self.running: dict[str, asyncio.Event] = {}
        self.soon = set(soon)  # CRs whose first run asks for another 0.01 s later

    async def __call__(self, body: Mapping[str, Any]) -> float | None:
        uid = str(body["metadata"]["uid"])
        done = self.running[uid] = asyncio.Event()
        self.started.put_nowait(uid)
        await done.wait()
        del self.running[uid]
        if uid in self.soon:
            self.soon.remove(uid)
            return 0.01
        return 3600.0

    async def next_start(self) -> str:
        return await asyncio.wait_for(self.started.get(), TIMEOUT)

    def finish(self, uid: str) -> None:
        self.running[uid].set()


def _cr(uid: str, namespace: str, host: str | None = None) -> dict[str, Any]:
    body = _body(metadata={"uid": uid, "namespace": namespace})
    if host is not None:
        body["spec"] = {"hostRef": host}
    return body


async def test_a_quiet_namespace_is_not_queued_behind_a_busy_one() -> None:
    # 300 busy CRs of one namespace all want a reconcile (a churn, or the listing at start-up);
    # a quiet namespace's CR seen after them gets the next slot that frees, not the 299th.
    held = _Held()
    loops = ReconcileLoops(held, concurrency=2, watched_annotations=(ACCEPT,), finalizer=FINALIZER)
    for i in range(300):
        loops.seen(f"busy-{i}", _cr(f"busy-{i}", "busy"))
    assert {await held.next_start(), await held.next_start()} == {"busy-0", "busy-1"}
    loops.seen("quiet", _cr("quiet", "quiet"))
    held.finish("busy-0")
    assert await held.next_start() == "quiet"
    await loops.close()


async def _first_look_started(n: int) -> tuple[_Held, ReconcileLoops]:
    """`n` CRs of one namespace queued, one slot, cr-0's first look running: once it ends, cr-0
    has work in progress and asks for its next look 0.01 s later."""
    held = _Held(soon=frozenset({"cr-0"}))
    loops = ReconcileLoops(
        held, concurrency=1, watched_annotations=(ACCEPT,), finalizer=FINALIZER,
        going_on=lambda uid: uid == "cr-0" and uid not in held.soon,
    )  # fmt: skip
    for i in range(n):
        loops.seen(f"cr-{i}", _cr(f"cr-{i}", "busy"))
    assert await held.next_start() == "cr-0"
    return held, loops


async def test_a_cr_with_work_in_progress_goes_before_the_first_looks_queued() -> None:
    # A backlog: 300 CRs of one namespace queued for their first look. The first CR's look
    # accepted an operation and asks to be looked at again in 0.01 s, to record it (the held
    # write) and see it settle: that look is served before the 297 first looks still queued,
    # not behind them, so each CR goes on to Ready and lets go of what it holds in passing.
    held, loops = await _first_look_started(300)
    queued = asyncio.Event()
    request = loops.slots.request

    def spy(namespace: str, host: str, grant: Any, **how: Any) -> None:
        request(namespace, host, grant, **how)
        queued.set()

    loops.slots.request = spy  # type: ignore[method-assign]
    held.finish("cr-0")
    assert await held.next_start() == "cr-1"
    await asyncio.wait_for(queued.wait(), TIMEOUT)  # cr-0's timer came: it queues again
    held.finish("cr-1")
    assert await held.next_start() == "cr-0"
    held.finish("cr-0")
    assert await held.next_start() == "cr-2"
    await loops.close()


async def test_a_wake_right_after_a_look_is_queued_in_turn_even_with_work_in_progress() -> None:
    # A wake (or a watch event: the echo of its own write read before the write's answer) that
    # comes right after a look would bring the next look before the host settled the operation
    # that look started: that look is served in turn, not ahead of the first looks queued.
    held, loops = await _first_look_started(5)
    held.finish("cr-0")
    assert await held.next_start() == "cr-1"
    loops.wake("cr-0")  # before its own look, 0.01 s later, came
    for i in range(2, 5):
        held.finish(f"cr-{i - 1}")
        assert await held.next_start() == f"cr-{i}"
    held.finish("cr-4")
    assert await held.next_start() == "cr-0"
    await loops.close()


async def test_a_slow_host_holds_at_most_its_cap_of_slots() -> None:
    # The CRs of a host whose requests hang keep their slots; with a cap of 3 of 4 slots the
    # CRs of another host (here the default one) are still reconciled, one after the other.
    held = _Held()
    loops = ReconcileLoops(
        held, concurrency=4, per_host=3, watched_annotations=(ACCEPT,), finalizer=FINALIZER,
        default_host=lambda: "fast",
    )  # fmt: skip
    for i in range(50):
        loops.seen(f"slow-{i}", _cr(f"slow-{i}", f"ns-{i % 5}", host="slow"))
    assert {await held.next_start() for _ in range(3)} == {"slow-0", "slow-1", "slow-2"}
    for i in range(5):
        loops.seen(f"fast-{i}", _cr(f"fast-{i}", f"ns-{i % 5}"))  # no hostRef: the default
        assert await held.next_start() == f"fast-{i}"
        assert loops.slots.held("slow") == 3 and loops.slots.held("fast") == 1
        held.finish(f"fast-{i}")
    await loops.close()


async def test_an_edit_that_landed_just_before_our_write_wakes_the_loop() -> None:
    # The echo of our write is dropped (kube.echoes), and the edit's own event, older than the
    # answer the loop now holds, is dropped too: the answer is where the edit shows.
    recorder = _Recorder()
    loops = _loops(recorder)
    loops.seen("u-1", _body(metadata={"resourceVersion": "10"}))
    await recorder.next_run()
    recorded = {"observedGeneration": 1}
    expected = _body(metadata={"resourceVersion": "12"}, status=recorded)
    answer = _body(2, metadata={"resourceVersion": "12"}, status=recorded)  # edited at 11
    loops.wrote("u-1", answer, expected)
    await recorder.next_run()
    assert recorder.runs[1]["metadata"]["generation"] == 2
    loops.seen("u-1", _body(2, metadata={"resourceVersion": "11"}))  # the edit's event, late
    assert len(recorder.runs) == 2
    await loops.close()


async def test_a_loop_keeps_nothing_of_the_watch_event_that_started_it() -> None:
    """kopf runs a handler in a context holding that event's cause (its body, patch and logger),
    and an asyncio task or timer keeps the context it was started in for its whole life. A
    loop started from the handler's context would keep every CR's first event alive for as
    long as the CR is managed; only the first context the loops see (kopf's settings and Event
    queue, which the reconciles need) is kept."""
    import contextvars
    import gc
    import weakref

    class Cause:
        pass

    cause_var: contextvars.ContextVar[Cause] = contextvars.ContextVar("cause_var")
    recorder = _Recorder()
    loops = _loops(recorder)

    def handle(uid: str) -> weakref.ref[Cause]:
        cause = Cause()
        cause_var.set(cause)  # as kopf does, in the copied context of one handler call
        loops.seen(uid, {**_body(), "metadata": {**_body()["metadata"], "uid": uid}})
        return weakref.ref(cause)

    contextvars.copy_context().run(handle, "u-first")
    await recorder.next_run()
    later = contextvars.copy_context().run(handle, "u-later")
    await recorder.next_run()
    turn = loops._loops["u-later"].task  # its turn ends in a timer for the next look
    if turn is not None:
        await asyncio.wait_for(turn, TIMEOUT)
    gc.collect()
    assert later() is None, "the loop of u-later keeps its first watch event's cause alive"
    await loops.close()


def test_a_ready_cr_packs_to_what_is_its_own() -> None:
    # A Ready Bucket as the API server answers the operator's status write, trimmed: 1.5 KB of
    # compact JSON, of which most is what every CR holds (field names, common values).
    digest = "sha256:" + "9c8caa2ad1af7c283aed03ab4289c727f40d98fc69c8c6f5a2ac024a129309b5"
    name, uid = "census-2000-1796406210-00000", "76a8e4f5-9f03-4040-be9d-fa1d9b61bdfc"
    ready = {"lastTransitionTime": "2026-12-04T17:44:42Z", "message": "host resource is up to "
             "date", "observedGeneration": 1, "reason": "Available", "status": "True",
             "type": "Ready"}  # fmt: skip
    body = {
        "apiVersion": "storage.takoform.io/v1",
        "kind": "Bucket",
        "metadata": {
            "creationTimestamp": "2026-12-04T17:44:14Z",
            "finalizers": [FINALIZER],
            "generation": 1,
            "name": name,
            "namespace": "census-2000-1796406210",
            "resourceVersion": "2325",
            "uid": uid,
        },
        "spec": {
            "deletionPolicy": "Delete",
            "managementPolicy": "Full",
            "space": "bench",
            "parameters": {"region": "eu-west-1", "sizeGiB": 10},
        },
        "status": {
            "attempt": 0,
            "conditions": [
                ready,
                {**ready, "message": "", "status": "False", "type": "Reconciling"},
            ],
            "formRef": {
                "apiVersion": "storage.takoform.io/v1",
                "definitionVersion": "1.1.0",
                "kind": "Bucket",
                "schemaDigest": digest,
            },
            "generation": "1",
            "host": "default",
            "name": name,
            "observedGeneration": 1,
            "outputs": {
                "arn": f"tko:storage.takoform.io:bench:bucket/{name}",
                "endpoint": f"https://{name}.storage.takoform.example",
                "versioningStatus": "Disabled",
            },
            "packageDigest": digest.replace("9c8c", "4bf7"),
            "requested": {"name": name, "space": "bench"},
            "revision": "1",
            "space": "bench",
            "uid": uid.replace("76a8", "e715"),
        },
    }
    packed = pack(body)
    assert unpack(packed) == body
    assert len(json.dumps(body, separators=(",", ":"))) > 1400 and len(packed) < 500


async def test_a_loop_holds_its_body_packed_and_gives_it_back_whole() -> None:
    recorder = _Recorder()
    loops = _loops(recorder)
    body = _body(
        metadata={"namespace": "team", "resourceVersion": "12"},
        spec={"hostRef": "h", "parameters": {"size": 1.5, "name": "é\ud800", "deep": [[{}]]}},
        status={"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True"}]},
    )
    loops.seen("u-1", body)
    await recorder.next_run()
    assert recorder.runs == [body] and loops.body_of("u-1") == body
    held = loops._loops["u-1"]
    assert isinstance(held.packed, bytes) and len(held.packed) < 400
    assert (held.namespace, held.host, held.version) == ("team", "h", "12")
    loops.seen("u-1", {**body, "metadata": {**body["metadata"], "resourceVersion": "11"}})
    assert loops.body_of("u-1") == body, "an older body is dropped"
    await loops.close()


def _ready(uid: str, generation: int = 1) -> dict[str, Any]:
    """A CR whose status says Ready for its generation."""
    ready = [{"type": "Ready", "status": "True", "reason": "Available"}]
    status = {"observedGeneration": 1, "conditions": ready}
    return _body(generation, metadata={"uid": uid}, status=status)


def _spreading(recorder: _Recorder, draw: float, spread: float = 1.0) -> ReconcileLoops:
    return ReconcileLoops(
        recorder,
        concurrency=2,
        watched_annotations=(ACCEPT,),
        finalizer=FINALIZER,
        start_spread=spread,
        jitter=lambda: draw,
    )


async def test_a_ready_cr_is_first_looked_at_later_and_one_that_needs_work_at_once() -> None:
    # Listed at start, the Ready CR comes first: without the spread both would run at once
    # (two slots), the Ready one first.
    recorder = _Recorder()
    loops = _spreading(recorder, draw=0.05)  # its first look 0.05 s away
    loops.seen("u-ready", _ready("u-ready"))
    loops.seen("u-new", _body(metadata={"uid": "u-new"}))
    await recorder.next_run()
    await recorder.next_run()
    assert [run["metadata"]["uid"] for run in recorder.runs] == ["u-new", "u-ready"]
    await loops.close()


async def test_a_spec_change_within_the_spread_is_acted_on_at_once() -> None:
    recorder = _Recorder()
    loops = _spreading(recorder, draw=0.5, spread=3600.0)  # its first look 30 minutes away
    loops.seen("u-1", _ready("u-1"))
    loops.seen("u-1", _ready("u-1", generation=2))
    await recorder.next_run()
    assert [run["metadata"]["generation"] for run in recorder.runs] == [2]
    await loops.close()


async def test_a_change_is_taken_once_by_the_look_after_it() -> None:
    recorder = _Recorder()
    loops = _loops(recorder)
    loops.seen("u-1", _body(status={"observedGeneration": 1}))
    await recorder.next_run()
    assert loops.take_change("u-1"), "new to this process"
    assert not loops.take_change("u-1"), "taken"
    loops.seen("u-1", _body(metadata={"labels": {"team": "a"}}, status={"observedGeneration": 1}))
    assert not loops.take_change("u-1"), "nothing a reconcile acts on"
    loops.wrote("u-1", _body(status={"observedGeneration": 1, "revision": "2"}))
    assert loops.take_change("u-1"), "a write of ours"
    loops.seen("u-1", _body(metadata={"annotations": {ACCEPT: "h-2"}}))
    assert loops.take_change("u-1"), "a watched annotation"
    assert loops.take_change("u-unknown"), "no loop: nothing says it did not change"
    await loops.close()


async def test_ready_crs_at_one_generation_share_one_trigger_and_their_namespace() -> None:
    # What thousands of CRs hold alike is held once: their Trigger (no watched annotation
    # set), and their namespace's name, however many decodes made a copy of it.
    loops = _loops(_Recorder())
    for uid in ("u-1", "u-2"):
        body = _ready(uid)
        body["metadata"]["namespace"] = "".join(["te", "am"])  # a string of its own, as decoded
        loops.seen(uid, body)
    first, second = loops._loops["u-1"], loops._loops["u-2"]
    assert first.trigger is second.trigger
    assert first.namespace is second.namespace
    accepting = _ready("u-3")
    accepting["metadata"]["annotations"] = {ACCEPT: "h-9"}
    loops.seen("u-3", accepting)
    assert loops._loops["u-3"].trigger != first.trigger
    await loops.close()


def _wheeled(run: Callable[[Mapping[str, Any]], Awaitable[float | None]]) -> ReconcileLoops:
    """Loops whose looks 0.02 s away or further wait on the wheel, in ticks of 0.01 s."""
    return ReconcileLoops(
        run,
        concurrency=2,
        watched_annotations=(ACCEPT,),
        finalizer=FINALIZER,
        wheel_from=0.02,
        wheel_tick=0.01,
    )


async def test_a_look_far_enough_away_waits_on_the_wheel_and_comes_at_its_tick() -> None:
    recorder = _Recorder(delay=0.05)
    loops = _wheeled(recorder)
    loops.seen("u-1", _body())
    await recorder.next_run()
    await _settled(loops, "u-1")
    held = loops._loops["u-1"]
    assert held.due is not None and held.timer is None, "on the wheel, no timer of its own"
    await recorder.next_run()  # brought by the wheel, no event needed
    await loops.close()


async def test_a_loop_woken_before_its_tick_is_not_run_again_by_the_entry_it_left() -> None:
    delays = {"u-1": [0.05, 3600.0], "u-2": [0.1, 3600.0]}
    ran: list[str] = []
    witness = asyncio.Event()

    async def run(body: Mapping[str, Any]) -> float:
        uid = body["metadata"]["uid"]
        ran.append(uid)
        if ran.count("u-2") == 2:
            witness.set()
        return delays[uid].pop(0) if len(delays[uid]) > 1 else delays[uid][0]

    loops = _wheeled(run)
    loops.seen("u-1", _body())
    await _settled(loops, "u-1")  # on the wheel, due in 0.05 s
    loops.wake("u-1")  # e.g. a binding it waits on changed: it runs now, next in an hour
    await _settled(loops, "u-1")
    loops.seen("u-2", _body(metadata={"uid": "u-2"}))  # its second run 0.1 s later, on the wheel
    await asyncio.wait_for(witness.wait(), TIMEOUT)  # every earlier tick has come by now
    assert ran.count("u-1") == 2
    await loops.close()


async def _settled(loops: ReconcileLoops, uid: str) -> None:
    """Until the CR's reconcile, granted a slot at once, has ended and chosen its next look."""
    loop = loops._loops[uid]
    assert not loop.queued
    if loop.task is not None:
        await loop.task
