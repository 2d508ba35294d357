"""The watch echo of the operator's own writes is recognised exactly, and only it is dropped."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from takoform_operator.kube.echoes import OwnWrites
from takoform_operator.kube.json_seam import install, uninstall


def _cr(uid: str = "u-1", version: str = "12", **metadata: Any) -> dict[str, Any]:
    return {
        "apiVersion": "storage.takoform.io/v1",
        "kind": "Bucket",
        "metadata": {"name": "logs", "uid": uid, "resourceVersion": version, **metadata},
        "spec": {"space": "team-a"},
        "status": {"observedGeneration": 1},
    }


def _line(kind: str, body: dict[str, Any]) -> bytes:
    # As the API server writes a watch line: compact JSON, one per line.
    return json.dumps({"type": kind, "object": body}, separators=(",", ":")).encode() + b"\n"


def test_the_echo_of_a_write_is_dropped_once_and_anything_else_goes_through() -> None:
    writes = OwnWrites()
    writes.wrote(_cr(version="12"))
    assert not writes.echo(_line("MODIFIED", _cr(version="13"))), "someone else's later write"
    assert not writes.echo(_line("MODIFIED", _cr(uid="u-2", version="12"))), "another object"
    assert not writes.echo(_line("DELETED", _cr(version="12"))), "a deletion always goes through"
    assert writes.echo(_line("MODIFIED", _cr(version="12")))
    assert not writes.echo(_line("MODIFIED", _cr(version="12"))), "delivered again: processed"
    writes.wrote(_cr(version="14"))  # the finalizer
    writes.wrote(_cr(version="15"))  # the status, written before the finalizer's echo came
    assert writes.echo(_line("MODIFIED", _cr(version="14")))
    assert writes.echo(_line("ADDED", _cr(version="15")))  # a create's echo is ADDED
    assert (writes.lines, writes.dropped, len(writes)) == (7, 3, 0)


def test_a_forged_resource_version_elsewhere_in_the_object_is_not_taken_for_it() -> None:
    # Whoever may edit the CR may put any text in it: only metadata.resourceVersion counts.
    writes = OwnWrites()
    writes.wrote(_cr(version="12"))
    forged = _cr(version="13", annotations={"resourceVersion": "12"}, uid="u-1")
    forged["spec"]["resourceVersion"] = "12"
    assert not writes.echo(_line("MODIFIED", forged))
    assert writes.echo(_line("MODIFIED", _cr(version="12")))


def test_a_line_too_deep_for_the_plain_decoder_is_not_an_echo() -> None:
    writes = OwnWrites()
    writes.wrote(_cr(version="12"))
    line = _line("MODIFIED", _cr(version="12"))
    deep = line.replace(b'"spec":{', b'"spec":{"parameters":' + b"[" * 3000 + b"]" * 3000 + b",")
    assert not writes.echo(deep)
    assert writes.echo(line)


def test_records_are_bounded_oldest_first() -> None:
    writes = OwnWrites(limit=2)
    for i in range(3):
        writes.wrote(_cr(uid=f"u-{i}", version=str(10 + i)))
    assert len(writes) == 2
    assert not writes.echo(_line("MODIFIED", _cr(uid="u-0", version="10")))
    assert writes.echo(_line("MODIFIED", _cr(uid="u-2", version="12")))


def test_answers_without_identity_record_nothing() -> None:
    writes = OwnWrites()
    for answer in ({}, {"metadata": {"uid": "u-1"}}, {"metadata": None}, []):
        writes.wrote(answer)
    assert len(writes) == 0
    assert not writes.echo(_line("MODIFIED", _cr()))


def test_kopf_never_sees_the_lines_the_seam_is_told_to_skip() -> None:
    from kopf._cogs.clients import api

    writes = OwnWrites()
    writes.wrote(_cr(version="12"))
    mine, theirs = _line("MODIFIED", _cr(version="12")), _line("MODIFIED", _cr(version="13"))
    install(lambda found, why: None, lambda path, ok: None, writes.echo)
    try:

        class Content:
            async def iter_chunked(self, size: int) -> Any:
                yield mine + theirs

        async def lines() -> list[bytes]:
            return [line async for line in api.iter_jsonlines(Content())]

        assert [json.loads(line)["object"]["metadata"]["resourceVersion"] for line in
                asyncio.run(lines())] == ["13"]  # fmt: skip
    finally:
        uninstall()
