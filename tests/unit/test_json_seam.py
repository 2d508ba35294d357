"""The depth-safe decoding of what the API server sends (kube.json_seam, core.depth) and the
health check it feeds: pure functions, no API server."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from takoform_operator.core.depth import (
    MAX_DEPTH,
    PRUNED,
    prune,
    pruned_paths,
    safe_loads,
    too_deep_message,
)
from takoform_operator.health import RETRIED_WITHIN, Health
from takoform_operator.kube.json_seam import (
    LIST_LIMIT,
    RELIST_LINE,
    UNREADABLE_EVENT,
    WATCH_LIMIT,
    ListReader,
    WatchRestarts,
    identity,
    install,
    list_loads,
    trim_answer,
    uninstall,
    watch_loads,
)


def nested(depth: int) -> str:
    return '{"a":' * depth + '"x"' + "}" * depth


def event(spec: str, name: str = "deep") -> str:
    return (
        '{"type":"ADDED","object":{"apiVersion":"storage.takoform.io/v1","kind":"Bucket",'
        '"metadata":{"labels":{"name":"fake"},"managedFields":[{"fieldsV1":{"f:name":{}}}],'
        f'"name":"{name}","namespace":"team"}},"spec":{spec}}}}}'
    )


def test_python_json_cannot_read_what_the_api_server_accepts() -> None:
    # The defect: 9,992 levels are accepted and served by the API server (tests/e2e).
    with pytest.raises(RecursionError):
        json.loads(event(nested(9992)))


@pytest.mark.parametrize("depth", [1000, 9992, 50_000])
def test_a_deep_watch_line_is_read_with_the_deep_part_cut(depth: int) -> None:
    decoded = safe_loads(event(nested(depth)), WATCH_LIMIT)
    assert decoded["object"]["metadata"]["name"] == "deep"
    paths = pruned_paths(decoded["object"]["spec"], "spec")
    assert len(paths) == 1
    assert paths[0] == "spec" + ".a" * (MAX_DEPTH - 1)


def test_the_object_keeps_exactly_max_depth_levels() -> None:
    # The object is level 1, its spec level 2: a spec of 63 levels is the deepest read whole.
    deepest = safe_loads(event(nested(MAX_DEPTH - 1)), WATCH_LIMIT)
    assert pruned_paths(deepest, "") == []
    cut = safe_loads(event(nested(MAX_DEPTH)), WATCH_LIMIT)
    assert pruned_paths(cut["object"]["spec"], "spec") != []


def test_a_list_page_cuts_only_the_deep_item() -> None:
    ok = {"metadata": {"name": "ok"}, "spec": {"labels": {"team": "a"}}}
    page = (
        '{"kind":"BucketList","items":[' + json.dumps(ok) + ","
        '{"metadata":{"name":"deep"},"spec":' + nested(5000) + "}]}"
    )
    decoded = safe_loads(page, LIST_LIMIT)
    assert decoded["items"][0] == ok
    assert pruned_paths(decoded["items"][1]["spec"], "spec") == ["spec" + ".a" * (MAX_DEPTH - 1)]


def test_brackets_inside_strings_do_not_count() -> None:
    text = json.dumps({"a": "[[[[{{{{" * 100, "b": {"c": "]]]}}}" * 50}})
    assert safe_loads(text, 2) == json.loads(text)
    assert prune(text, 2) == text


def test_integers_python_refuses_are_cut_not_raised() -> None:
    decoded = safe_loads('{"a": ' + "9" * 5000 + ', "b": 12}', 4)
    assert decoded == {"a": PRUNED, "b": 12}


@settings(max_examples=200)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
        lambda children: (
            st.lists(children, max_size=4)
            | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=30,
    )
)
def test_anything_shallow_decodes_exactly_as_json_does(value: Any) -> None:
    text = json.dumps(value)
    assert safe_loads(text, LIST_LIMIT) == json.loads(text)


def test_an_unreadable_line_is_reported_by_name_and_skipped() -> None:
    reports: list[tuple[dict[str, str], str]] = []
    loads = watch_loads(lambda found, why: reports.append((found, why)))
    line = event('{"a": tru')  # cut short: not JSON at all
    assert loads(line) == {"type": UNREADABLE_EVENT, "object": {}}
    assert reports[0][0] == {"kind": "Bucket", "namespace": "team", "name": "deep"}
    assert loads(line.encode()) == {"type": UNREADABLE_EVENT, "object": {}}


def test_identity_is_not_fooled_by_deeper_keys_and_cleans_control_characters() -> None:
    assert identity(event("{}", name="a\\u001b[31mb")) == {
        "kind": "Bucket",
        "namespace": "team",
        "name": "a\\u001b[31mb",
    }
    found = identity('{"metadata":{"labels":{"name":"x"},"name":"n\x1bm"},"kind":"K"}')
    assert found == {"name": "n?m", "kind": "K"}
    assert identity("not json at all") == {}


def test_the_message_names_the_place_briefly() -> None:
    key = "k" * 10_000
    paths = pruned_paths({"parameters": {"labels": {key: {"a": PRUNED}, "b": [PRUNED]}}}, "spec")
    assert len(paths) == 2 and all(len(p) <= 200 for p in paths)
    message = too_deep_message(paths)
    assert message.startswith("spec.parameters.labels.kkk") and "(and 1 more)" in message
    assert len(message) < 400


def test_a_watch_failing_for_long_enough_makes_healthz_fail() -> None:
    now = [100.0]
    health = Health(watch_failure_seconds=60, clock=lambda: now[0])
    health.requested("/apis/storage.takoform.io/v1/buckets", False)
    now[0] += 59
    health.requested("/apis/storage.takoform.io/v1/buckets", False)  # still the first failure
    assert health.failing() == []
    now[0] += 1
    assert health.failing() == ["/apis/storage.takoform.io/v1/buckets"]
    answer = asyncio.run(health._healthz(None))  # type: ignore[arg-type]
    assert answer.status == 503 and "/apis/storage.takoform.io/v1/buckets" in str(answer.text)
    health.requested("/apis/storage.takoform.io/v1/buckets", True)
    assert health.failing() == []
    assert asyncio.run(health._healthz(None)).status == 200  # type: ignore[arg-type]


def test_a_watch_kopf_no_longer_runs_stops_counting() -> None:
    now = [0.0]
    health = Health(watch_failure_seconds=10, clock=lambda: now[0])
    health.requested("/apis/gone.example/v1/things", False)
    now[0] += 60
    health.requested("/apis/gone.example/v1/things", False)
    assert health.failing() == ["/apis/gone.example/v1/things"]
    now[0] += RETRIED_WITHIN + 1  # no request since: its watcher was stopped (CRD deleted)
    assert health.failing() == []


def test_a_list_page_that_still_fails_is_read_item_by_item() -> None:
    reports: list[tuple[dict[str, str], str]] = []
    ok = {"kind": "Bucket", "metadata": {"name": "ok", "namespace": "team"}, "spec": {}}
    broken = '{"kind":"Bucket","metadata":{"name":"broken","namespace":"team"},"spec":{"a": tru}}'
    page = (
        '{"apiVersion":"v1","kind":"BucketList","metadata":{"resourceVersion":"42",'
        '"continue":""},"items":[' + json.dumps(ok) + "," + broken + "," + json.dumps(ok) + "]}"
    )
    decoded = list_loads(page, lambda found, why: reports.append((found, why)))
    assert decoded["items"] == [ok, ok]
    assert decoded["metadata"] == {"resourceVersion": "42", "continue": ""}
    assert [found for found, _ in reports] == [
        {"kind": "Bucket", "namespace": "team", "name": "broken"}
    ]
    with pytest.raises(ValueError):
        list_loads('{"items": [', lambda found, why: None)


def test_the_seam_replaces_only_kopfs_decoding_and_puts_it_back() -> None:
    from kopf._cogs.clients import api

    before = (api.json, api.get, api.request, api.iter_jsonlines)
    reports: list[dict[str, str]] = []
    install(lambda found, why: reports.append(found), lambda path, ok: None)
    try:
        assert api.json.loads(event(nested(5000)))["object"]["metadata"]["name"] == "deep"
        assert api.json.loads("{") == {"type": UNREADABLE_EVENT, "object": {}}
        assert reports == [{}]

        class Content:
            async def iter_chunked(self, size: int) -> Any:
                yield b'{"a": "\xff"}\n{"b": 1}\n'

        async def lines() -> list[bytes]:
            return [line async for line in api.iter_jsonlines(Content())]

        assert asyncio.run(lines()) == ['{"a": "\ufffd"}'.encode(), b'{"b": 1}']
    finally:
        uninstall()
    assert (api.json, api.get, api.request, api.iter_jsonlines) == before


def _depth(value: Any) -> int:
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@settings(max_examples=300)
@given(
    st.recursive(
        st.integers() | st.text(st.sampled_from('ab"\\{}[]:,\x00é')),
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(st.sampled_from('k"\\{['), max_size=4), children, max_size=3)
        ),
        max_leaves=25,
    ),
    st.integers(1, 5),
)
def test_exactly_the_values_deeper_than_the_limit_are_cut(value: Any, limit: int) -> None:
    # Strings full of quotes, backslashes and brackets must not confuse the depth.
    decoded = safe_loads(json.dumps(value), limit)
    if _depth(value) <= limit:
        assert decoded == value
    else:
        assert pruned_paths(decoded, "") != [] and _depth(decoded) <= limit


def _slim(found: Any) -> Any:
    return {"trimmed": found["metadata"]["name"]} if isinstance(found, dict) else found


@pytest.mark.parametrize("kind", ["ADDED", "MODIFIED", "DELETED"])
def test_a_watch_events_object_is_trimmed_as_it_is_decoded(kind: str) -> None:
    line = json.dumps({"type": kind, "object": {"metadata": {"name": "a", "labels": {"x": "y"}}}})
    assert watch_loads(lambda *_: None, _slim)(line) == {"type": kind, "object": {"trimmed": "a"}}


def test_a_bookmark_is_not_trimmed() -> None:
    event = {"type": "BOOKMARK", "object": {"metadata": {"name": "a", "resourceVersion": "9"}}}
    assert watch_loads(lambda *_: None, _slim)(json.dumps(event)) == event


def test_an_event_passed_over_reaches_kopf_as_a_bookmark_of_its_version() -> None:
    """kopf takes its place in the watch from a BOOKMARK and runs nothing for it; what decides
    is given the event's type and its object as trimmed."""
    asked: list[tuple[str, Any]] = []

    def pass_over(kind: str, found: Any) -> bool:
        asked.append((kind, found))
        return kind == "DELETED"

    def without_spec(found: Any) -> Any:
        return {key: value for key, value in found.items() if key != "spec"}

    loads = watch_loads(lambda *_: None, without_spec, pass_over)
    metadata = {"name": "a", "resourceVersion": "9"}
    for kind in ("ADDED", "DELETED"):
        line = json.dumps({"type": kind, "object": {"metadata": metadata, "spec": {"x": 1}}})
        loaded = loads(line)
        if kind == "ADDED":
            assert loaded == {"type": "ADDED", "object": {"metadata": metadata}}
        else:
            assert loaded == {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}
    assert asked == [("ADDED", {"metadata": metadata}), ("DELETED", {"metadata": metadata})]
    # Without a resourceVersion of its own, kopf goes on from the last one it took.
    gone = json.dumps({"type": "DELETED", "object": {"metadata": {"name": "a"}}})
    assert loads(gone) == {"type": "BOOKMARK", "object": {"metadata": {}}}


