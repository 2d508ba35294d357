"""Sensitive outputs on the reference host: real secrets made at creation, the same on every read
and across updates, new only on a rotation (admin) or for a new incarnation."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from waiting import wait_settled

from .helpers import create, form_ref, new_space, query, read, resource_path

pytestmark = pytest.mark.host

POSTGRES_SPEC = {"region": "eu-west-1", "engineVersion": "16", "storageGiB": 100}
SENSITIVE = ("username", "password", "connectionString")


@pytest.fixture
def client(reference_host: Any) -> Iterator[httpx.Client]:
    with reference_host.api() as c:
        yield c


def _outputs(client: httpx.Client, space: str, ref: dict[str, str], name: str) -> dict[str, Any]:
    answer = read(client, space, ref, name)
    assert answer.status_code == 200, answer.text
    outputs: dict[str, Any] = answer.json()["status"]["outputs"]
    return outputs


def _target(space: str, name: str) -> dict[str, str]:
    return {
        "space": space,
        "apiVersion": "database.takoform.io/v1",
        "kind": "PostgresInstance",
        "name": name,
    }


def test_sensitive_outputs_are_real_stable_and_rotate_only_when_asked(
    client: httpx.Client, reference_host: Any
) -> None:
    space, ref = new_space(client), form_ref(client, "PostgresInstance", "1.2.0")
    wait_settled(client, create(client, space, ref, "orders", POSTGRES_SPEC).json()["id"])
    first = _outputs(client, space, ref, "orders")
    assert set(SENSITIVE) <= set(first)
    assert len(first["password"]) >= 24
    assert first["connectionString"] == (
        f"postgresql://{first['username']}:{first['password']}@{first['host']}:5432/postgres"
        "?sslmode=require"
    )
    # Stable across reads, and across an update of the spec.
    assert _outputs(client, space, ref, "orders") == first
    update = client.put(
        resource_path(space, ref, "orders"),
        params=query(ref),
        json={"spec": {**POSTGRES_SPEC, "storageGiB": 200}},
        headers={"Takoform-Expected-Generation": "1"},
    )
    assert update.status_code == 202, update.text
    assert wait_settled(client, update.json()["id"])["state"] == "succeeded"
    assert {k: _outputs(client, space, ref, "orders")[k] for k in SENSITIVE} == {
        k: first[k] for k in SENSITIVE
    }
    # A rotation: new secrets, the same uid and generation, a new revision.
    before = read(client, space, ref, "orders").json()["metadata"]
    reference_host.admin("POST", "/admin/v1/resources/rotate-secrets", _target(space, "orders"))
    after = read(client, space, ref, "orders").json()
    rotated = after["status"]["outputs"]
    assert rotated["password"] != first["password"]
    assert rotated["password"] in rotated["connectionString"]
    assert rotated["host"] == first["host"]
    assert after["metadata"]["uid"] == before["uid"]
    assert after["metadata"]["generation"] == before["generation"]
    assert int(after["metadata"]["revision"]) == int(before["revision"]) + 1


def test_each_resource_gets_its_own_secrets(client: httpx.Client) -> None:
    space, ref = new_space(client), form_ref(client, "PostgresInstance", "1.2.0")
    for name in ("a", "b"):
        wait_settled(client, create(client, space, ref, name, POSTGRES_SPEC).json()["id"])
    assert (
        _outputs(client, space, ref, "a")["password"]
        != _outputs(client, space, ref, "b")["password"]
    )


def test_a_definition_without_sensitive_outputs_has_nothing_to_rotate(
    client: httpx.Client, reference_host: Any
) -> None:
    space, ref = new_space(client), form_ref(client, "PostgresInstance", "1.1.0")
    wait_settled(client, create(client, space, ref, "old", POSTGRES_SPEC).json()["id"])
    assert "password" not in _outputs(client, space, ref, "old")
    with pytest.raises(RuntimeError, match="400"):
        reference_host.admin("POST", "/admin/v1/resources/rotate-secrets", _target(space, "old"))
