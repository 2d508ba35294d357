"""The TakoformBinding cache's own list and watch (kube.binding_watch) on the real API server:
every binding listed a page at a time before the book counts as complete, then each one
created, changed and deleted reaches the book from the watch, and a fresh listing forgets one
deleted while nobody watched. Bindings are cluster-scoped: this test names its own (a space
of its own) and asserts only about them."""

from __future__ import annotations

import asyncio
import ssl
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import pytest
import yaml
from fixtures_kube import KubeCluster

from takoform_operator.binding_port import BindingExists
from takoform_operator.core.binding import Binding, ClaimRef, Identity, Phase, binding_from_json
from takoform_operator.core.shard_ring import (
    SLOT_LABEL,
    shard_key,
    slot_label_of,
    slot_of,
    watch_selector,
)
from takoform_operator.kube.binding_watch import COLLECTION, BindingWatch
from takoform_operator.kube.bindings import BindingBook
from takoform_spec.identity import FormLine

pytestmark = pytest.mark.kube

LINE = FormLine("storage.takoform.io/v1", "Bucket")
#: Seconds any one step may take before the test fails (an event is awaited, never slept on).
STEP = 30


def _client(cluster: KubeCluster) -> httpx.AsyncClient:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    ca = config["clusters"][0]["cluster"]["certificate-authority"]
    user = config["users"][0]["user"]
    context = ssl.create_default_context(cafile=ca)
    context.load_cert_chain(user["client-certificate"], user["client-key"])
    return httpx.AsyncClient(base_url=cluster.server, verify=context, timeout=30)


