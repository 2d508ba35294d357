"""The binding cache the watch feeds (kube.bindings.BindingBook): the newest body of each binding,
and which CR holds which; a late watch event never undoes what the operator just wrote. And the
watch's handling of the API server's lines and listings (kube.binding_watch); the same on the
real API server: tests/kube/test_binding_watch.py."""

from __future__ import annotations

import asyncio
import gc
import json
from dataclasses import replace
from typing import Any

import httpx
import pytest

from takoform_operator.core.binding import Binding, ClaimRef, Identity, Phase
from takoform_operator.core.state import Requested
from takoform_operator.kube.binding_watch import BindingWatch, Expired, Refused, apply_event
from takoform_operator.kube.bindings import BindingBook, Contenders
from takoform_spec.identity import FormLine, FormRef

IDENTITY = Identity("team-a", FormLine("storage.takoform.io/v1", "Bucket"), "logs", "prod")
OWNER = ClaimRef("team-a", "logs", "cr-1")


def _body(binding: Binding, version: str) -> dict[str, Any]:
    return replace(binding, resource_version=version).to_json()


def _book() -> BindingBook:
    return BindingBook(lambda: (_ for _ in ()).throw(AssertionError("no API call expected")))


def test_the_cache_knows_who_holds_which_binding_and_forgets_it_when_it_goes() -> None:
    book = _book()
    bound = Binding(IDENTITY, Phase.BOUND, OWNER)
    assert book.observe(_body(bound, "5"))
    assert book.held_by("cr-1") == replace(bound, resource_version="5")
    assert not book.observe(_body(bound, "5")), "the same body again changes nothing"
    released = bound.released(OWNER, "h-1")
    assert book.observe(_body(released, "6"))
    assert book.held_by("cr-1") is None, "a Released binding is held by nobody"
    rebound = replace(released, phase=Phase.BOUND, claim=ClaimRef("team-a", "again", "cr-2"))
    book.observe(_body(rebound, "7"))
    assert book.held_by("cr-2") is not None and book.held_by("cr-1") is None
    assert book.forget(_body(rebound, "8"))
    assert book.held_by("cr-2") is None


def test_the_owners_a_changed_or_deleted_binding_named_are_woken_once() -> None:
    book = _book()
    bound = Binding(IDENTITY, Phase.BOUND, OWNER)
    name = bound.name
    book.observe(_body(bound, "5"))
    assert book.woken() == ({"cr-1"}, {name}), "a binding that came names its owner"
    assert book.woken() == (set(), set()), "each is handed out once"
    assert not book.observe(_body(bound, "5"))
    assert book.woken() == (set(), set()), "an unchanged binding wakes nobody"
    taken = replace(bound, claim=ClaimRef("team-b", "logs", "cr-2"))
    book.observe(_body(taken, "6"))
    assert book.woken() == ({"cr-1", "cr-2"}, {name}), "the owner before and after"
    book.forget(_body(taken, "7"))
    assert book.woken() == ({"cr-2"}, {name}), "a vanished binding wakes the CR it named"
    book.observe(_body(bound, "8"), ours=True)
    assert book.woken() == (set(), set()), "our own write wakes nobody"
    assert book.retain(set(), "9")
    assert book.woken() == ({"cr-1"}, {name}), "gone from a listing: as deleted"


def test_a_binding_change_wakes_its_own_contenders_only() -> None:
    """1,000 CRs Blocked AlreadyManaged on other bindings cost nothing when one changes."""
    contenders = Contenders()
    for i in range(1000):
        contenders.hold(f"cr-{i}", f"tb-{i % 10}")
    assert contenders.of({"tb-3"}) == {f"cr-{i}" for i in range(3, 1000, 10)}
    contenders.hold("cr-3", None)  # its last look was not AlreadyManaged
    contenders.hold("cr-13", "tb-4")  # it now waits on another binding
    contenders.drop("cr-23")  # gone
    assert {"cr-3", "cr-13", "cr-23"}.isdisjoint(contenders.of({"tb-3"}))
    assert "cr-13" in contenders.of({"tb-4"}) and "cr-3" not in contenders
    assert contenders.of({"tb-unknown"}) == set()


