"""Where kopf decodes what the API server sends: a depth-safe JSON decoder, installed at the two
places kopf turns API answers into objects (docs/architecture.md, "Reading what the API server
sends").

Why a seam at all: kopf 1.x decodes each watch line with `json.loads` (kopf._cogs.clients.api,
`stream`) and each list page with aiohttp's `response.json()` (`api.get`, which
`fetching.fetch_objs` calls). Python's json raises RecursionError at about 1,000 levels, and the
API server accepts free-form fields nested up to 10,000; the error escapes kopf's watcher,
which stops the whole operator, and again after every restart: one object of one tenant stops
every CR of every tenant. The CRD bounds keep new objects shallow, but not objects stored before
them, nor another CRD's fields, nor any other decode failure.

Why here and not elsewhere: the failure happens before any handler of ours runs, so only the
decoding itself can be changed. Four module attributes of kopf's API client are replaced, each
keeping kopf's contract (same arguments, same results), nothing else of kopf is touched:

- `api.json` (the module `stream` calls `json.loads` on): a namespace whose `loads` is
  `watch_loads`. A line that still cannot be read (never seen from a real API server: its
  encoder writes valid UTF-8 JSON of at most 10,000 levels) becomes an event type kopf skips
  with a warning, after our log line and `takoform_unreadable_objects_total` name the object as
  far as it can be recovered.
- `api.get` (kopf's GET and JSON decode of list pages and other reads): the same request, read
  in chunks and decoded item by item as they arrive (`ListReader`), depth-safe, an unreadable
  item reported like an unreadable watch line and left out (`list_loads` for a page of another
  shape).
- `api.iter_jsonlines` (the lines of a watch stream, which kopf decodes as UTF-8 itself): the
  same lines, with U+FFFD where a line is not valid UTF-8, less the echoes of the operator's
  own writes (kube.echoes), which kopf never sees.
- `api.request` (every kopf request): unchanged, but a GET (kopf's lists and watches) that fails
  after kopf's own retries, or succeeds, is reported to the health check (health.Health): a
  list or watch that keeps failing makes /healthz fail.

With sharding `hash`, the label selector kopf lists and watches the Form CRs with changes as
the ring does (kube.shards); a watch opened with another selector than the current one, or
than the list it continues was made with, ends with an ERROR line of code 410, after which
kopf lists again (`WatchRestarts`, fed by `api.request`, applied in `api.iter_jsonlines`).
Every replica lists and is sent each new CR until its owner labels it, then a DELETED event as
it leaves the watch: another replica's CR is left out of a list page, and those events become
BOOKMARKs of their resourceVersion (`pass_over`, kube.shards.ShardMembership.passes_over), so
kopf keeps its place in the watch and runs nothing for them.

Each object decoded by the first two (a watch event's object, each item of a list page) goes
through `trim` as soon as it is decoded: a Form CR leaves with only what the operator reads
(core.trim), before kopf queues it or any loop keeps it, whatever its metadata carries.

`safe_loads` (core.depth, the one depth-safe decoder, which the plugin and the host client use
too) first tries the C decoder when the text cannot be deeper than allowed; otherwise, or if
that fails, it cuts every object or list nested deeper than the limit out of the text (a scan
that skips strings) and puts core.depth.PRUNED in its place, then decodes that. The reconcile
reports a CR with PRUNED in its spec as Degraded, NestedTooDeep, and never sends it; every
other object is decoded exactly as before.
"""

from __future__ import annotations

import codecs
import json
import logging
import re
import types
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import aiohttp

from takoform_operator.core.depth import MAX_DEPTH, deeper_than, safe_loads

logger = logging.getLogger("takoform_operator")

