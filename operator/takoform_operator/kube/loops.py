"""Level-triggered reconcile loops: one per CR, woken by what the CR says, not by kopf's memory.

Each CR runs at most one reconcile at a time, in one of a bounded number of slots handed out
fairly across namespaces and hosts (kube.slots): a busy namespace or a slow host does not make
the CRs of the others wait behind it. A loop reconciles the CR's latest body, then
waits for the delay its outcome asked for, or for a kick, whichever comes first; while it waits
it holds an entry on a wheel of whole seconds (`_Wheel`: a poll comes up to a second late), or a
timer when its look is due within seconds, not a task. A watch event kicks the loop
at once only when it carries something a reconcile must act on (`Trigger`): a new generation,
an annotation the operator reads, a status that is missing or lags, a finalizer just added. The
echo of the operator's own write is dropped before it gets here (kube.echoes): the answer to
the write, which the loop holds from then on, is the same object.

Nothing here is persisted in the CR: after a restart every CR is reconciled once from the
initial listing, whatever kopf's annotations say. That first look is at once for a CR that needs
work, and spread over start_spread_seconds for one already Ready (core.backoff.FirstLooks),
or paced at the host budget's rate when one is set, so a restart or a failover is not a burst of
host reads. Each loop also notes whether its CR
changed since its last look (`take_change`): a look that changed nothing lets the next poll come
later (core.backoff.idle_delay). No kopf and no API calls in this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import heapq
import json
import logging
import math
import random
import sys
import zlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from takoform_operator.core.backoff import FirstLooks
from takoform_operator.kube.crs import log_fields
from takoform_operator.kube.freshness import older, resource_version
from takoform_operator.kube.slots import FairSlots

logger = logging.getLogger("takoform_operator")

#: When a step ends on an unexpected exception (a defect), its CR is looked at again this late.
FAILED_STEP_DELAY = 30.0

#: A look due this far away or further waits on the wheel (`_Wheel`, to the next whole tick);
#: a sooner one (a back-off, a held write) and a first look after a start get a timer each.
WHEEL_FROM_SECONDS = 5.0
#: The wheel's resolution: a look it holds comes up to this much later than asked.
WHEEL_TICK_SECONDS = 1.0

#: Distinct Trigger values kept for sharing (kube.loops.ReconcileLoops._trigger): generations.
COMMON_TRIGGERS = 256

#: What a loop runs: one reconcile of this body; returns seconds until the next one, or None to
#: stop the loop (the CR is being deleted: the delete handler takes over).
Run = Callable[[Mapping[str, Any]], Awaitable[float | None]]


@dataclass(frozen=True, slots=True)
class Trigger:
    """The facts of a CR body that call for a reconcile when they change."""

    generation: int
    #: The watched annotations' values, in their order; () when none is set.
    annotations: tuple[str, ...]
    observed_generation: int | None
    has_finalizer: bool
    deleting: bool

    @classmethod
    def of(cls, body: Mapping[str, Any], watched: tuple[str, ...], finalizer: str) -> Trigger:
        metadata = body.get("metadata") or {}
        annotations = metadata.get("annotations") or {}
        status = body.get("status") or {}
        observed = status.get("observedGeneration")
        values = tuple(str(annotations.get(k, "")) for k in watched)
        return cls(
            generation=int(metadata.get("generation") or 0),
            annotations=values if any(values) else (),
            observed_generation=int(observed) if observed is not None else None,
            has_finalizer=finalizer in (metadata.get("finalizers") or ()),
            deleting=metadata.get("deletionTimestamp") is not None,
        )


def _member(body: Mapping[str, Any], part: str, name: str) -> str | None:
    section = body.get(part)
    value = section.get(name) if isinstance(section, Mapping) else None
    return value if isinstance(value, str) and value else None


def namespace_of(body: Mapping[str, Any]) -> str:
    return _member(body, "metadata", "namespace") or ""


def host_named(body: Mapping[str, Any]) -> str | None:
    """The host a CR's requests go to, as far as its body says: the one its status recorded
    (it never changes once anything was sent), else its spec.hostRef; None: the default host.
    Whatever else the body holds there is ignored: this only chooses a queue."""
    return _member(body, "status", "host") or _member(body, "spec", "hostRef")


#: What most kept CR bodies hold (core.trim: the fields' names, and the values many CRs share),
#: in the API server's key order: the preset dictionary of a packed body, which then costs what
#: is particular to its CR. It decides only how small a body packs, never what it unpacks to.
_COMMON_BODY = json.dumps(
    {
        "apiVersion": "",
        "kind": "",
        "metadata": {
            "creationTimestamp": "",
            "deletionTimestamp": "",
            "finalizers": ["takoform.io/finalizer"],
            "generation": 1,
            "name": "",
            "namespace": "",
            "resourceVersion": "",
            "uid": "",
        },
        "spec": {
            "deletionPolicy": "Delete",
            "managementPolicy": "Full",
            "parameters": {},
            "space": "",
        },
        "status": {
            "attempt": 0,
            "conditions": [
                {
                    "lastTransitionTime": "",
                    "message": "host resource is up to date",
                    "observedGeneration": 1,
                    "reason": "Available",
                    "status": "True",
                    "type": "Ready",
                },
                {
                    "lastTransitionTime": "",
                    "message": "",
                    "observedGeneration": 1,
                    "reason": "Available",
                    "status": "False",
                    "type": "Reconciling",
                },
            ],
            "formRef": {"apiVersion": "", "definitionVersion": "", "kind": "", "schemaDigest": ""},
            "generation": "1",
            "host": "default",
            "name": "",
            "observedGeneration": 1,
            "outputs": {},
            "packageDigest": "sha256:",
            "pendingOperationId": "",
            "pendingOperationVerb": "",
            "remedies": [],
            "requested": {"name": "", "space": ""},
            "revision": "1",
            "space": "",
            "uid": "",
        },
    },
    separators=(",", ":"),
).encode()
#: Raw deflate with a 4 KiB window (a body is a few KB), primed with the dictionary once: each
#: body is packed and unpacked by a copy, which skips priming it again.
_WINDOW = -12
_PACKER = zlib.compressobj(6, zlib.DEFLATED, _WINDOW, 2, zlib.Z_DEFAULT_STRATEGY, _COMMON_BODY)
_UNPACKER = zlib.decompressobj(_WINDOW, _COMMON_BODY)


def pack(body: Mapping[str, Any]) -> bytes:
    """A body as compact JSON, deflated against the common body."""
    packer = _PACKER.copy()
    return packer.compress(json.dumps(body, separators=(",", ":")).encode()) + packer.flush()


def unpack(packed: bytes) -> Mapping[str, Any]:
    return cast(Mapping[str, Any], json.loads(_UNPACKER.copy().decompress(packed)))


class _Loop:
    """A CR's loop. Between two reconciles it holds no task, only an entry on the wheel (or a
    timer), and while it waits for a slot only an entry in the slots' queue: thousands of CRs
    idle or due at once cost an entry each, not a task, coroutines and a waiter each. Its body
    is held packed (`pack`: about 400 bytes for a Ready CR, against 1.5 KB as compact JSON and
    6.4 KB as dicts and strings, none of it tracked by the collector) and unpacked for each
    reconcile, tens of microseconds against milliseconds; what is read between reconciles
    (namespace, host, resourceVersion) is kept beside it."""

    __slots__ = (
        "changed", "due", "host", "kicked", "namespace", "packed", "queued", "task", "timer",
        "trigger", "uid", "version",
    )  # fmt: skip

    def __init__(self, uid: str, body: Mapping[str, Any], trigger: Trigger) -> None:
        self.uid = uid
        self.body = body
        self.trigger = trigger  # of the body it holds: a new one that differs wakes it
        self.task: asyncio.Task[None] | None = None  # its reconcile, running in a slot
        self.timer: asyncio.TimerHandle | None = None  # the next reconcile, when soon
        self.due: list[_Loop] | None = None  # the wheel's tick it waits in, when later
        self.kicked = False  # woken while its reconcile ran: queue again right after
        self.queued = False  # waiting for a slot (the run it waits for takes the latest body)
        self.changed = True  # since its last look: new to this process, a trigger, our write

    @property
    def body(self) -> Mapping[str, Any]:
        return unpack(self.packed)

    @body.setter
    def body(self, body: Mapping[str, Any]) -> None:
        self.packed = pack(body)
        # One copy of a namespace's or host's name for all their CRs, not one per decode.
        self.namespace = sys.intern(namespace_of(body))
        host = host_named(body)
        self.host = None if host is None else sys.intern(host)
        self.version = resource_version(body)


class _Wheel:
    """The loops' later looks, by tick: one timer for all of them and a list entry each, where a
    timer each was a handle, its arguments and a heap entry (about 200 bytes and three objects
    per idle CR, kept for as long as the CR is). A loop is due with the tick whose list it
    records (`_Loop.due`); an entry whose loop was woken, put on another tick or stopped
    meanwhile is passed over when its tick comes."""

    def __init__(
        self, fire: Callable[[_Loop], None], tick: float, context: Callable[[], Any]
    ) -> None:
        self._fire = fire
        self._tick = tick
        self._context = context
        self._due: dict[int, list[_Loop]] = {}
        self._ticks: list[int] = []  # the keys of _due, as a heap
        self._timer: asyncio.TimerHandle | None = None
        self._armed: int | None = None  # the tick the timer is set for

    def add(self, loop: _Loop, delay: float) -> None:
        tick = math.ceil((asyncio.get_running_loop().time() + delay) / self._tick)
        due = self._due.get(tick)
        if due is None:
            due = self._due[tick] = []
            heapq.heappush(self._ticks, tick)
        due.append(loop)
        loop.due = due
        if self._armed is None or tick < self._armed:
            self._arm(tick)

    def _arm(self, tick: int) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._armed = tick
        self._timer = asyncio.get_running_loop().call_at(
            tick * self._tick, self._turn, context=self._context()
        )

    def _turn(self) -> None:
        # Every tick up to the one armed for is due, whatever a clock's rounding says.
        armed, self._armed, self._timer = self._armed or 0, None, None
        now = math.floor(asyncio.get_running_loop().time() / self._tick)
        while self._ticks and self._ticks[0] <= max(armed, now):
            due = self._due.pop(heapq.heappop(self._ticks))
            for loop in due:
                if loop.due is due:
                    loop.due = None
                    self._fire(loop)
        if self._ticks:
            self._arm(self._ticks[0])

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = self._armed = None
        self._due.clear()
        self._ticks.clear()


class ReconcileLoops:
    """The loops of every CR this process manages, with a bound on concurrent reconciles."""

    def __init__(
        self,
        run: Run,
        *,
        concurrency: int,
        watched_annotations: tuple[str, ...],
        finalizer: str,
        failed_step_delay: float = FAILED_STEP_DELAY,
        per_host: int | None = None,
        fair: bool = True,
        default_host: Callable[[], str | None] = lambda: None,
        hosts: Callable[[], int] = lambda: 2,
        keep: Callable[[Mapping[str, Any]], Mapping[str, Any]] = dict,
        going_on: Callable[[str], bool] = lambda uid: False,
        start_spread: float = 0.0,
        start_rate: float | None = None,
        jitter: Callable[[], float] = random.random,
        wheel_from: float = WHEEL_FROM_SECONDS,
        wheel_tick: float = WHEEL_TICK_SECONDS,
    ) -> None:
        """`per_host`: the slots the CRs of one host may hold while `hosts()` (how many hosts
        there are) is above one; `default_host`: the host of a CR whose body names none;
        `keep`: what a loop holds of a body it is given (core.trim: only what the operator
        reads; thousands of CRs are held at once); `going_on`: whether a CR has work in
        progress (kube.cr_step.CrSteps.going_on): the looks its own looks ask for go before the
        first looks and polls queued in its namespace, so that in a backlog each CR goes on to
        Ready and lets go of what it holds meanwhile, rather than waiting behind every other
        CR's first look; `start_spread`: the window the first looks of Ready CRs are spread
        over, `jitter` their spread; `start_rate`: those first looks at this rate instead (the
        host budget's), None: as the spread draws them (core.backoff.FirstLooks);
        `wheel_from`, `wheel_tick`: which looks wait on the wheel, and its resolution
        (`_Wheel`)."""
        self._keep = keep
        self._going_on = going_on
        self._first_looks = FirstLooks(start_spread, start_rate, jitter, finalizer)
        self._run = run
        self._failed_step_delay = failed_step_delay
        self.slots = FairSlots(
            concurrency, per_host=per_host, fair=fair, shared=lambda: hosts() > 1
        )
        self._default_host = default_host
        self._watched = watched_annotations
        self._finalizer = finalizer
        self._loops: dict[str, _Loop] = {}
        #: One Trigger object for the many CRs whose triggers are equal (a Ready CR's at the
        #: same generation, no watched annotation set), rather than one each.
        self._common: dict[Trigger, Trigger] = {}
        # The context the reconciles run in: the first one a body arrives in (kopf's settings
        # and Event queue, which Events need). A task or timer keeps the context it starts in
        # for its whole life, and kopf runs each handler in a context holding that event's
        # cause (its body, patch, logger): taken afresh per event, a loop would keep its CR's
        # first event alive for as long as the CR is managed.
        self._context: contextvars.Context | None = None
        #: `_start`, bound once: each timer holds one of these, not a bound method of its own.
        self._start_later = self._start
        self._asked_later = functools.partial(self._start, asked=True)
        self._wheel_from = wheel_from
        self._wheel = _Wheel(
            lambda loop: self._start(loop.uid, loop, asked=True), wheel_tick, lambda: self._context
        )

    def __len__(self) -> int:
        return len(self._loops)

    def seen(self, uid: str, body: Mapping[str, Any]) -> None:
        """A watch event (or the listing at start-up) delivered this body. One older than the
        body the loop holds (its echo lags behind a write of ours) is dropped: a reconcile of it
        would decide from a status without what was just recorded."""
        if self._context is None:
            self._context = contextvars.copy_context()
        loop = self._loops.get(uid)
        if loop is not None and older(resource_version(body), loop.version):
            return
        body = self._keep(body)
        trigger = self._trigger(body)
        if loop is None:
            # One copy of its uid for every index by uid (kube.cr_step's, the binding book's).
            uid = sys.intern(uid)
            loop = self._loops[uid] = _Loop(uid, body, trigger)
            self._first_look(uid, loop, body)
            return
        changed, loop.trigger = loop.trigger != trigger, trigger
        loop.body = body
        if changed:
            loop.changed = True
            self._start(uid, loop)

    def _trigger(self, body: Mapping[str, Any]) -> Trigger:
        trigger = Trigger.of(body, self._watched, self._finalizer)
        if trigger.annotations:
            return trigger  # an annotation's value (a uid) is the CR's own
        if len(self._common) >= COMMON_TRIGGERS:
            self._common.clear()
        return self._common.setdefault(trigger, trigger)

    def _first_look(self, uid: str, loop: _Loop, body: Mapping[str, Any]) -> None:
        delay = self._first_looks.delay(body, asyncio.get_running_loop().time())
        if delay > 0:
            self._later(delay, uid, loop, exact=True)  # paced at the host budget's rate
        else:
            self._start(uid, loop)

    def wrote(
        self, uid: str, body: Mapping[str, Any], expected: Mapping[str, Any] | None = None
    ) -> None:
        """The operator itself wrote: `body` is the CR as the API server answered the write,
        `expected` what the write was to make of the body the loop held (None: `body`). The
        write's echo does not reach the loop (kube.echoes) and would not wake it. Where the
        answer differs from the expectation in what calls for a reconcile, someone else's
        write landed just before ours (a spec edit): that wakes the loop now, since its own
        watch event, older than the body now held, no longer will."""
        loop = self._loops.get(uid)
        if loop is None:
            return
        trigger = loop.trigger = self._trigger(body)
        loop.changed = True
        loop.body = self._keep(body)
        if expected is not None and Trigger.of(expected, self._watched, self._finalizer) != trigger:
            self._start(uid, loop)

    def take_change(self, uid: str) -> bool:
        """Whether CR `uid` changed since this was last asked (or is new to this process): a
        new generation or watched annotation, a write of the operator's own. Asked once per
        look, as its next look is chosen (kube.cr_step.CrSteps.next_look): the mark is taken."""
        loop = self._loops.get(uid)
        if loop is None:
            return True
        changed, loop.changed = loop.changed, False
        return changed

    def wake(self, uid: str) -> None:
        """Reconcile this CR now (something it depends on changed, e.g. an owner went away)."""
        loop = self._loops.get(uid)
        if loop is not None:
            self._start(uid, loop)

    def wake_namespace(self, namespace: str) -> None:
        """Reconcile every CR of this namespace now (its labels, hence its grants, changed)."""
        for uid, loop in list(self._loops.items()):
            if loop.namespace == namespace:
                self._start(uid, loop)

    def wake_all(self) -> None:
        """Reconcile every CR now (the tenancy policy changed)."""
        for uid, loop in list(self._loops.items()):
            self._start(uid, loop)

    def stop(self, uid: str) -> None:
        """The CR is gone or being deleted: its loop ends. A reconcile already running is not
        cancelled (the per-CR lock orders it before the delete handler's)."""
        loop = self._loops.pop(uid, None)
        if loop is not None:
            loop.due = None
            if loop.timer is not None:
                loop.timer.cancel()

    async def close(self) -> None:
        loops = list(self._loops.values())
        self._loops.clear()
        self._wheel.close()
        tasks = [loop.task for loop in loops if loop.task is not None]
        for loop in loops:
            if loop.timer is not None:
                loop.timer.cancel()
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def _start(self, uid: str, loop: _Loop, asked: bool = False) -> None:
        """Reconcile now: queue for a slot if not queued or running, else one more run right after
        the current one. `asked`: the look its last look asked for; with work in progress
        (`going_on`) it is served before the CRs queued in its namespace (kube.slots). A wake
        or a watch event is queued in turn: right after a look it can come before the host
        has settled the operation that look started."""
        if self._loops.get(uid) is not loop:
            return
        if loop.task is not None:
            loop.kicked = True
            return
        if loop.queued:
            return
        if loop.timer is not None:
            loop.timer.cancel()
            loop.timer = None
        loop.due = None
        loop.queued = True
        host = loop.host or self._default_host() or ""
        grant = functools.partial(self._granted, uid, loop, host)
        going_on = asked and self._going_on(uid)
        self.slots.request(loop.namespace, host, grant, going_on=going_on)

    def _granted(self, uid: str, loop: _Loop, host: str) -> bool:
        """Its turn came: the reconcile starts, holding the slot (False: the loop was stopped
        while queued, the slot goes to the next)."""
        loop.queued = False
        if self._loops.get(uid) is not loop:
            return False
        loop.kicked = False  # a wake while queued is served by this run
        loop.task = asyncio.get_running_loop().create_task(
            self._turn(uid, loop, host),
            name=f"reconcile {uid}",
            context=self._context.copy() if self._context is not None else None,
        )
        return True

    def _host_of(self, body: Mapping[str, Any]) -> str:
        return host_named(body) or self._default_host() or ""

    async def _step(self, uid: str, loop: _Loop) -> float | None:
        # The step handles its own failures; one escaping it is a defect, and a CR whose loop
        # ended on it would never be looked at again: log it and look again later.
        try:
            return await self._run(loop.body)
        except Exception:
            logger.exception(
                "reconcile loop of CR %s failed; looking again in %.0f s",
                uid,
                self._failed_step_delay,
                extra=log_fields(loop.body, self._host_of(loop.body)),
            )
            return self._failed_step_delay

    async def _turn(self, uid: str, loop: _Loop, host: str) -> None:
        """One reconcile in the slot it was granted, then a timer for the next look, or straight
        back into the queue when woken meanwhile."""
        try:
            delay = await self._step(uid, loop)
        finally:
            loop.task = None
            self.slots.release(host)
        if self._loops.get(uid) is not loop:
            return
        if delay is None:
            self._loops.pop(uid, None)
        elif loop.kicked:
            self._start(uid, loop)
        else:
            self._later(delay, uid, loop)

    def _later(self, delay: float, uid: str, loop: _Loop, exact: bool = False) -> None:
        """The loop's next look in `delay` seconds: on the wheel when that is far and not
        `exact`, else on a timer of its own. Both run in the loops' own context, not in a copy
        of the one that sets them (a reconcile's, or kopf's handler's holding the event):
        thousands of idle CRs then hold no context, nor what it holds, each."""
        if delay >= self._wheel_from and not exact:
            self._wheel.add(loop, delay)
            return
        start = self._start_later if exact else self._asked_later
        loop.timer = asyncio.get_running_loop().call_later(
            delay, start, uid, loop, context=self._context
        )

    def stop_many(self, uids: list[str]) -> list[asyncio.Task[None]]:
        """Stop these loops at once; returns their reconciles in flight, which go on to their
        end (await them to know that no reconcile of these CRs runs any more)."""
        tasks = []
        for uid in uids:
            loop = self._loops.get(uid)
            if loop is not None and loop.task is not None:
                tasks.append(loop.task)
            self.stop(uid)
        return tasks

    def body_of(self, uid: str) -> Mapping[str, Any] | None:
        """The latest body this CR's loop holds (its own writes included), if it has one."""
        loop = self._loops.get(uid)
        return loop.body if loop is not None else None
