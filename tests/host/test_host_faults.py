"""Fault controls and out-of-band admin actions the operator's tests rely on."""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

import httpx
import pytest
from waiting import wait_settled, wait_until

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
    update,
)

pytestmark = pytest.mark.host


def _instant(stamp: str) -> float:
    """A host timestamp (RFC 3339, UTC) as seconds since the epoch."""
    return datetime.fromisoformat(stamp).timestamp()


def _target(space: str, ref: dict[str, str], name: str) -> dict[str, str]:
    return {"space": space, "apiVersion": ref["apiVersion"], "kind": ref["kind"], "name": name}


def test_stuck_operations_stay_running_until_released(host_factory: Any) -> None:
    # Retention: long enough that the stuck create is due before the marker expires, however
    # slowly a loaded machine gets from the marker's settling to that create (1 s was not).
    retention = 5.0
    host = host_factory(commit_delay=0.02, retention=retention)
    with host.api() as client:
        space, ref = new_space(client), form_ref(client)
        marker = wait_settled(client, create(client, space, ref, "marker").json()["id"])
        host.set_faults(stuckOperations=True)
        op = create(client, space, ref, "stuck").json()
        # The host's settle loop also expires records past retention. Once the marker's record
        # is gone, the loop has run at a time the stuck operation was due - and left it running.
        due = _instant(op["createdAt"]) + 0.02
        assert due <= _instant(marker["settledAt"]) + retention, "created too late to prove it"
        wait_until(
            lambda: client.get(f"{API}/operations/{marker['id']}").status_code == 404,
            "the settle loop to expire the marker's record",
            timeout=retention + 30,
        )
        assert client.get(f"{API}/operations/{op['id']}").json()["state"] == "running"
        assert error_code(read(client, space, ref, "stuck")) == "resource_not_found"
        host.set_faults(stuckOperations=False)
        assert wait_settled(client, op["id"])["state"] == "succeeded"
        assert read(client, space, ref, "stuck").json()["metadata"]["uid"] == op["resourceUid"]


def test_fail_next_operations(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.02)
    host.set_faults(failNextOperations=1)
    with host.api() as client:
        space, ref = new_space(client), form_ref(client)
        failed = wait_settled(client, create(client, space, ref, "doomed").json()["id"])
        assert failed["state"] == "failed"
        assert failed["error"]["code"] == "provisioning_failed" and failed["error"]["message"]
        assert error_code(read(client, space, ref, "doomed")) == "resource_not_found"
        assert host.admin("GET", "/admin/v1/faults").json()["failNextOperations"] == 0
        again = wait_settled(client, create(client, space, ref, "doomed").json()["id"])
        assert again["state"] == "succeeded"
        host.set_faults(failNextOperations=1)
        resized = update(client, space, ref, "doomed", {**BUCKET_SPEC, "sizeGiB": 99})
        assert wait_settled(client, resized.json()["id"])["state"] == "failed"
        assert read(client, space, ref, "doomed").json()["spec"]["sizeGiB"] == 10


def test_out_of_band_recreate_and_delete(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.02)
    with host.api() as client:
        space, ref = new_space(client), form_ref(client)
        op = wait_settled(
            client, create(client, space, ref, "oob", Idempotency_Key="mine").json()["id"]
        )
        path, q = resource_path(space, ref, "oob"), query(ref)
        client.post(path + "/observe", params=q)
        recreated = host.admin("POST", "/admin/v1/resources/recreate", _target(space, ref, "oob"))
        doc = recreated.json()
        assert doc["metadata"]["uid"] != op["resourceUid"]
        assert doc["metadata"]["generation"] == "1"
        assert doc["metadata"]["creationIdempotencyKey"] is None
        assert recreated.headers["etag"] == f'"{doc["metadata"]["revision"]}"'
        got = read(client, space, ref, "oob").json()
        assert got["metadata"]["uid"] == doc["metadata"]["uid"] and got["spec"] == doc["spec"]
        # the old incarnation's fence now fails
        stale = client.delete(path, params=q, headers={"Takoform-Expected-Uid": op["resourceUid"]})
        assert stale.status_code == 412 and error_code(stale) == "uid_mismatch"
        host.admin("POST", "/admin/v1/resources/delete", _target(space, ref, "oob"))
        assert error_code(read(client, space, ref, "oob")) == "resource_not_found"
        with pytest.raises(RuntimeError, match="404"):
            host.admin("POST", "/admin/v1/resources/recreate", _target(space, ref, "oob"))


