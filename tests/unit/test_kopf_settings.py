"""The kopf settings the operator runs with: kopf keeps no per-event bookkeeping we never read."""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import parse_qs, urlsplit

import kopf
import pytest
from kopf._cogs.structs import bodies, diffs

from takoform_operator.kube.kopf_memories import Memories
from takoform_operator.main import LIST_PAGE, kopf_settings


def _body() -> bodies.Body:
    spec = {"space": "team-a", "parameters": {"region": "eu-west-1", "sizeGiB": 10}}
    return bodies.Body(
        {
            "apiVersion": "storage.takoform.io/v1",
            "kind": "Bucket",
            "metadata": {
                "name": "logs",
                "uid": "u-1",
                "generation": 3,
                # What kopf left on CRs in earlier releases of this operator.
                "annotations": {"takoform.io/last-handled-configuration": json.dumps({})},
                "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}],
            },
            "spec": spec,
        }
    )


def test_kopf_builds_no_diff_base_and_finds_no_difference() -> None:
    # kopf builds a diff-base (a deep copy of the whole body) for every watch event, for change
    # handlers the operator does not have: none is built, and none differs.
    storage = kopf_settings(None, "test").persistence.diffbase_storage
    body = _body()
    old, new = storage.fetch(body=body), storage.build(body=body)
    assert new == {} and old == {}
    assert not diffs.diff(old, new)
    patch = kopf.Patch()
    storage.store(body=body, patch=patch, essence=new)
    assert not patch, "no annotation is written"


async def test_initial_lists_are_read_page_by_page(monkeypatch: pytest.MonkeyPatch) -> None:
    # kopf starts a worker for each listed object without yielding to the event loop: the
    # operator's settings make it ask for pages, so a page is the most it handles at once.
    from kopf._cogs.clients import api, fetching
    from kopf._cogs.structs import references

    total = 2 * LIST_PAGE + 7
    asked: list[dict[str, list[str]]] = []

    async def get(url: str, **_: Any) -> dict[str, Any]:
        query = parse_qs(urlsplit(url).query)
        asked.append(query)
        start = int(query.get("continue", ["0"])[0])
        end = min(total, start + int(query["limit"][0]))
        items = [{"metadata": {"name": f"b{i}"}} for i in range(start, end)]
        more = str(end) if end < total else ""
        return {"items": items, "metadata": {"resourceVersion": "7", "continue": more}}

    monkeypatch.setattr(api, "get", get)
    bucket = references.Resource("storage.takoform.io", "v1", "buckets", namespaced=True)
    pages = [
        len(chunk)
        async for chunk, _ in fetching.fetch_objs(
            settings=kopf_settings(None, "test"),
            resource=bucket,
            namespace=None,
            logger=logging.getLogger(),
        )
    ]
    assert pages == [LIST_PAGE, LIST_PAGE, 7]
    assert [q["limit"] for q in asked] == [[str(LIST_PAGE)]] * 3


async def test_kopf_keeps_no_record_of_a_form_cr_between_its_events() -> None:
    # kopf's record of an object (memo, throttler, indexing and daemon state) lives as long as
    # the object: a CR's is made per event and dropped, an indexed kind's is kept.
    memories = Memories(lambda body: body.get("kind") == "Bucket")
    cr = {"apiVersion": "storage.takoform.io/v1", "kind": "Bucket", "metadata": {"uid": "u-1"}}
    host = {"apiVersion": "operator.takoform.io/v1alpha1", "kind": "TakoformHost",
            "metadata": {"uid": "u-2"}}  # fmt: skip
    assert await memories.recall(cr) is not await memories.recall(cr)
    assert await memories.recall(host) is await memories.recall(host)
    assert len(list(memories.iter_all_memories())) == 1
