"""Asynchronous mutations, the commit window, the envelope, fences and idempotency keys."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import httpx
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


@pytest.fixture(scope="module")
def slow_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A host whose mutations take 0.6 s to commit (held open by `held` where a test looks inside
    the window)."""
    from processes import HostProcess

    with HostProcess(tmp_path_factory.mktemp("slow-host"), commit_delay=0.6) as host:
        yield host


@contextlib.contextmanager
def held(host: Any) -> Iterator[None]:
    """Nothing commits inside: the window stays open however slowly this machine answers (a
    0.6 s delay alone closed it between a 202 and the next read under load). Leaving it lets
    what is due commit."""
    host.set_faults(stuckOperations=True)
    try:
        yield
    finally:
        host.set_faults(stuckOperations=False)


@pytest.fixture
def client(reference_host: Any) -> Iterator[httpx.Client]:
    with reference_host.api() as c:
        yield c


def test_create_is_invisible_until_its_operation_commits(slow_host: Any) -> None:
    with slow_host.api() as client:
        space, ref = new_space(client), form_ref(client)
        with held(slow_host):
            accepted = create(client, space, ref, "logs")
            assert accepted.status_code == 202, accepted.text
            record = accepted.json()
            assert accepted.headers["location"] == f"{API}/operations/{record['id']}"
            assert record["state"] == "running" and record["verb"] == "create"
            assert record["formRef"] == ref and record["space"] == space
            assert record["name"] == "logs"
            assert record["error"] is None and record["settledAt"] is None
            uid = record["resourceUid"]
            assert uid  # assigned at acceptance (H-31)
            # the window: the resource does not exist yet, the record says running (H-20)
            assert error_code(read(client, space, ref, "logs")) == "resource_not_found"
            assert client.get(accepted.headers["location"]).json()["state"] == "running"
            # a second create for the name is refused, naming the running operation (H-26)
            second = create(client, space, ref, "logs", Idempotency_Key="another")
            assert second.status_code == 409
            assert second.json()["error"]["details"]["operationId"] == record["id"]
        settled = wait_settled(client, record["id"])
        assert settled["state"] == "succeeded" and settled["error"] is None
        assert settled["resourceUid"] == uid and settled["settledAt"]
        got = read(client, space, ref, "logs")
        assert got.status_code == 200
        assert got.json()["metadata"]["uid"] == uid
        assert got.headers["etag"] == '"1"'


def test_update_and_delete_are_invisible_until_committed(slow_host: Any) -> None:
    with slow_host.api() as client:
        space, ref = new_space(client), form_ref(client)
        wait_settled(client, create(client, space, ref, "logs").json()["id"])
        path, q = resource_path(space, ref, "logs"), query(ref)
        spec = {**BUCKET_SPEC, "sizeGiB": 20}
        with held(slow_host):
            update = client.put(
                path, params=q, json={"spec": spec}, headers={"Takoform-Expected-Generation": "1"}
            )
            assert update.status_code == 202
            assert update.json()["resultGeneration"] == "2"
            during = read(client, space, ref, "logs").json()
            assert during["spec"]["sizeGiB"] == 10 and during["metadata"]["generation"] == "1"
            busy = client.delete(path, params=q)
            assert busy.status_code == 409
            assert busy.json()["error"]["details"]["operationId"] == update.json()["id"]
        wait_settled(client, update.json()["id"])
        after = read(client, space, ref, "logs").json()
        assert after["spec"]["sizeGiB"] == 20 and after["metadata"]["generation"] == "2"
        assert after["status"]["observedGeneration"] == "2"
        with held(slow_host):
            delete = client.delete(path, params=q)
            assert delete.status_code == 202
            assert read(client, space, ref, "logs").status_code == 200
        assert wait_settled(client, delete.json()["id"])["state"] == "succeeded"
        assert error_code(read(client, space, ref, "logs")) == "resource_not_found"