#: One object alone (an answer to a write of ours).
OBJECT_LIMIT = MAX_DEPTH
#: A watch line is {"type", "object": OBJECT}: the object starts one level down.
WATCH_LIMIT = MAX_DEPTH + 1
#: A list page is {"items": [OBJECT, ...]}: the objects start two levels down.
LIST_LIMIT = MAX_DEPTH + 2
#: What a watch line that cannot be read becomes: kopf logs and skips unknown event types.
UNREADABLE_EVENT = "TakoformUnreadable"
_KEYED = re.compile(r'"([^"\\]*(?:\\.[^"\\]*)*)"\s*:|"([^"\\]*(?:\\.[^"\\]*)*)"|([\[\]{}])')
#: Bytes read at a time from a list page (kube.json_seam.ListReader).
_CHUNK = 1 << 16


def list_loads(text: str | bytes, report: Callable[[dict[str, str], str], None]) -> Any:
    """Decode a list page (or any answer of a GET) depth-safe. Should the page still fail, its
    `items` are decoded one by one: an item that cannot be read is `report`ed and left out, the
    others and the page's metadata (resourceVersion, continue) are kept. Raises ValueError only
    when not even that is possible (the page is not a list at all)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    try:
        return safe_loads(text, LIST_LIMIT)
    except ValueError as exc:
        spans = _item_spans(text)
        if spans is None:
            raise
        why = str(exc)[:200]
    (start, end), items = spans[0], []
    for first, last in spans[1:]:
        raw = text[first:last]
        try:
            items.append(safe_loads(raw, OBJECT_LIMIT))
        except ValueError as item_exc:
            report(identity(raw), str(item_exc)[:200] or why)
    page = safe_loads(text[:start] + "[]" + text[end:], LIST_LIMIT)
    page["items"] = items
    return page


def _item_spans(text: str) -> list[tuple[int, int]] | None:
    """[(start, end) of the top-level `items` array, then (start, end) of each of its
    elements], found by a scan that needs no decode; None if there is no such array."""
    depth, key, spans = 0, None, []
    array = element = -1
    for match in _KEYED.finditer(text):
        found_key, _value, bracket = match.groups()
        if found_key is not None:
            key = found_key if depth == 1 else key
            continue
        if bracket is None:
            continue
        if bracket in "[{":
            depth += 1
            if depth == 2 and bracket == "[" and key == "items" and array < 0:
                array = match.start()
            elif depth == 3 and array >= 0:
                element = match.start()
        else:
            if depth == 3 and element >= 0:
                spans.append((element, match.end()))
                element = -1
            elif depth == 2 and array >= 0 and element < 0:
                return [(array, match.end()), *spans]
            depth -= 1
    return None


def identity(text: str) -> dict[str, str]:
    """What can be recovered of the object in a watch line or object that cannot be decoded:
    `kind`, `namespace` and `name` (strings at object.kind, object.metadata.name... or at the
    top level), found by a scan that needs no decode. Missing ones are left out."""
    wanted = {
        ("object", "kind"): "kind",
        ("object", "metadata", "namespace"): "namespace",
        ("object", "metadata", "name"): "name",
        ("kind",): "kind",
        ("metadata", "namespace"): "namespace",
        ("metadata", "name"): "name",
    }
    found: dict[str, str] = {}
    path: list[str] = []  # the keys down to the current container, while it is shallow
    depth = 0
    for match in _KEYED.finditer(text):
        key, value, bracket = match.groups()
        if bracket is not None:
            depth += 1 if bracket in "[{" else -1
            if bracket in "[{" and depth <= 3:
                path.append("" if bracket == "{" else "[]")
            elif bracket in "]}" and depth < 3 and path:
                path.pop()
        elif depth <= 3 and path:
            if key is not None:
                path[-1] = key
            else:
                field = wanted.get(tuple(path))
                if field is not None and field not in found:
                    found[field] = _printable(value)
    return found


def _printable(value: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in value[:253])


#: What an object decoded here becomes (kube.handlers.cr_trimmer): itself by default.
Trim = Callable[[Any], Any]
#: The watch events whose object is a stored object (a BOOKMARK's or an ERROR's is not).
_OBJECT_EVENTS = ("ADDED", "MODIFIED", "DELETED")


def _same(found: Any) -> Any:
    return found


#: What decides which watch events kopf is not given (event type, trimmed object): True for one
#: that concerns nothing of this process. None: every event concerns it.
PassOver = Callable[[str, Any], bool]


def watch_loads(
    report: Callable[[dict[str, str], str], None],
    trim: Trim = _same,
    pass_over: PassOver | None = None,
) -> Callable[[str | bytes], Any]:
    """kopf's `json.loads` for watch lines: depth-safe; an unreadable line is `report`ed (what
    was recovered of the object, why) and becomes an event kopf skips. The event's object goes
    through `trim` as soon as it is decoded; an event `pass_over` names becomes a BOOKMARK of
    its resourceVersion, which kopf only takes its place in the watch from."""

    def loads(text: str | bytes) -> Any:
        try:
            event = safe_loads(text, WATCH_LIMIT)
        except ValueError as exc:
            raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
            report(identity(raw), str(exc)[:200])
            return {"type": UNREADABLE_EVENT, "object": {}}
        if isinstance(event, dict) and event.get("type") in _OBJECT_EVENTS and "object" in event:
            found = event["object"] = trim(event["object"])
            if pass_over is not None and pass_over(event["type"], found):
                # kopf goes on from the resourceVersion a BOOKMARK names (none: from its last).
                metadata = found.get("metadata") if isinstance(found, dict) else None
                version = metadata.get("resourceVersion") if isinstance(metadata, dict) else None
                mark = {"resourceVersion": version} if isinstance(version, str) else {}
                return {"type": "BOOKMARK", "object": {"metadata": mark}}
        return event

    return loads


#: The start of a list page up to its `items` array: `apiVersion`, `kind` and a flat `metadata`
#: (resourceVersion, continue, remainingItemCount), in any order, as the API server writes them.
_LIST_HEAD = re.compile(
    r'\s*\{(?:\s*"(?:apiVersion|kind)"\s*:\s*"[^"\\]*"\s*,'
    r'|\s*"metadata"\s*:\s*\{[^{}"]*(?:"[^"\\]*"[^{}"]*)*\}\s*,)*\s*"items"\s*:\s*\['
)
#: How much of a page may go by without its head being found: the page is then read whole.
_HEAD_AT_MOST = 1 << 16
_SEPARATORS = " \t\r\n,"
_DECODER = json.JSONDecoder()


class ListReader:
    """A list page decoded item by item as its chunks arrive (`feed`, then `close`), each item
    `trim`med at once, and left out when `pass_over` names it (as an ADDED event): a page of 500
    CRs with a megabyte of labels each never exists decoded, nor as a whole text. The result is
    `list_loads`'s: depth-safe, an unreadable item `report`ed and left out. A page that does
    not start as the API server writes one (its `items` after a flat head) is read whole by
    `list_loads`."""

    def __init__(
        self,
        report: Callable[[dict[str, str], str], None],
        trim: Trim = _same,
        pass_over: PassOver | None = None,
    ) -> None:
        self._report, self._trim, self._pass_over = report, trim, pass_over
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._text = ""  # what is not consumed yet
        self._head: str | None = None  # the page up to its items array, once found
        self._items: list[Any] = []
        self._tail: list[str] | None = None  # the page after its items array
        self._whole: list[str] | None = None  # not a page of the expected shape: read whole

    def feed(self, chunk: bytes) -> None:
        self._take(self._utf8.decode(chunk), final=False)

    def close(self) -> Any:
        self._take(self._utf8.decode(b"", final=True), final=True)
        if self._whole is not None:
            return trim_answer(list_loads("".join(self._whole), self._report), self._trim)
        if self._head is None or self._tail is None:
            raise ValueError("the list page ends inside its items")
        page = safe_loads(self._head + "[]" + "".join(self._tail), LIST_LIMIT)
        page["items"] = self._items
        return page

    def _take(self, text: str, final: bool) -> None:
        for kept in (self._whole, self._tail):
            if kept is not None:
                kept.append(text)
                return
        text = self._text + text
        if self._head is None:
            head = _LIST_HEAD.match(text)
            if head is None:
                if final or len(text) > _HEAD_AT_MOST or "[" in text:
                    self._whole, self._text = [text], ""
                else:
                    self._text = text
                return
            self._head, text = text[: head.end() - 1], text[head.end() :]
        at = 0
        while True:
            while at < len(text) and text[at] in _SEPARATORS:
                at += 1
            if at == len(text):
                break
            if text[at] == "]":
                self._tail, self._text = [text[at + 1 :]], ""
                return
            end = self._item(text, at, final)
            if end is None:
                break
            at = end
        self._text = text[at:]

    def _item(self, text: str, at: int, final: bool) -> int | None:
        """Decode the item at `at`; returns where it ends, or None while it is incomplete."""
        try:
            item, end = _DECODER.raw_decode(text, at)
        except RecursionError:
            pass
        except ValueError:
            if not final:
                return None  # most likely cut by the chunk: tried again with more
        else:
            if text.count("{", at, end) + text.count("[", at, end) <= OBJECT_LIMIT or (
                not deeper_than(text[at:end], OBJECT_LIMIT)
            ):
                self._keep(item)
                return end
        # Deep, or not readable as it is: found by a scan, then decoded like a page's item.
        closed = _value_end(text, at)
        if closed is None:
            if final:
                raise ValueError("the list page ends inside an item")
            return None
        raw = text[at:closed]
        try:
            self._keep(safe_loads(raw, OBJECT_LIMIT))
        except ValueError as exc:
            self._report(identity(raw), str(exc)[:200])
        return closed

    def _keep(self, item: Any) -> None:
        found = self._trim(item)
        if self._pass_over is None or not self._pass_over("ADDED", found):
            self._items.append(found)


def _value_end(text: str, at: int) -> int | None:
    """Where the object or list opening at `at` closes (strings skipped), None if not in
    `text`."""
    depth = 0
    for match in _KEYED.finditer(text, at):
        bracket = match.group(3)
        if bracket is None:
            continue
        depth += 1 if bracket in "[{" else -1
        if depth == 0:
            return match.end()
    return None


def trim_answer(answer: Any, trim: Trim) -> Any:
    """A GET's decoded answer with `trim` applied to each item of a list page, or to the
    object itself."""
    items = answer.get("items") if isinstance(answer, dict) else None
    if isinstance(items, list):
        answer["items"] = [trim(item) for item in items]
        return answer
    return trim(answer)


#: What ends a watch so that kopf lists again: kopf re-lists after an ERROR event of code 410
#: (kopf._cogs.clients.watching.continuous_watch), as after an expired resourceVersion.
RELIST_LINE = json.dumps({"type": "ERROR", "object": {
    "kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 410, "reason": "Expired",
    "message": "the label selector of the watch changed",
}}).encode()  # fmt: skip


@dataclass(frozen=True)
class _Watch:
    path: str
    selector: str
    response: Any


class WatchRestarts:
    """The watches of `resources` ((group, version, plural) each) end when the label selector
    they were opened with is not `selector` any more, or differs from the one their list was
    made with (kopf continues a watch from its list's resourceVersion): kopf then lists again
    with the current one, and sees every object it now matches. An idle watch ends too: its
    response is closed at the change."""

    def __init__(self, resources: Iterable[tuple[str, str, str]]) -> None:
        alternatives = "|".join(
            rf"/apis/{re.escape(group)}/{re.escape(version)}(?:/namespaces/[^/]+)?/"
            rf"{re.escape(plural)}"
            for group, version, plural in resources
        )
        self._paths = re.compile(alternatives or r"(?!)")
        self.selector = ""
        #: The selector of the last list of each path (the pages of one list share it).
        self._listed: dict[str, str] = {}
        self._open: dict[int, _Watch] = {}

    def change(self, selector: str) -> None:
        self.selector = selector
        for watch in list(self._open.values()):
            if self.ended(watch):
                watch.response.close()

    def requested(self, url: str, response: Any) -> None:
        """kopf's GET of `url` was answered with `response`."""
        parts = urlsplit(url)
        if not self._paths.fullmatch(parts.path):
            return
        query = parse_qs(parts.query)
        selector = query.get("labelSelector", [""])[0]
        if query.get("watch") == ["true"]:
            self._open[id(response.content)] = _Watch(parts.path, selector, response)
        else:
            self._listed[parts.path] = selector

    def ended(self, watch: _Watch) -> bool:
        return watch.selector != self.selector or watch.selector != self._listed.get(watch.path)

    def opened(self, content: Any) -> _Watch | None:
        return self._open.get(id(content))

    def closed(self, content: Any) -> None:
        self._open.pop(id(content), None)


#: The attributes of kopf._cogs.clients.api the seam replaces.
_REPLACED = ("json", "get", "request", "iter_jsonlines")


class _Installed:
    originals: dict[str, Any] | None = None


def install(
    report: Callable[[dict[str, str], str], None],
    requested: Callable[[str, bool], None],
    skip: Callable[[bytes], bool] | None = None,
    trim: Trim = _same,
    restarts: WatchRestarts | None = None,
    pass_over: PassOver | None = None,
) -> None:
    """Install the seam in kopf's API client (idempotent: a second call replaces the hooks).
    `report(identity, why)` is told of each watch line that cannot be read; `requested(path,
    ok)` of each GET (list or watch) that succeeded or failed after kopf's own retries;
    `skip(line)` says which watch lines kopf is not given at all (kube.echoes: the echo of
    the operator's own writes), before they are decoded; `trim(object)` what each object
    decoded from a watch line or a GET becomes; `restarts` which watches end (WatchRestarts);
    `pass_over(type, object)` which watch events kopf is not given (kube.shards: another
    replica's CRs)."""
    from kopf._cogs.clients import api

    if _Installed.originals is None:
        _Installed.originals = {name: getattr(api, name) for name in _REPLACED}
    original_request = _Installed.originals["request"]
    original_lines = _Installed.originals["iter_jsonlines"]

    async def request(method: str, url: str, **kwargs: Any) -> Any:
        watched = method.lower() == "get"
        try:
            response = await original_request(method, url, **kwargs)
        except Exception:
            if watched:
                requested(urlsplit(url).path, False)
            raise
        if watched:
            requested(urlsplit(url).path, True)
            if restarts is not None:
                restarts.requested(url, response)
        return response

    async def get(url: str, **kwargs: Any) -> Any:
        response = await api.request(method="get", url=url, **kwargs)
        reader = ListReader(report, trim, pass_over)
        async with response:
            async for chunk in response.content.iter_chunked(_CHUNK):
                reader.feed(chunk)
        return reader.close()

    async def iter_jsonlines(content: Any, *args: Any, **kwargs: Any) -> Any:
        # kopf decodes each line as UTF-8 before json.loads sees it: a line that is not valid
        # UTF-8 gets U+FFFD where it is not (as the API server's own encoder does) instead of
        # a UnicodeDecodeError out of the watcher.
        watch = restarts.opened(content) if restarts is not None else None
        if watch is None:
            async for line in lines(content, *args, **kwargs):
                yield line
            return
        assert restarts is not None
        try:
            if not restarts.ended(watch):
                try:
                    async for line in lines(content, *args, **kwargs):
                        yield line
                except aiohttp.ClientError:
                    if not restarts.ended(watch):
                        raise
            if restarts.ended(watch):
                yield RELIST_LINE
        finally:
            restarts.closed(content)

    async def lines(content: Any, *args: Any, **kwargs: Any) -> Any:
        async for line in original_lines(content, *args, **kwargs):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                line = line.decode("utf-8", "replace").encode("utf-8")
            if skip is not None and skip(line):
                continue
            yield line

    hooks = {
        "json": types.SimpleNamespace(loads=watch_loads(report, trim, pass_over)),
        "get": get,
        "iter_jsonlines": iter_jsonlines,
    }
    for name, hook in {**hooks, "request": request}.items():
        setattr(api, name, hook)


def uninstall() -> None:
    """Put kopf's own decoding back (tests)."""
    from kopf._cogs.clients import api

    if _Installed.originals is not None:
        for name, original in _Installed.originals.items():
            setattr(api, name, original)
        _Installed.originals = None
