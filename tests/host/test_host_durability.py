"""H-35: an acknowledged mutation (a 202 sent) survives kill -9, and so does every record."""

from __future__ import annotations

from typing import Any

import pytest
from waiting import wait_settled

from .helpers import (
    API,
    BUCKET_SPEC,
    create,
    error_code,
    form_ref,
    new_space,
    query,
    read,
    resource_path,
)

pytestmark = pytest.mark.host

#: Long enough that the second batch is still running when the host is killed, even on a machine
#: loaded by parallel tests (its due time is stored: it settles that long after the 202).
PENDING_DELAY_MS = 8000


def test_acknowledged_mutations_survive_kill_9(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.02)
    with host.api() as client:
        space, ref = new_space(client, "durable"), form_ref(client)
        q = query(ref)

        def update(name: str, generation: str, size: int) -> dict[str, Any]:
            response = client.put(
                resource_path(space, ref, name),
                params=q,
                json={"spec": {**BUCKET_SPEC, "sizeGiB": size}},
                headers={"Takoform-Expected-Generation": generation},
            )
            assert response.status_code == 202, response.text
            record: dict[str, Any] = response.json()
            return record

        # settled history: creates, an update, a delete
        settled = [
            wait_settled(
                client, create(client, space, ref, n, Idempotency_Key=f"k-{n}").json()["id"]
            )
            for n in ("a", "b", "c", "d")
        ]
        settled.append(wait_settled(client, update("b", "1", 20)["id"]))
        delete_c = client.delete(resource_path(space, ref, "c"), params=q).json()
        settled.append(wait_settled(client, delete_c["id"]))
        bodies = {op["id"]: client.get(f"{API}/operations/{op['id']}").content for op in settled}
        uids = {n: read(client, space, ref, n).json()["metadata"]["uid"] for n in ("a", "b", "d")}
        revisions = {n: read(client, space, ref, n).headers["etag"] for n in ("a", "b", "d")}

        # acknowledged but still running when the host dies
        host.set_faults(commitDelayMs=PENDING_DELAY_MS)
        pending_create = create(client, space, ref, "e", Idempotency_Key="k-e").json()
        pending_update = update("a", "1", 30)
        pending_delete = client.delete(resource_path(space, ref, "d"), params=q).json()
        host.kill()

        host.start()
        # every settled record is intact, byte for byte
        for op_id, body in bodies.items():
            assert client.get(f"{API}/operations/{op_id}").content == body
        # every committed effect is there
        assert read(client, space, ref, "b").json()["spec"]["sizeGiB"] == 20
        assert error_code(read(client, space, ref, "c")) == "resource_not_found"
        # (on a loaded machine a pending delete may have committed before the kill: then, and
        # only then, its resource is gone)
        delete_ran = client.get(f"{API}/operations/{pending_delete['id']}").json()["state"]
        for name, uid in uids.items():
            doc = read(client, space, ref, name)
            if name == "d" and delete_ran != "running":
                assert error_code(doc) == "resource_not_found"
            else:
                assert doc.json()["metadata"]["uid"] == uid
        # the idempotency keys survived: a re-sent create gets its original operation
        replay = create(client, space, ref, "a", Idempotency_Key="k-a")
        assert replay.status_code == 200 and replay.json()["id"] == settled[0]["id"]
        # the running operations were not lost, and their effects are not visible early
        pending = (pending_create, pending_update, pending_delete)
        for op in pending:
            record = client.get(f"{API}/operations/{op['id']}").json()
            assert record["id"] == op["id"] and record["resourceUid"] == op["resourceUid"]
            if record["state"] == "running":
                assert record == op
        if client.get(f"{API}/operations/{pending_update['id']}").json()["state"] == "running":
            assert read(client, space, ref, "a").headers["etag"] == revisions["a"]
        # ... and they settle after the restart
        for op in pending:
            assert wait_settled(client, op["id"])["state"] == "succeeded"
        e = read(client, space, ref, "e").json()
        assert e["metadata"]["uid"] == pending_create["resourceUid"]
        assert e["metadata"]["creationIdempotencyKey"] == "k-e"
        assert read(client, space, ref, "a").json()["metadata"]["generation"] == "2"
        assert error_code(read(client, space, ref, "d")) == "resource_not_found"


def test_kill_right_after_the_answer(host_factory: Any) -> None:
    """No grace period: kill -9 the instant the 202 arrives, many times over."""
    host = host_factory(commit_delay=0.0)
    with host.api() as client:
        space, ref = new_space(client, "durable"), form_ref(client)
        accepted = []
        for round_ in range(3):
            for i in range(5):
                response = create(client, space, ref, f"r{round_}-{i}")
                assert response.status_code == 202
                accepted.append(response.json())
            host.kill()
            host.start()
        for op in accepted:
            assert wait_settled(client, op["id"], timeout=10)["state"] == "succeeded"
            doc = read(client, space, ref, op["name"]).json()
            assert doc["metadata"]["uid"] == op["resourceUid"]