def test_an_item_passed_over_is_left_out_of_its_list_page() -> None:
    """kopf runs nothing for a listed object it is not given (a listing says nothing of the
    objects it leaves out); what decides is given each item as trimmed, as an ADDED event."""
    asked: list[tuple[str, Any]] = []

    def pass_over(kind: str, found: Any) -> bool:
        asked.append((kind, found))
        return found["metadata"]["name"] == "theirs"

    page = {"metadata": {"resourceVersion": "5"}, "items": [
        {"metadata": {"name": name}, "spec": {"x": 1}} for name in ("ours", "theirs", "again")
    ]}  # fmt: skip
    reader = ListReader(lambda *_: None, lambda found: {"metadata": found["metadata"]}, pass_over)
    reader.feed(json.dumps(page).encode())
    assert reader.close() == {
        "metadata": {"resourceVersion": "5"},
        "items": [{"metadata": {"name": "ours"}}, {"metadata": {"name": "again"}}],
    }
    assert [(kind, found["metadata"]["name"]) for kind, found in asked] == [
        ("ADDED", "ours"), ("ADDED", "theirs"), ("ADDED", "again"),
    ]  # fmt: skip


def test_each_item_of_a_list_page_is_trimmed_and_so_is_a_single_object() -> None:
    page = {"metadata": {"resourceVersion": "5"}, "items": [{"metadata": {"name": "a"}}]}
    assert trim_answer(page, _slim) == {"metadata": {"resourceVersion": "5"},
                                        "items": [{"trimmed": "a"}]}  # fmt: skip
    assert trim_answer({"metadata": {"name": "b"}}, _slim) == {"trimmed": "b"}