def test_a_deleted_binding_never_comes_back_from_a_late_event() -> None:
    """The book keeps the version a binding was deleted at (a tombstone): a watch event older
    than it, delivered late, is no phantom binding. A listing forgets the tombstones."""
    book = _book()
    bound = Binding(IDENTITY, Phase.BOUND, OWNER)
    book.observe(_body(bound, "5"))
    assert book.forget(_body(bound, "9"))
    assert not book.observe(_body(bound, "7")), "older than its deletion"
    assert book.held_by("cr-1") is None
    again = replace(bound, claim=ClaimRef("team-a", "logs", "cr-2"))
    assert book.observe(_body(again, "12")), "created again since: newer"
    assert book.held_by("cr-2") is not None
    assert book.forget(_body(again, "13"))
    assert not book.retain(set(), "20"), "a tombstone is no binding a listing lacks"
    assert book._versions == {}, "and a listing forgets the tombstones (memory stays bounded)"


def test_a_late_watch_event_never_undoes_a_newer_binding() -> None:
    book = _book()
    bound = Binding(IDENTITY, Phase.BOUND, OWNER)
    book.observe(_body(bound, "9"))
    assert not book.observe(_body(bound.lost(None), "8")), "older than what is held"
    assert not book.forget(_body(bound, "8")), "a delete older than the binding held"
    assert book.held_by("cr-1") is not None


def test_an_object_under_a_name_that_is_not_its_identitys_binds_nothing() -> None:
    book = _book()
    forged = _body(Binding(IDENTITY, Phase.BOUND, OWNER), "3")
    forged["metadata"]["name"] = "tb-" + "0" * 40
    book.observe(forged)
    assert book.held_by("cr-1") is None
    unreadable = {"metadata": {"name": "tb-x", "resourceVersion": "4"}, "spec": {"phase": "?"}}
    book.observe(unreadable)
    assert book.held_by("cr-1") is None


def test_the_book_answers_every_field_of_what_it_was_given() -> None:
    book = _book()
    ref = FormRef("storage.takoform.io/v1", "Bucket", "1.2.0", "sha256:" + "ab" * 32)
    full = Binding(
        IDENTITY,
        Phase.BOUND,
        OWNER,
        form_ref=ref,
        requested=Requested("team-a", "logs", ("1.2.0", "sha256:" + "ab" * 32), "{}", "prod"),
        uid="h-7",
    )
    book.observe(_body(full, "5"))
    assert book.held_by("cr-1") == replace(full, resource_version="5")
    lost = replace(full.lost("h-8"), requested=Requested("team-a", "logs"))
    book.observe(_body(lost, "6"))
    assert asyncio.run(book.get(IDENTITY)) == replace(lost, resource_version="6")
    assert book.held_by("cr-1") is None


def test_thousands_of_bindings_are_nothing_for_the_garbage_collector_to_walk() -> None:
    """Every operator process keeps every binding of the cluster; a full collection's pause
    grows with the objects it walks (docs/performance.md)."""
    book = _book()
    ref = FormRef("storage.takoform.io/v1", "Bucket", "1.2.0", "sha256:" + "ab" * 32)
    gc.collect()
    tracked = len(gc.get_objects())
    for i in range(2_000):
        claim = ClaimRef("team-a", f"cr-{i}", f"uid-{i}")
        binding = Binding(
            replace(IDENTITY, name=f"r-{i}"), Phase.BOUND, claim, ref, Requested("team-a", f"r-{i}")
        )
        book.observe(_body(binding, str(10 + i)))
    gc.collect()
    assert len(gc.get_objects()) - tracked < 100  # six dataclass instances per binding before
    assert book.held_by("uid-1999") is not None


def test_a_listing_forgets_what_it_no_longer_names_unless_the_book_saw_it_later() -> None:
    book = _book()
    old = Binding(IDENTITY, Phase.BOUND, OWNER)
    written = Binding(replace(IDENTITY, name="new"), Phase.BOUND, ClaimRef("team-a", "n", "cr-2"))
    book.observe(_body(old, "5"))
    book.observe(_body(written, "12"))  # our write, after the listing was read at 10
    assert book.retain(set(), "10")
    assert book.held_by("cr-1") is None, "deleted while nobody watched"
    assert book.held_by("cr-2") is not None, "newer than the listing: kept"
    assert not book.retain({written.name}, "12")