def test_envelope_generation_revision_and_defaults(client: httpx.Client) -> None:
    space, ref = new_space(client), form_ref(client)
    wait_settled(client, create(client, space, ref, "env").json()["id"])
    path, q = resource_path(space, ref, "env"), query(ref)
    doc = client.get(path, params=q).json()
    meta, status = doc["metadata"], doc["status"]
    assert doc["formRef"] == ref
    assert (meta["generation"], meta["revision"], status["observedGeneration"]) == ("1", "1", "1")
    # declared defaults of omitted optional fields are applied (H-27)
    assert doc["spec"] == {**BUCKET_SPEC, "public": False, "versioning": False}
    assert set(status["outputs"]) == {"endpoint", "arn", "versioningStatus"}
    ready = status["conditions"][0]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "Available")
    # observe: status changes, revision moves, generation does not (H-15, H-19)
    observed = client.post(path + "/observe", params=q)
    assert observed.status_code == 200 and observed.headers["etag"] == '"2"'
    assert observed.json()["metadata"]["generation"] == "1"
    assert observed.json()["spec"] == doc["spec"]
    # an update with an equal spec (defaults included) changes nothing (H-14)
    same = client.put(
        path,
        params=q,
        json={"spec": {**BUCKET_SPEC, "public": False}},
        headers={"Takoform-Expected-Generation": "1", "If-Match": '"2"'},
    )
    assert same.status_code == 202 and same.json()["resultGeneration"] == "1"
    assert wait_settled(client, same.json()["id"])["state"] == "succeeded"
    unchanged = client.get(path, params=q)
    assert unchanged.headers["etag"] == '"2"'
    assert unchanged.json()["metadata"]["generation"] == "1"
    assert unchanged.json()["metadata"]["uid"] == meta["uid"]


def test_fences(client: httpx.Client) -> None:
    space, ref = new_space(client), form_ref(client)
    wait_settled(client, create(client, space, ref, "fenced").json()["id"])
    path, q = resource_path(space, ref, "fenced"), query(ref)
    uid = client.get(path, params=q).json()["metadata"]["uid"]
    body = {"spec": {**BUCKET_SPEC, "sizeGiB": 11}}

    def put(**headers: str) -> httpx.Response:
        return client.put(path, params=q, json=body, headers=headers)

    exists = create(client, space, ref, "fenced")
    assert exists.status_code == 412 and error_code(exists) == "resource_exists"
    stale = put(**{"Takoform-Expected-Generation": "7"})
    assert stale.status_code == 412 and error_code(stale) == "generation_conflict"
    assert stale.json()["error"]["details"] == {"expected": "7", "current": "1"}
    revision = put(**{"Takoform-Expected-Generation": "1", "If-Match": '"5"'})
    assert revision.status_code == 412 and error_code(revision) == "revision_conflict"
    wrong_uid = put(**{"Takoform-Expected-Generation": "1", "Takoform-Expected-Uid": "nope"})
    assert wrong_uid.status_code == 412 and error_code(wrong_uid) == "uid_mismatch"
    assert wrong_uid.json()["error"]["details"] == {"expected": "nope", "current": uid}
    delete = client.delete(path, params=q, headers={"If-Match": '"9"'})
    assert error_code(delete) == "revision_conflict"
    immutable = client.put(
        path,
        params=q,
        json={"spec": {**BUCKET_SPEC, "region": "us-east-1"}},
        headers={"Takoform-Expected-Generation": "1"},
    )
    assert (
        immutable.status_code == 422 and immutable.json()["error"]["details"]["field"] == "region"
    )
    after = client.get(path, params=q)
    assert after.headers["etag"] == '"1"' and after.json()["spec"]["sizeGiB"] == 10
    ok = put(
        **{"Takoform-Expected-Generation": "1", "If-Match": '"1"', "Takoform-Expected-Uid": uid}
    )
    assert ok.status_code == 202
    assert wait_settled(client, ok.json()["id"])["state"] == "succeeded"


def test_a_resource_is_visible_only_under_its_exact_form_ref(client: httpx.Client) -> None:
    space, ref = new_space(client), form_ref(client)
    old = form_ref(client, version="1.0.0")
    wait_settled(client, create(client, space, ref, "exact").json()["id"])
    assert error_code(read(client, space, old, "exact")) == "resource_not_found"
    clash = create(client, space, old, "exact", spec=BUCKET_SPEC)
    assert clash.status_code == 412 and error_code(clash) == "resource_exists"
    assert client.delete(resource_path(space, old, "exact"), params=query(old)).status_code == 404