def test_expiry_forgets_records_not_resources(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.02)
    with host.api() as client:
        space, ref = new_space(client), form_ref(client)
        a = wait_settled(client, create(client, space, ref, "a").json()["id"])
        b = wait_settled(client, create(client, space, ref, "b").json()["id"])
        host.set_faults(stuckOperations=True)
        running = create(client, space, ref, "c").json()
        result = host.admin(
            "POST", "/admin/v1/operations/expire", {"ids": [a["id"], running["id"], "op-x"]}
        ).json()
        assert result == {"expired": [a["id"]], "running": [running["id"]], "unknown": ["op-x"]}
        assert error_code(client.get(f"{API}/operations/{a['id']}")) == "operation_not_found"
        assert read(client, space, ref, "a").json()["metadata"]["uid"] == a["resourceUid"]
        assert client.get(f"{API}/operations/{b['id']}").status_code == 200
        host.admin("POST", "/admin/v1/operations/expire", {})
        assert error_code(client.get(f"{API}/operations/{b['id']}")) == "operation_not_found"
        assert client.get(f"{API}/operations/{running['id']}").json()["state"] == "running"
        assert read(client, space, ref, "b").status_code == 200
        # once expired, the key no longer replays
        host.set_faults(stuckOperations=False)
        wait_settled(client, running["id"])


def test_retention_expires_settled_records(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.02, retention=0.4)
    with host.api() as client:
        space, ref = new_space(client), form_ref(client)
        op = wait_settled(client, create(client, space, ref, "brief").json()["id"])
        wait_until(
            lambda: client.get(f"{API}/operations/{op['id']}").status_code != 200,
            "the record to expire",
            timeout=5,
        )
        assert error_code(client.get(f"{API}/operations/{op['id']}")) == "operation_not_found"
        assert read(client, space, ref, "brief").status_code == 200


def test_latency_errors_and_drops(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.02)
    with host.api() as client:
        host.set_faults(latencyMs=300)
        started = time.monotonic()
        assert client.get(f"{API}/forms").status_code == 200
        assert time.monotonic() - started >= 0.3
        host.set_faults(latencyMs=0, errorRate=1.0)
        unavailable = client.get(f"{API}/forms")
        assert unavailable.status_code == 503 and error_code(unavailable) == "unavailable"
        assert unavailable.headers["retry-after"] == "1"
        assert httpx.get(host.url + "/healthz").status_code == 200
        host.set_faults(errorRate=0.0, dropRate=1.0)
        with pytest.raises(httpx.TransportError):
            client.get(f"{API}/forms")
        assert host.admin("GET", "/admin/v1/faults").json()["dropRate"] == 1.0
        host.set_faults(dropRate=0.0)
        assert client.get(f"{API}/forms").status_code == 200
        # Throttled, like a rate-limiting proxy in front of the host: every request, read or
        # mutation, is answered 429 with the Retry-After asked for, and nothing is done.
        space, ref = new_space(client), form_ref(client)
        host.set_faults(throttleRetryAfterSeconds=120)
        for answer in (client.get(f"{API}/forms"), create(client, space, ref, "throttled")):
            assert answer.status_code == 429 and answer.headers["retry-after"] == "120"
            assert error_code(answer) == "unavailable"
        assert httpx.get(host.url + "/healthz").status_code == 200
        assert host.admin("GET", "/admin/v1/faults").json()["throttleRetryAfterSeconds"] == 120
        host.set_faults(throttleRetryAfterSeconds=0)
        assert error_code(read(client, space, ref, "throttled")) == "resource_not_found"
    assert "Traceback" not in host.log_tail(200)


def test_a_rate_limit_answers_429_above_its_rate_only(host_factory: Any) -> None:
    host = host_factory()
    host.set_faults(rateLimitPerSecond=5)
    with host.api() as client:
        started = time.monotonic()
        codes = [client.get(f"{API}/forms").status_code for _ in range(40)]
        elapsed = time.monotonic() - started
        taken = codes.count(200)
        # One second's worth at once, then the rate: never more, whatever the client asks.
        assert 5 <= taken <= 5 + 5 * elapsed + 1, (codes, elapsed)
        assert set(codes) == {200, 429}
        limited = client.get(f"{API}/forms")
        while limited.status_code != 429:
            limited = client.get(f"{API}/forms")
        assert limited.headers["retry-after"] == "1" and error_code(limited) == "unavailable"
        assert httpx.get(host.url + "/healthz").status_code == 200  # not the host API
        host.set_faults(rateLimitPerSecond=0)
        assert {client.get(f"{API}/forms").status_code for _ in range(20)} == {200}


def test_commit_delay_fault(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.02)
    host.set_faults(commitDelayMs=700)
    with host.api() as client:
        space, ref = new_space(client), form_ref(client)
        op = create(client, space, ref, "later").json()
        settled = wait_settled(client, op["id"])
        assert settled["state"] == "succeeded"
        # The host's own clock: committed no earlier than 0.7 s (not 0.02 s) after acceptance;
        # its timestamps are truncated to milliseconds.
        assert _instant(settled["settledAt"]) - _instant(settled["createdAt"]) >= 0.699