def test_watch_lines_reach_the_book_and_a_gone_version_means_listing_again() -> None:
    book = _book()
    bound = Binding(IDENTITY, Phase.BOUND, OWNER)
    assert apply_event(book, {"type": "ADDED", "object": _body(bound, "5")}) == ("5", True)
    assert apply_event(book, {"type": "MODIFIED", "object": _body(bound, "5")}) == ("5", False)
    bookmark = {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    assert apply_event(book, bookmark) == ("9", False)
    assert apply_event(book, {"type": "DELETED", "object": _body(bound, "10")}) == ("10", True)
    assert book.held_by("cr-1") is None
    gone = {"type": "ERROR", "object": {"code": 410, "message": "too old resource version"}}
    with pytest.raises(Expired):
        apply_event(book, gone)
    with pytest.raises(Refused):
        apply_event(book, {"type": "ERROR", "object": {"code": 500, "message": "etcd"}})
    with pytest.raises(Refused):
        apply_event(book, ["not", "an", "event"])


def test_the_watch_lists_again_after_a_gone_version_and_forgets_what_went_meanwhile() -> None:
    """Against recorded API server answers: list (2 pages), a watch that ends in 410, a new
    listing without one of the bindings; the book follows, `changed` is called for the second
    listing, and each request's outcome goes to the health check."""
    first = Binding(IDENTITY, Phase.BOUND, OWNER)
    second = Binding(replace(IDENTITY, name="b"), Phase.BOUND, ClaimRef("team-a", "b", "cr-2"))
    listings = [
        [{"items": [_body(first, "3")], "metadata": {"continue": "t1"}},
         {"items": [_body(second, "4")], "metadata": {"resourceVersion": "4"}}],
        [{"items": [_body(second, "4")], "metadata": {"resourceVersion": "20"}}],
    ]  # fmt: skip
    requests: list[str] = []
    book = BindingBook(lambda: client)
    watch: BindingWatch

    def answer(request: httpx.Request) -> httpx.Response:
        params = request.url.params
        requests.append(str(request.url.query, "ascii"))
        if params.get("watch") == "true":
            if len(listings[0]) == 0 and params["resourceVersion"] == "4":
                line = {"type": "ERROR", "object": {"code": 410, "message": "too old"}}
                return httpx.Response(200, content=json.dumps(line).encode() + b"\n")
            raise asyncio.CancelledError  # the second watch: the test is over
        listing = listings[0] if listings[0] else listings[1]
        return httpx.Response(200, json=listing.pop(0))

    client = httpx.AsyncClient(base_url="https://api", transport=httpx.MockTransport(answer))
    changes: list[bool] = []
    health: list[bool] = []
    watch = BindingWatch(
        book, lambda: client, lambda: changes.append(True),
        requested=lambda path, ok: health.append(ok), page=1,
    )  # fmt: skip

    async def run() -> None:
        with pytest.raises(asyncio.CancelledError):
            await watch.run()

    asyncio.run(run())
    assert [q.split("&")[0] for q in requests] == [
        "limit=1", "limit=1", "watch=true", "limit=1", "watch=true",
    ]  # fmt: skip
    assert "continue=t1" in requests[1]
    assert "resourceVersion=20" in requests[4], "the second watch starts at the new listing"
    assert book.listed.is_set()
    assert book.held_by("cr-1") is None, "gone from the second listing"
    assert book.held_by("cr-2") is not None
    # The first listing wakes nobody: every CR's first look waits for it anyway.
    assert len(changes) == 1 and health == [True, True, True], "the second listing wakes"


class _Slot:
    """A replica of hash sharding that watches and serves slot "1" (kube.bindings.Slots)."""

    selector = "slot notin (1)"

    def label(self, claim: ClaimRef) -> str:
        return "1" if claim.namespace == "team-a" else "2"

    def watches(self, body: dict[str, Any]) -> bool:
        labels = body["metadata"].get("labels") or {}
        return labels.get("takoform.io/shard-slot") in (None, "1")

    def serves(self, claim: ClaimRef) -> bool:
        return self.label(claim) == "1"

    def slot_selector(self) -> str:
        return self.selector


def test_a_new_selector_ends_the_watch_and_lists_again_with_it() -> None:
    """Hash sharding: the slots watched changed (`steer`) while a watch was open; it is ended
    and the bindings are listed again with the new selector, then watched with it."""
    slots = _Slot()
    requests: list[httpx.QueryParams] = []
    watching = asyncio.Event()
    book = BindingBook(lambda: client, slots=slots)

    async def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.params)
        if request.url.params.get("watch") != "true":
            return httpx.Response(200, json={"items": [], "metadata": {"resourceVersion": "7"}})
        if len(requests) > 3:
            raise asyncio.CancelledError  # the second watch: the test is over
        watching.set()
        await asyncio.Event().wait()  # an open watch that sends nothing
        raise AssertionError("unreachable")

    client = httpx.AsyncClient(base_url="https://api", transport=httpx.MockTransport(answer))
    watch = BindingWatch(book, lambda: client, lambda: None)

    async def run() -> None:
        task = asyncio.create_task(watch.run())
        await asyncio.wait_for(watching.wait(), 10)
        slots.selector = "slot notin (2)"
        watch.steer()
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, 10)

    asyncio.run(run())
    assert [(p.get("watch"), p.get("labelSelector")) for p in requests] == [
        (None, "slot notin (1)"), ("true", "slot notin (1)"),
        (None, "slot notin (2)"), ("true", "slot notin (2)"),
    ]  # fmt: skip


