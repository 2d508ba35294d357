"""The TakoformBinding cache's list and watch, outside kopf.

Bindings are cluster-scoped: every operator process lists every binding of the cluster, however
few CRs it serves, unless hash sharding narrows the list and watch to the slots the replica
watches (the CRs' own slot selector, kube.bindings.Slots). Through kopf each
listed binding cost a worker, a stream, its raw event, a Body, a Patch and loggers while it
was processed, and a memory kept for as long as the binding
lived: about 23 KiB of peak RSS per binding, and full garbage collections over all of it at
start-up (docs/performance.md). Here a binding costs its entry in the book (kube.bindings): the
list is read a page at a time, the watch a line at a time, and nothing else is kept.

The book is complete once the first listing is read (`BindingBook.listed`); reconciles wait for
that (kube.handlers), as they waited for kopf's index before. After that the watch keeps it
current, from the listing's resourceVersion on; a watch that ends is started again from the
last version seen, and a version the API server no longer has (410 Gone) is a fresh listing,
which also forgets the bindings deleted meanwhile. A stale book is safe either way: every
binding write carries the resourceVersion read and `create` is the lock, so a binding the book
does not know yet costs one refused write and a fresh read, never a second owner.

When the selector changes (the replica's slots did), the watch ends and the book is listed
again with the new one: the bindings of the slots it gained come, those of the slots it lost go.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

import httpx

from takoform_operator.core.binding import BINDING_PLURAL
from takoform_operator.core.depth import safe_loads
from takoform_operator.core.shard_ring import slot_label
from takoform_operator.core.tenancy import GROUP, VERSION
from takoform_operator.kube.bindings import BindingBook, ListRefused, list_pages
from takoform_operator.kube.freshness import resource_version
from takoform_operator.kube.json_seam import WATCH_LIMIT

logger = logging.getLogger(__name__)

COLLECTION = f"/apis/{GROUP}/{VERSION}/{BINDING_PLURAL}"
#: The API server ends each watch after this long; it is then started again from the last
#: version seen (a quiet cluster sends a bookmark before that, so the version stays recent).
WATCH_SECONDS = 300
#: A connection that delivered nothing (not even a bookmark) for this long is given up.
_READ_SECONDS = WATCH_SECONDS + 60


class Expired(Exception):
    """The version the watch was to start from is gone (410): list again."""


class Refused(Exception):
    """The API server answered a list or watch with an error."""


def apply_event(book: BindingBook, event: Any) -> tuple[str | None, bool]:
    """One decoded watch line applied to `book`: (the version to resume from, or None when the
    line has none; whether the book changed). Raises Expired (410) and Refused (any other
    ERROR)."""
    if not isinstance(event, dict) or not isinstance(event.get("object"), dict):
        raise Refused(f"not a watch event: {str(event)[:200]}")
    kind, body = event.get("type"), event["object"]
    if kind == "ERROR":
        if body.get("code") == 410:
            raise Expired(str(body.get("message") or "resource version too old"))
        raise Refused(f"{body.get('code')} {body.get('message') or body.get('reason')}")
    version = resource_version(body) or None
    if kind in ("ADDED", "MODIFIED"):
        return version, book.observe(body)
    if kind == "DELETED":
        return version, book.forget(body)
    return version, False  # BOOKMARK: only its version


@dataclass
class BindingWatch:
    """Lists, then watches, the TakoformBindings into `book`; `changed` is called whenever the
    book changed (a binding came, went, or changed hands)."""

    book: BindingBook
    client: Callable[[], httpx.AsyncClient]
    changed: Callable[[], None]
    _: KW_ONLY
    #: Each list and watch as it succeeded or failed (the health check's watch failures).
    requested: Callable[[str, bool], None] = lambda path, ok: None
    #: A watch line that could not be decoded (skipped: the book keeps what it had, and a write
    #: against that is refused and read afresh).
    unreadable: Callable[[str], None] = lambda why: None
    page: int = 500
    retry_seconds: float = 1.0
    retry_cap_seconds: float = 30.0
    _steered: asyncio.Event = field(default_factory=asyncio.Event)

    def steer(self) -> None:
        """The selector changed: end the watch and list again with it."""
        self._steered.set()

    async def run(self) -> None:
        """List and watch until cancelled; API trouble is retried with back-off."""
        version: str | None = None
        failures = 0
        while True:
            try:
                if version is None or self._steered.is_set():
                    self._steered.clear()
                    version = await self.list_all()
                version = await self._until_steered(self.watch_from(version))
                failures = 0
            except Expired as exc:
                logger.info("TakoformBinding watch expired (%s): listing again", exc)
                version = None
            except (httpx.HTTPError, Refused, ValueError) as exc:
                self.requested(COLLECTION, False)
                delay = min(self.retry_seconds * 2**failures, self.retry_cap_seconds)
                failures += 1
                logger.warning(
                    "TakoformBinding list/watch failed (%s); again in %.0f s", exc, delay
                )
                await asyncio.sleep(delay)

    async def _until_steered(self, watch: Coroutine[Any, Any, str]) -> str:
        """The watch's last version when it ended; cut short when the selector changed (the
        caller then lists again)."""
        watching = asyncio.ensure_future(watch)
        steered = asyncio.ensure_future(self._steered.wait())
        try:
            await asyncio.wait((watching, steered), return_when=asyncio.FIRST_COMPLETED)
        finally:
            steered.cancel()
            if not watching.done():
                watching.cancel()
                await asyncio.wait((watching,))
        if watching.cancelled() and self._steered.is_set():
            return ""  # cut short here: `run` lists again
        return watching.result()

    async def list_all(self) -> str:
        """Read every binding into the book, a page at a time; forget those the listing no
        longer has. Returns the listing's resourceVersion. Raises Expired when a page's
        continue token expired."""
        names: set[str] = set()
        changed = False
        first = not self.book.listed.is_set()
        metadata: dict[str, Any] = {}
        try:
            async for page in list_pages(self.client(), COLLECTION, self.page, self._params()):
                for item in page.get("items") or ():
                    if isinstance(item, dict):
                        names.add(str((item.get("metadata") or {}).get("name") or ""))
                        changed = self.book.observe(item) or changed
                metadata = page.get("metadata") or {}
        except ListRefused as exc:
            if exc.status == 410:
                raise Expired("the listing's continue token expired") from None
            raise Refused(f"list: {exc}") from None
        version = str(metadata.get("resourceVersion") or "")
        changed = self.book.retain(names, version) or changed
        self.requested(COLLECTION, True)
        self.book.listed.set()
        if first:
            # Every CR's first look waits for this listing (kube.handlers._loop_step): waking
            # their owners would look at every CR at once, the start spread undone.
            self.book.woken()
        elif changed:
            self.changed()
        return version

    async def watch_from(self, version: str) -> str:
        """Watch from `version` until the API server ends the watch; returns the last version
        seen. Raises Expired (410)."""
        params = {
            "watch": "true",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_SECONDS),
            **self._params(),
        }
        timeout = httpx.Timeout(30.0, read=_READ_SECONDS)
        async with self.client().stream(
            "GET", COLLECTION, params=params, timeout=timeout
        ) as answer:
            if answer.status_code == 410:
                raise Expired("the watch's resourceVersion is gone")
            if answer.status_code != 200:
                await answer.aread()
                raise Refused(f"watch: {answer.status_code} {answer.text[:200]}")
            self.requested(COLLECTION, True)
            async for line in answer.aiter_lines():
                if not line.strip():
                    continue
                try:
                    event = safe_loads(line, WATCH_LIMIT)
                except ValueError as exc:
                    self.unreadable(str(exc))
                    continue
                if self._may_have_left(event):
                    body = event["object"]
                    seen, changed = resource_version(body) or None, await self.book.left(body)
                else:
                    seen, changed = apply_event(self.book, event)
                version = seen or version
                if changed:
                    self.changed()
        return version

    def _may_have_left(self, event: Any) -> bool:
        """A DELETED event that may only mean the binding left our slots: with a selector, of
        a binding with a slot label (one let go is written without it before its delete)."""
        if not isinstance(event, dict) or event.get("type") != "DELETED":
            return False  # most lines: checked before the selector is built
        body = event.get("object")
        return (
            isinstance(body, dict)
            and slot_label(body) is not None
            and bool(self.book.slots.slot_selector())
        )

    def _params(self) -> dict[str, str]:
        selector = self.book.slots.slot_selector()
        return {"labelSelector": selector} if selector else {}