def test_admin_switches_validate_their_input(host_factory: Any) -> None:
    host = host_factory()
    with pytest.raises(RuntimeError, match="400"):
        host.set_misbehaviours(["no-such-misbehaviour"])
    with pytest.raises(RuntimeError, match="400"):
        host.set_faults(errorRate=2)
    with pytest.raises(RuntimeError, match="400"):
        host.set_faults(noSuchFault=1)
    with pytest.raises(RuntimeError, match="400"):
        host.set_faults(throttleRetryAfterSeconds=1.5)
    host.set_misbehaviours(["weak-etag"])
    doc = host.admin("GET", "/admin/v1/misbehaviours").json()
    assert doc["enabled"] == ["weak-etag"]
    assert "unknown-error-codes" in {item["name"] for item in doc["available"]}
    host.set_misbehaviours([])
    assert host.admin("GET", "/admin/v1/misbehaviours").json()["enabled"] == []


def test_package_switch_keeps_resources_addressable(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.02)
    with host.api() as client:
        space, ref = new_space(client), form_ref(client)
        op = wait_settled(client, create(client, space, ref, "pkg").json()["id"])
        item = next(i for i in client.get(f"{API}/forms").json()["items"] if i["formRef"] == ref)
        first, mirror = item["packageDigests"]
        assert read(client, space, ref, "pkg").json()["metadata"]["packageDigest"] == first
        host.admin("POST", "/admin/v1/packages/activate", {"formRef": ref, "packageDigest": mirror})
        got = read(client, space, ref, "pkg")
        assert got.status_code == 200 and got.json()["metadata"]["uid"] == op["resourceUid"]
        path, q = resource_path(space, ref, "pkg"), query(ref)
        resized = update(client, space, ref, "pkg", {**BUCKET_SPEC, "sizeGiB": 12})
        assert wait_settled(client, resized.json()["id"])["state"] == "succeeded"
        new = wait_settled(client, create(client, space, ref, "pkg-2").json()["id"])
        assert read(client, space, ref, "pkg-2").json()["metadata"]["packageDigest"] == mirror
        assert new["formRef"] == ref
        # the switch is durable
        host.stop()
        host.start()
        active = client.get(
            f"{API}/forms/{ref['apiVersion']}/{ref['kind']}/definition", params=q
        ).json()["activePackageDigest"]
        assert active == mirror
        delete = client.delete(path, params=q)
        assert wait_settled(client, delete.json()["id"])["state"] == "succeeded"


def test_a_resource_can_be_made_degraded_and_lag_its_generation(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.02)
    with host.api() as client:
        space, ref = new_space(client), form_ref(client)
        wait_settled(client, create(client, space, ref, "sick").json()["id"])
        before = read(client, space, ref, "sick").json()
        degraded = {
            "type": "Degraded",
            "status": "True",
            "reason": "Failed",
            "message": "volume is full",
            "hostReason": "DiskFull",
        }
        not_ready = {"type": "Ready", "status": "False", "reason": "Provisioning"}
        set_ = host.admin(
            "POST",
            "/admin/v1/resources/conditions",
            {**_target(space, ref, "sick"), "conditions": [degraded, not_ready]},
        ).json()
        got = read(client, space, ref, "sick").json()
        assert got["status"] == set_["status"]
        by_type = {c["type"]: c for c in got["status"]["conditions"]}
        assert {k: by_type["Degraded"][k] for k in degraded} == degraded
        assert by_type["Ready"]["status"] == "False"
        assert int(got["metadata"]["revision"]) == int(before["metadata"]["revision"]) + 1
        assert got["metadata"]["generation"] == before["metadata"]["generation"]

        # The status may lag the generation: set it behind after an update.
        resized = update(client, space, ref, "sick", {**BUCKET_SPEC, "sizeGiB": 20})
        wait_settled(client, resized.json()["id"])
        host.admin(
            "POST",
            "/admin/v1/resources/conditions",
            {**_target(space, ref, "sick"), "observedGeneration": "1"},
        )
        lagging = read(client, space, ref, "sick").json()
        assert (lagging["metadata"]["generation"], lagging["status"]["observedGeneration"]) == (
            "2",
            "1",
        )
        for bad in (
            {"conditions": [{**degraded, "reason": "HOST_OK_42"}]},  # H-17: portable reasons
            {"conditions": [{**degraded, "type": "Sick"}]},
            {"observedGeneration": "3"},  # beyond the generation
            {"conditions": "Degraded"},
        ):
            with pytest.raises(RuntimeError, match="400"):
                host.admin(
                    "POST", "/admin/v1/resources/conditions", {**_target(space, ref, "sick"), **bad}
                )
        with pytest.raises(RuntimeError, match="404"):
            host.admin("POST", "/admin/v1/resources/conditions", _target(space, ref, "nobody"))


def test_the_access_log_stamps_every_request(host_factory: Any) -> None:
    host = host_factory(extra_args=("--access-log",))
    with host.api() as client:
        client.get(f"{API}/spaces").raise_for_status()
    wait_until(
        lambda: "/v1alpha3/spaces" in host.log_path.read_text(errors="replace"),
        "the request in the access log",
    )
    line = next(
        line
        for line in host.log_path.read_text(errors="replace").splitlines()
        if "GET /v1alpha3/spaces" in line
    )
    stamp = " ".join(line.split()[:2])
    assert abs(datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() - time.time()) < 600
