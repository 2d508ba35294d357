"""Fair reconcile slots (kube.slots): a busy namespace does not make a quiet one wait behind its
queue, and a slow host cannot hold more slots than its cap.

Deterministic: each fake reconcile holds its slot until the test releases it, and the test
awaits the next holder's arrival; no clock and no sleep. The bound is counted in slot turns: how
many other reconciles are handed a slot between a CR's request and its own turn."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable

import pytest

from takoform_operator.kube.slots import FairSlots

TIMEOUT = 5.0


class Holders:
    """Fake reconciles: each takes a slot, says so, and holds it until released."""

    def __init__(self, slots: FairSlots) -> None:
        self.slots = slots
        self.entered: asyncio.Queue[str] = asyncio.Queue()
        self.holding: deque[str] = deque()  # in the order they got their slot
        self.hosts: dict[str, str] = {}
        self._release: dict[str, asyncio.Event] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.peak: dict[str, int] = {}

    def request(self, name: str, namespace: str, host: str = "h") -> None:
        release = self._release[name] = asyncio.Event()
        self.hosts[name] = host

        async def hold() -> None:
            async with self.slots.slot(namespace, host):
                held = self.slots.held(host)
                self.peak[host] = max(self.peak.get(host, 0), held)
                self.holding.append(name)
                self.entered.put_nowait(name)
                await release.wait()
            self.holding.remove(name)

        self.tasks[name] = asyncio.get_running_loop().create_task(hold())

    async def settle(self) -> None:
        """Every request made so far has run up to its slot (held, or queued for one)."""
        marker = asyncio.Event()
        asyncio.get_running_loop().call_soon(marker.set)  # runs after the tasks' first steps
        await marker.wait()

    async def next(self) -> str:
        return await asyncio.wait_for(self.entered.get(), TIMEOUT)

    def release(self, name: str) -> None:
        self._release[name].set()

    def release_oldest(self, host: str | None = None) -> str:
        name = next(n for n in self.holding if host is None or self.hosts[n] == host)
        self.release(name)
        return name

    async def close(self) -> None:
        for task in self.tasks.values():
            task.cancel()
        await asyncio.gather(*self.tasks.values(), return_exceptions=True)


async def _turns_before_quiet(fair: bool, busy: int, capacity: int) -> int:
    """A namespace with `busy` CRs queued, then a quiet namespace's one CR: how many busy CRs
    get a slot before it."""
    slots = FairSlots(capacity, fair=fair)
    holders = Holders(slots)
    for i in range(busy):
        holders.request(f"busy-{i}", "busy")
    await holders.settle()
    assert [await holders.next() for _ in range(capacity)] == [f"busy-{i}" for i in range(capacity)]
    holders.request("quiet", "quiet")
    await holders.settle()
    assert slots.waiting() == busy - capacity + 1
    ahead = 0
    while True:
        holders.release_oldest()
        if await holders.next() == "quiet":
            break
        ahead += 1
    await holders.close()
    return ahead


async def test_a_quiet_namespace_takes_the_next_free_slot_whatever_a_busy_one_has_queued() -> None:
    # 1,000 busy CRs in one namespace, 16 slots: the quiet namespace's CR is the very next one
    # handed a slot (its wait is one slot's turnover: the shortest of the 16 running reconciles).
    # In FIFO order it would wait behind the 984 queued before it: 62 rounds of 16 reconciles.
    assert await _turns_before_quiet(fair=True, busy=1000, capacity=16) == 0
    assert await _turns_before_quiet(fair=False, busy=1000, capacity=16) == 984


async def test_busy_namespaces_share_the_slots_round_robin() -> None:
    slots = FairSlots(1)
    holders = Holders(slots)
    holders.request("first", "c")
    await holders.settle()
    assert await holders.next() == "first"
    for i in range(3):
        holders.request(f"a-{i}", "a")
    for i in range(3):
        holders.request(f"b-{i}", "b")
    await holders.settle()
    order = []
    for _ in range(6):
        holders.release_oldest()
        order.append(await holders.next())
    assert order == ["a-0", "b-0", "a-1", "b-1", "a-2", "b-2"]
    await holders.close()


async def test_a_namespace_that_empties_its_queue_does_not_jump_ahead_again_at_once() -> None:
    # fq_codel's rule: a namespace served leaves the round only when its turn comes with
    # nothing queued, so asking again right after its turn does not make it "new" again: a
    # namespace that really was quiet still goes first.
    slots = FairSlots(1)
    holders = Holders(slots)
    holders.request("a-0", "a")
    await holders.settle()
    assert await holders.next() == "a-0"
    holders.request("b-0", "b")
    holders.request("b-1", "b")
    await holders.settle()
    holders.release("a-0")
    assert await holders.next() == "b-0"
    holders.request("a-1", "a")  # a's turn has not come round since it was served
    holders.request("c-0", "c")  # c was quiet
    await holders.settle()
    order = []
    for _ in range(3):
        holders.release_oldest()
        order.append(await holders.next())
    assert order == ["c-0", "a-1", "b-1"]
    await holders.close()


async def test_a_slow_host_never_holds_more_than_its_cap_and_other_hosts_keep_a_slot() -> None:
    # 16 slots, at most 12 per host: 200 CRs of a host that never answers (their reconciles
    # never end) over 20 namespaces take 12 slots and no more; the CRs of another host still
    # get slots at once, namespace after namespace.
    slots = FairSlots(16, per_host=12)
    holders = Holders(slots)
    for i in range(200):
        holders.request(f"slow-{i}", f"ns-{i % 20}", "slow")
    await holders.settle()
    first = {await holders.next() for _ in range(12)}
    assert len(first) == 12
    assert slots.held("slow") == 12 and slots.free == 4
    for i in range(4):
        holders.request(f"fast-{i}", f"ns-{i}", "fast")
        assert await holders.next() == f"fast-{i}"  # at once, no slot released first
    # The fast host's slots turn over; the slow host's CRs, queued all along, are passed over.
    for i in range(4, 40):
        holders.request(f"fast-{i}", f"ns-{i % 20}", "fast")
        await holders.settle()
        holders.release_oldest("fast")
        assert await holders.next() == f"fast-{i}"
    assert holders.peak["slow"] == 12
    # A slot freed with nothing but the capped host waiting stays free for the next host.
    holders.release_oldest("fast")
    await holders.settle()
    assert slots.free == 1 and slots.held("slow") == 12
    # The slow host gives a slot back: one of its own queued CRs takes it.
    holders.release_oldest("slow")
    assert (await holders.next()).startswith("slow-")
    assert slots.held("slow") == 12 and holders.peak["slow"] == 12
    await holders.close()


async def test_with_a_single_host_the_cap_keeps_no_slot_free_for_nobody() -> None:
    # One host is all the operator knows: it may take every slot. Once a second host is known
    # the cap binds again for the next slots handed out.
    hosts = ["only"]
    slots = FairSlots(4, per_host=3, shared=lambda: len(hosts) > 1)
    holders = Holders(slots)
    for i in range(10):
        holders.request(f"only-{i}", f"ns-{i % 2}", "only")
    await holders.settle()
    assert len({await holders.next() for _ in range(4)}) == 4
    assert slots.held("only") == 4 and slots.free == 0
    hosts.append("second")
    holders.release_oldest()
    await holders.settle()
    assert slots.held("only") == 3 and slots.free == 1, "the freed slot waits for the other host"
    holders.request("second-0", "ns-0", "second")
    assert await holders.next() == "second-0"
    await holders.close()


async def test_within_a_namespace_a_capped_host_does_not_block_its_other_hosts() -> None:
    slots = FairSlots(3, per_host=2)
    holders = Holders(slots)
    for i in range(5):
        holders.request(f"slow-{i}", "team", "slow")
    holders.request("fast-0", "team", "fast")
    await holders.settle()
    assert sorted([await holders.next() for _ in range(3)]) == ["fast-0", "slow-0", "slow-1"]
    await holders.close()


@pytest.mark.parametrize("fair", [True, False])
async def test_cancelled_requests_leave_no_slot_taken_and_no_waiter_behind(fair: bool) -> None:
    slots = FairSlots(2, per_host=1, fair=fair)
    holders = Holders(slots)
    for i in range(6):
        holders.request(f"r-{i}", f"ns-{i % 2}", f"h-{i % 3}")
    await holders.settle()
    holders.tasks["r-4"].cancel()  # queued
    holders.tasks["r-5"].cancel()
    running = [await holders.next(), await holders.next()]
    for name in running:
        holders.release(name)
    served = {await holders.next(), await holders.next()}
    assert not served & {"r-4", "r-5"}
    await holders.close()
    assert slots.free == 2 and slots.waiting() == 0 and slots.held("h-0") == 0


async def test_a_slot_granted_to_a_request_cancelled_before_it_ran_is_given_back() -> None:
    slots = FairSlots(1)
    holders = Holders(slots)
    async with slots.slot("a", "h"):
        holders.request("second", "b")
        holders.request("third", "c")
        await holders.settle()
    # The slot went to "second", whose task has not resumed yet: it is cancelled now.
    assert slots.free == 0
    holders.tasks["second"].cancel()
    assert await holders.next() == "third"
    await holders.close()
    assert slots.free == 1 and slots.waiting() == 0


def test_the_per_host_cap_is_within_the_capacity_and_fifo_has_none() -> None:
    assert FairSlots(16, per_host=40).per_host == 16
    assert FairSlots(16, per_host=4, fair=False).per_host == 16
    with pytest.raises(ValueError, match="capacity"):
        FairSlots(0)


def test_a_request_going_on_goes_before_its_namespace_s_queue_but_not_before_another_s_turn() -> (
    None
):
    slots = FairSlots(1)
    served: list[str] = []

    def grant(name: str) -> Callable[[], bool]:
        return lambda: served.append(name) is None

    slots.request("busy", "h", grant("busy-0"))  # takes the one slot
    for i in (1, 2):
        slots.request("busy", "h", grant(f"busy-{i}"))
    for i in (0, 1):
        slots.request("busy", "h", grant(f"going-on-{i}"), going_on=True)
    slots.request("quiet", "h", grant("quiet-0"))  # a namespace's turn still comes first
    while slots.waiting():
        slots.release("h")
    assert served == ["busy-0", "quiet-0", "going-on-0", "going-on-1", "busy-1", "busy-2"]