def test_bindings_written_before_sharding_are_written_again_by_their_owner_only() -> None:
    """Bound bindings without their owner's slot label (written before hash sharding was on)
    are written again at the start by the replica that serves their owner, not by the
    others; a labelled one, or one not Bound, is not."""
    book = BindingBook(lambda: (_ for _ in ()).throw(AssertionError("no API call expected")),
                       slots=_Slot())  # fmt: skip
    ours = Binding(IDENTITY, Phase.BOUND, OWNER)
    theirs = Binding(replace(IDENTITY, name="b"), Phase.BOUND, ClaimRef("team-b", "b", "cr-2"))
    labelled = Binding(replace(IDENTITY, name="c"), Phase.BOUND, ClaimRef("team-a", "c", "cr-3"))
    released = Binding(replace(IDENTITY, name="d"), Phase.RELEASED, None, last_owner=OWNER)
    for i, binding in enumerate((ours, theirs, released)):
        book.observe(replace(binding, resource_version=str(i + 1)).to_json(guardian=""))
    book.observe(replace(labelled, resource_version="9").to_json(guardian="", slot="1"))
    assert [b.name for b in book.unguarded()] == [ours.name]


def test_a_replica_checks_for_lost_owners_only_in_its_own_slots() -> None:
    """Hash sharding, at a start: the CRs the owners are looked for in are listed with the
    replica's slot selector, and of the bindings every replica holds (without a slot label)
    only those of the CRs it serves are checked: two owners gone, one binding written Lost."""
    requests: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        requests.append(request)
        if request.method == "GET" and "/takoformbindings" not in request.url.path:
            if request.url.path.endswith("/buckets"):
                return httpx.Response(200, json={"items": [], "metadata": {}})
            return httpx.Response(404, json={})  # every CR is gone
        assert request.method == "PUT", request
        body = json.loads(request.content)
        body["metadata"]["resourceVersion"] = "99"
        return httpx.Response(200, json=body)

    client = httpx.AsyncClient(base_url="https://api", transport=httpx.MockTransport(answer))
    book = BindingBook(lambda: client, slots=_Slot())
    ours = Binding(IDENTITY, Phase.BOUND, OWNER)
    theirs = Binding(replace(IDENTITY, name="b"), Phase.BOUND, ClaimRef("team-b", "b", "cr-2"))
    for i, binding in enumerate((ours, theirs)):
        book.observe(replace(binding, resource_version=str(i + 1)).to_json(guardian=""))
    asyncio.run(book.find_lost())
    listed = [r for r in requests if r.url.path.endswith("/buckets")]
    assert [r.url.params.get("labelSelector") for r in listed] == ["slot notin (1)"]
    written = [json.loads(r.content) for r in requests if r.method == "PUT"]
    assert [(w["metadata"]["name"], w["spec"]["phase"]) for w in written] == [(ours.name, "Lost")]