def test_idempotency_key_replays_the_original_operation(client: httpx.Client) -> None:
    space, ref = new_space(client), form_ref(client)
    first = create(client, space, ref, "idem", Idempotency_Key="key-1")
    assert first.status_code == 202
    op_id = first.json()["id"]
    assert first.json()["idempotencyKey"] == "key-1"
    again = create(client, space, ref, "idem", Idempotency_Key="key-1")
    assert again.status_code in (200, 202) and again.json()["id"] == op_id
    settled = wait_settled(client, op_id)
    replay = create(client, space, ref, "idem", Idempotency_Key="key-1")
    assert replay.status_code == 200
    assert replay.content == client.get(f"{API}/operations/{op_id}").content
    assert replay.json() == settled
    listing = client.get(f"{API}/operations", params={"space": space, "name": "idem"}).json()
    assert [op["id"] for op in listing["items"]] == [op_id]
    doc = read(client, space, ref, "idem").json()
    assert doc["metadata"]["creationIdempotencyKey"] == "key-1"
    assert doc["metadata"]["uid"] == settled["resourceUid"]
    reused = create(
        client, space, ref, "idem", spec={**BUCKET_SPEC, "sizeGiB": 2}, Idempotency_Key="key-1"
    )
    assert reused.status_code == 422 and error_code(reused) == "idempotency_key_reused"
    assert reused.json()["error"]["details"]["operationId"] == op_id
    other_name = create(client, space, ref, "idem-2", Idempotency_Key="key-1")
    assert error_code(other_name) == "idempotency_key_reused"
    assert read(client, space, ref, "idem").json()["spec"]["sizeGiB"] == 10


def test_operation_records_replay_byte_identically(client: httpx.Client) -> None:
    space, ref = new_space(client), form_ref(client)
    op_id = create(client, space, ref, "replay").json()["id"]
    wait_settled(client, op_id)
    first = client.get(f"{API}/operations/{op_id}").content
    path, q = resource_path(space, ref, "replay"), query(ref)
    update = client.put(
        path,
        params=q,
        json={"spec": {**BUCKET_SPEC, "sizeGiB": 3}},
        headers={"Takoform-Expected-Generation": "1"},
    )
    wait_settled(client, update.json()["id"])
    assert client.post(path + "/observe", params=q).status_code == 200  # written when answered
    assert client.get(f"{API}/operations/{op_id}").content == first
    history = client.get(f"{API}/operations", params={"space": space, "name": "replay"}).json()
    assert [op["verb"] for op in history["items"]] == ["update", "create"]


def test_spaces(client: httpx.Client) -> None:
    space = new_space(client)
    assert client.put(f"{API}/spaces/{space}").status_code == 200
    assert client.get(f"{API}/spaces/{space}").json()["space"]["name"] == space
    ref = form_ref(client)
    wait_settled(client, create(client, space, ref, "held").json()["id"])
    assert error_code(client.delete(f"{API}/spaces/{space}")) == "space_not_empty"
    op = client.delete(resource_path(space, ref, "held"), params=query(ref)).json()
    wait_settled(client, op["id"])
    assert client.delete(f"{API}/spaces/{space}").status_code == 204
    assert error_code(client.get(f"{API}/spaces/{space}")) == "space_not_found"
    odd = "Team A ✓ %"
    assert client.put(f"{API}/spaces/{httpx.URL(odd).raw_path.decode()}").status_code in (
        200,
        201,
    )


def test_definition_schema_hashes_to_the_schema_digest(client: httpx.Client) -> None:
    from takoform_spec.canonical import canonical_json, sha256_digest

    for item in client.get(f"{API}/forms").json()["items"]:
        ref = item["formRef"]
        got = client.get(
            f"{API}/forms/{ref['apiVersion']}/{ref['kind']}/definition", params=query(ref)
        )
        assert got.status_code == 200
        assert sha256_digest(canonical_json(got.json()["schema"])) == ref["schemaDigest"]
        assert got.json()["packageDigests"] == item["packageDigests"]
    mirrored = [
        i for i in client.get(f"{API}/forms").json()["items"] if len(i["packageDigests"]) > 1
    ]
    assert mirrored, "the shipped mirror package gives one FormRef two packages"
