"""Small helpers for the reference host's tests: FormRefs, URLs, error codes."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

API = "/v1alpha3"


def form_ref(client: httpx.Client, kind: str = "Bucket", version: str = "1.1.0") -> dict[str, str]:
    """The installed FormRef of `kind` at `version`, as the host lists it."""
    for item in client.get(f"{API}/forms").json()["items"]:
        ref = item["formRef"]
        if ref["kind"] == kind and ref["definitionVersion"] == version:
            return dict(ref)
    raise AssertionError(f"{kind} {version} is not installed")


def query(ref: dict[str, str]) -> dict[str, str]:
    return {"definitionVersion": ref["definitionVersion"], "schemaDigest": ref["schemaDigest"]}


def resource_path(space: str, ref: dict[str, str], name: str) -> str:
    return f"{API}/spaces/{space}/forms/{ref['apiVersion']}/{ref['kind']}/resources/{name}"


def new_space(client: httpx.Client, prefix: str = "t") -> str:
    space = f"{prefix}-{uuid.uuid4().hex[:10]}"
    assert client.put(f"{API}/spaces/{space}").status_code == 201
    return space


BUCKET_SPEC: dict[str, Any] = {"region": "eu-west-1", "sizeGiB": 10}


def create(
    client: httpx.Client,
    space: str,
    ref: dict[str, str],
    name: str,
    spec: dict[str, Any] | None = None,
    **headers: str,
) -> httpx.Response:
    return client.put(
        resource_path(space, ref, name),
        params=query(ref),
        json={"spec": BUCKET_SPEC if spec is None else spec},
        headers={"If-None-Match": "*", **{k.replace("_", "-"): v for k, v in headers.items()}},
    )


def update(
    client: httpx.Client,
    space: str,
    ref: dict[str, str],
    name: str,
    spec: dict[str, Any],
    generation: str = "1",
) -> httpx.Response:
    """An update of `name` to `spec`, expected at host generation `generation`."""
    return client.put(
        resource_path(space, ref, name),
        params=query(ref),
        json={"spec": spec},
        headers={"Takoform-Expected-Generation": generation},
    )  # fmt: skip


def read(client: httpx.Client, space: str, ref: dict[str, str], name: str) -> httpx.Response:
    return client.get(resource_path(space, ref, name), params=query(ref))


def error_code(response: httpx.Response) -> str:
    assert response.headers["content-type"].startswith("application/json"), response.text
    code: str = response.json()["error"]["code"]
    return code