def _read_in_chunks(page: str, cuts: list[int], trim: Any = None) -> tuple[Any, list[Any]]:
    reports: list[Any] = []
    reader = ListReader(lambda found, why: reports.append(found), *([trim] if trim else []))
    data, at = page.encode(), 0
    for cut in sorted(cuts):
        reader.feed(data[at:cut])
        at = max(at, cut)
    reader.feed(data[at:])
    return reader.close(), reports


_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(st.sampled_from('ab"\\{}[]:,\x00é中😀'), max_size=6),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=4), children, max_size=3)
    ),
    max_leaves=12,
)
_items = st.lists(
    st.dictionaries(st.text(max_size=5), _values, max_size=4)
    | st.sampled_from(
        [
            '{"metadata":{"name":"deep"},"spec":' + nested(5000) + "}",
            '{"metadata":{"name":"deep-ish"},"spec":' + nested(MAX_DEPTH + 3) + "}",
            '{"kind":"Bucket","metadata":{"name":"broken","namespace":"t"},"spec":{"a": tru}}',
            '{"n":' + "9" * 5000 + "}",
            '{"s":"\u00e9\u4e2d\U0001f600 ] } [ { \\" ,"}',
        ]
    ),
    max_size=6,
)


@settings(max_examples=150)
@given(_items, st.lists(st.integers(0, 40_000), max_size=6), st.booleans())
def test_a_page_read_in_chunks_is_what_list_loads_reads(
    items: list[Any], cuts: list[int], head_last: bool
) -> None:
    text = ",".join(i if isinstance(i, str) else json.dumps(i) for i in items)
    head = '"apiVersion":"v1","kind":"BucketList","metadata":{"resourceVersion":"7","continue":""}'
    page = (
        "{" + head + ',"items":[' + text + "]}"
        if not head_last
        else ('{"items":[' + text + "]," + head + "}")
    )
    expected: list[Any] = []
    assert _read_in_chunks(page, cuts) == (
        list_loads(page, lambda found, why: expected.append(found)),
        expected,
    )


