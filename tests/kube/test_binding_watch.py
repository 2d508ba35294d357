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
from typing import Any

import httpx
import pytest
import yaml
from fixtures_kube import KubeCluster

from takoform_operator.core.binding import Binding, ClaimRef, Identity, Phase, binding_from_json
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