class Changes:
    """The watch's `changed` callback, awaitable: wakes whoever waits for a condition."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def __call__(self) -> None:
        self.event.set()

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        async def wait() -> None:
            while not condition():
                self.event.clear()
                await self.event.wait()

        try:
            await asyncio.wait_for(wait(), STEP)
        except TimeoutError:
            pytest.fail(f"the book never saw {what}")


def test_the_book_is_listed_in_pages_then_follows_the_watch_and_a_new_listing_forgets(
    kube_cluster: KubeCluster, kube_crds: list[Any]
) -> None:
    space = f"watch-{uuid.uuid4().hex[:8]}"
    identities = [Identity(space, LINE, f"r{i}") for i in range(5)]

    def bound(identity: Identity, cr: str) -> dict[str, Any]:
        return Binding(identity, Phase.BOUND, ClaimRef("team-a", cr, f"uid-{space}-{cr}")).to_json()

    async def scenario() -> None:
        async with _client(kube_cluster) as client:

            async def send(method: str, path: str, body: Any = None) -> dict[str, Any]:
                answer = await client.request(method, path, json=body)
                assert answer.status_code in (200, 201), answer.text
                return dict(answer.json())

            for identity in identities[:3]:
                await send("POST", COLLECTION, bound(identity, identity.name))
            book = BindingBook(lambda: client)
            changes = Changes()
            watch = BindingWatch(book, lambda: client, changes, page=2)
            task = asyncio.create_task(watch.run())
            try:
                await asyncio.wait_for(book.listed.wait(), STEP)
                for identity in identities[:3]:
                    held = await book.get(identity)
                    assert held is not None and held.phase is Phase.BOUND, identity.name

                # created, changed and deleted while the watch runs
                await send("POST", COLLECTION, bound(identities[3], "late"))
                await changes.until(
                    lambda: book.held_by(f"uid-{space}-late") is not None, "the new binding"
                )
                current = await send("GET", f"{COLLECTION}/{identities[0].binding_name()}")
                lost = binding_from_json(current).lost(None).to_json()
                await send("PUT", f"{COLLECTION}/{identities[0].binding_name()}", lost)
                await changes.until(
                    lambda: book.held_by(f"uid-{space}-r0") is None, "the binding marked Lost"
                )
                await send("DELETE", f"{COLLECTION}/{identities[1].binding_name()}")
                await changes.until(
                    lambda: book.held_by(f"uid-{space}-r1") is None, "the binding deleted"
                )
            finally:
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

            # deleted while nobody watched: a fresh listing forgets it, keeps the others
            await send("DELETE", f"{COLLECTION}/{identities[2].binding_name()}")
            assert book.held_by(f"uid-{space}-r2") is not None, "not watched: still held"
            await watch.list_all()
            assert book.held_by(f"uid-{space}-r2") is None
            assert book.held_by(f"uid-{space}-late") is not None
            for identity in (identities[0], identities[3]):
                await send("DELETE", f"{COLLECTION}/{identity.binding_name()}")

    asyncio.run(scenario())


class Share:
    """A replica's slots as the book asks about them (kube.bindings.Slots), for a test without
    the ring: the slots watched are given."""

    def __init__(self, watched: set[int]) -> None:
        self.watched = frozenset(watched)

    def label(self, claim: ClaimRef) -> str:
        return str(slot_of(shard_key(claim.namespace, claim.name)))

    def watches(self, body: dict[str, Any]) -> bool:
        labels = (body.get("metadata") or {}).get("labels") or {}
        slot = slot_label_of(labels.get(SLOT_LABEL))
        return slot is None or slot in self.watched

    def serves(self, claim: ClaimRef) -> bool:
        return int(self.label(claim)) in self.watched

    def slot_selector(self) -> str:
        return watch_selector(self.watched)


def _in_slot(slot: int, prefix: str, count: int) -> list[str]:
    """`count` CR names of namespace team-a whose slot is `slot`."""
    names = (f"{prefix}-{i}" for i in range(100_000))
    return [n for n in names if slot_of(shard_key("team-a", n)) == slot][:count]


def test_a_replica_keeps_the_bindings_of_its_slots_and_reads_another_slots_by_name(
    kube_cluster: KubeCluster, kube_crds: list[Any]
) -> None:
    """Two replicas' books, each steered to one slot (hash sharding): a binding Bound to a CR
    carries its owner's slot label and reaches only the book watching that slot; one that a
    CR of the other slot contends for is read by name at each look; one handed to the other
    slot leaves the book without counting as gone; one Released reaches both."""
    space = f"slots-{uuid.uuid4().hex[:8]}"
    slot_a, slot_b = 7, 200
    a_crs, b_crs = _in_slot(slot_a, "a", 4), _in_slot(slot_b, "b", 4)
    i1, i2, i3, i4 = (Identity(space, LINE, f"r{i}") for i in range(1, 5))

    def cr(name: str) -> ClaimRef:
        return ClaimRef("team-a", name, f"uid-{space}-{name}")

    def uid(name: str) -> str:
        return cr(name).uid

    async def scenario() -> None:
        async with _client(kube_cluster) as client:
            shares = Share({slot_a}), Share({slot_b})
            books = [BindingBook(lambda: client, slots=share) for share in shares]
            changes = Changes(), Changes()
            watches = [
                BindingWatch(book, lambda: client, change, page=50)
                for book, change in zip(books, changes, strict=True)
            ]
            tasks = [asyncio.create_task(watch.run()) for watch in watches]
            a, b = books
            try:
                for book in books:
                    await asyncio.wait_for(book.listed.wait(), STEP)
                await a.create(Binding(i1, Phase.BOUND, cr(a_crs[0])))
                await b.create(Binding(i2, Phase.BOUND, cr(b_crs[0])))
                for identity, slot in ((i1, slot_a), (i2, slot_b)):
                    answer = await client.get(f"{COLLECTION}/{identity.binding_name()}")
                    assert answer.json()["metadata"]["labels"][SLOT_LABEL] == str(slot)
                # Written by B for a CR of A's slot: A's watch delivers it. Watch events come
                # in order, so B's own binding would have reached A before this one.
                await b.create(Binding(i3, Phase.BOUND, cr(a_crs[1])))
                await changes[0].until(lambda: a.held_by(uid(a_crs[1])) is not None, "i3 in A")
                assert a.held_by(uid(b_crs[0])) is None, "another slot's binding reached A"
                assert await a.get(i2) is None

                # A CR of A's slot contends for i2: refused, then read by name at each look.
                with pytest.raises(BindingExists):
                    await a.create(Binding(i2, Phase.BOUND, cr(a_crs[2])))
                held = await a.get(i2)
                assert held is not None and held.claim == cr(b_crs[0])
                taken = await b.replace(replace(held, claim=cr(b_crs[1])))
                held = await a.get(i2)
                assert held is not None and held.claim == cr(b_crs[1]), "A read a stale i2"
                assert held.resource_version == taken.resource_version

                # i1 handed to a CR of B's slot: it leaves A's watch, and is not gone.
                current = await b.read(i1)
                assert current is not None
                await b.replace(replace(current, claim=cr(b_crs[2])))
                await changes[0].until(lambda: a.held_by(uid(a_crs[0])) is None, "i1 leave A")
                assert not a.went(i1), "a binding that left the watch was taken for gone"
                await changes[1].until(lambda: b.held_by(uid(b_crs[2])) is not None, "i1 in B")

                # Released: no slot label, so both books see it.
                await b.create(Binding(i4, Phase.BOUND, cr(b_crs[3])))
                before = len(a)
                bound = await b.read(i4)
                assert bound is not None
                released = await b.replace(bound.released(cr(b_crs[3]), None))
                await changes[0].until(lambda: len(a) == before + 1, "the release in A")
                assert await a.get(i4) == released
            finally:
                for task in tasks:
                    task.cancel()
                for task in tasks:
                    with pytest.raises(asyncio.CancelledError):
                        await task
                for identity in (i1, i2, i3, i4):
                    left = await a.read(identity)  # protected: let go, then deleted
                    if left is not None:
                        await a.delete(left)

    asyncio.run(scenario())