def test_each_item_of_a_page_read_in_chunks_is_trimmed_as_it_arrives() -> None:
    page = json.dumps({"kind": "BucketList", "items": [{"metadata": {"name": n}} for n in "ab"]})
    decoded, _ = _read_in_chunks(page, [10, 20, 30], trim=lambda item: item["metadata"]["name"])
    assert decoded == {"kind": "BucketList", "items": ["a", "b"]}
    with pytest.raises(ValueError):
        _read_in_chunks('{"items": [{"a": 1},', [5])


class _Stream:
    """An answer to a GET whose body yields one watch line, then waits until it is closed."""

    def __init__(self) -> None:
        self.content = self
        self.closed = asyncio.Event()

    def close(self) -> None:
        self.closed.set()

    async def iter_chunked(self, size: int) -> Any:
        yield b'{"type": "ADDED", "object": {}}\n'
        await self.closed.wait()
        raise aiohttp.ClientConnectionError("closed")


def test_a_watch_whose_label_selector_changed_ends_so_that_kopf_lists_again() -> None:
    from kopf._cogs.clients import api

    restarts = WatchRestarts([("storage.takoform.io", "v1", "buckets")])
    path = "/apis/storage.takoform.io/v1/namespaces/ns/buckets"
    restarts.change("s notin (1)")

    async def scenario() -> None:
        restarts.requested(f"{path}?limit=500&labelSelector=s+notin+%281%29", _Stream())
        watch = _Stream()
        restarts.requested(f"{path}?watch=true&labelSelector=s+notin+%281%29", watch)
        lines = api.iter_jsonlines(watch.content)
        assert await anext(lines) == b'{"type": "ADDED", "object": {}}'
        restarts.change("s notin (2)")  # ends it, idle as it is
        assert watch.closed.is_set()
        assert [line async for line in lines] == [RELIST_LINE]
        # Opened with the new selector, but continuing a list made with the old one.
        late = _Stream()
        restarts.requested(f"{path}?watch=true&labelSelector=s+notin+%282%29", late)
        assert [line async for line in api.iter_jsonlines(late.content)] == [RELIST_LINE]
        # Another resource's watch is not ended.
        other = _Stream()
        restarts.requested("/apis/storage.takoform.io/v1/others?watch=true", other)
        restarts.change("s notin (3)")
        assert not other.closed.is_set()

    install(lambda found, why: None, lambda path, ok: None, restarts=restarts)
    try:
        asyncio.run(scenario())
    finally:
        uninstall()
    assert json.loads(RELIST_LINE)["object"]["code"] == 410  # what kopf lists again after
