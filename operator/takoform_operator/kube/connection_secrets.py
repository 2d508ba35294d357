"""Connection Secrets in the CR's namespace: get, create and patch, nothing else (the garbage
collector deletes a Secret with its CR, through the ownerReference written here).

A Secret is written only when what it holds differs from what the host reported (a GET first;
a steady resource costs no write), owned by its CR (ownerReference, controller), and only when it
is ours: created by us for a CR of the same kind and name (an Orphan deletion leaves it for a
later CR of that name). Any other Secret of that name is left alone. No value is ever put in a
log line, an exception message or an Event (core.connection.redact covers API answers).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping
from typing import Any, Protocol

import httpx

from takoform_operator.core.connection import (
    MANAGED_BY,
    OWNER_GROUP_LABEL,
    OWNER_KIND_LABEL,
    OWNER_NAME_LABEL,
    ConnectionSecret,
    owner_labels,
    redact,
)
from takoform_operator.kube.status import StatusWriteFailed

MERGE_PATCH = {"Content-Type": "application/merge-patch+json"}


class SecretWriteFailed(StatusWriteFailed):
    """A write of a connection Secret did not land: retried like any write to the API server."""


class SecretForbidden(SecretWriteFailed):
    """The API server refused the operator the Secret (403): its Secret rights are not bound in
    that namespace (docs/tenancy.md). `answer` is the API server's reason, never a value."""

    def __init__(self, message: str, answer: str) -> None:
        super().__init__(message)
        self.answer = answer


class SecretNotOurs(Exception):
    """A Secret of the wanted name exists and belongs to something else: it is never touched."""


class SecretStore(Protocol):
    async def apply(self, owner: Mapping[str, Any], secret: ConnectionSecret) -> bool:
        """Make the Secret hold `secret.data`; True when something was written."""

    async def release(self, owner: Mapping[str, Any], namespace: str, name: str) -> None:
        """Drop the owner's ownerReference so the Secret outlives it (deletionPolicy Orphan)."""


def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    metadata = owner["metadata"]
    return {
        "apiVersion": owner["apiVersion"],
        "kind": owner["kind"],
        "name": metadata["name"],
        "uid": metadata["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def secret_name_of(owner: Mapping[str, Any], default: str) -> str:
    ref = (owner.get("spec") or {}).get("writeConnectionSecretToRef") or {}
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return str(name) if name else default


def is_ours(secret: Mapping[str, Any], owner: Mapping[str, Any]) -> bool:
    """Owned by this CR, or made by us for a CR of the same kind and name (released by an
    Orphan deletion) and owned by no one since."""
    metadata = secret.get("metadata") or {}
    references = metadata.get("ownerReferences") or []
    uid = owner["metadata"]["uid"]
    if any(ref.get("uid") == uid for ref in references):
        return True
    if any(ref.get("controller") for ref in references):
        return False
    labels = metadata.get("labels") or {}
    wanted = owner_labels(owner["apiVersion"], owner["kind"], owner["metadata"]["name"])
    return (
        labels.get(MANAGED_BY[0]) == MANAGED_BY[1]
        and all(labels.get(key) == wanted.get(key) for key in (OWNER_GROUP_LABEL, OWNER_KIND_LABEL))
        and labels.get(OWNER_NAME_LABEL) == wanted.get(OWNER_NAME_LABEL)
        and OWNER_NAME_LABEL in wanted
    )


def wanted_patch(
    current: Mapping[str, Any] | None, owner: Mapping[str, Any], secret: ConnectionSecret
) -> dict[str, Any] | None:
    """The merge-patch that makes `current` hold `secret` (the whole Secret when there is none),
    or None when it already does: the comparison that keeps a steady state free of writes."""
    data = {k: base64.b64encode(v.encode("utf-8")).decode("ascii") for k, v in secret.data.items()}
    labels = owner_labels(owner["apiVersion"], owner["kind"], owner["metadata"]["name"])
    reference = owner_reference(owner)
    if current is None:
        return {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": secret.name,
                "namespace": secret.namespace,
                "labels": labels,
                "ownerReferences": [reference],
            },
            "data": data,
        }
    metadata = current.get("metadata") or {}
    have = dict(current.get("data") or {})
    patch: dict[str, Any] = {}
    if have != data:
        patch["data"] = {**{key: None for key in have if key not in data}, **data}
    if any((metadata.get("labels") or {}).get(k) != v for k, v in labels.items()):
        patch.setdefault("metadata", {})["labels"] = labels
    references = metadata.get("ownerReferences") or []
    if reference not in references:
        others = [ref for ref in references if ref.get("uid") != reference["uid"]]
        patch.setdefault("metadata", {})["ownerReferences"] = [*others, reference]
    if not patch:
        return None
    # A precondition: a Secret changed since the GET is a conflict, retried from a fresh GET.
    patch.setdefault("metadata", {})["resourceVersion"] = metadata.get("resourceVersion")
    return patch


class HttpSecretStore:
    """Over the CR writer's connection to the API server (kube.status.CrWriter)."""

    def __init__(self, client: Callable[[], httpx.AsyncClient]) -> None:
        #: Returns the current connection (it changes when kopf logs in again).
        self._client = client

    async def apply(self, owner: Mapping[str, Any], secret: ConnectionSecret) -> bool:
        current = await self._get(secret.namespace, secret.name)
        if current is not None and not is_ours(current, owner):
            raise SecretNotOurs(
                f"Secret {secret.namespace}/{secret.name} exists and is not managed for "
                f"{owner['kind']} {owner['metadata']['name']}: it is left alone; name another "
                "one in spec.writeConnectionSecretToRef.name or remove it"
            )
        patch = wanted_patch(current, owner, secret)
        if patch is None:
            return False
        path = _path(secret.namespace)
        if current is None:
            answer = await self._send("POST", path, secret, json.dumps(patch), {})
        else:
            answer = await self._send(
                "PATCH", f"{path}/{secret.name}", secret, json.dumps(patch), MERGE_PATCH
            )
        if answer.status_code == 403:
            raise SecretForbidden(
                _failure(secret.namespace, secret.name, answer, secret.data),
                f"{'create' if current is None else 'patch'} forbidden",
            )
        if answer.status_code not in (200, 201):
            raise SecretWriteFailed(_failure(secret.namespace, secret.name, answer, secret.data))
        return True

    async def release(self, owner: Mapping[str, Any], namespace: str, name: str) -> None:
        current = await self._get(namespace, name)
        uid = owner["metadata"]["uid"]
        references = ((current or {}).get("metadata") or {}).get("ownerReferences") or []
        if current is None or not any(ref.get("uid") == uid for ref in references):
            return
        patch = {
            "metadata": {
                "ownerReferences": [ref for ref in references if ref.get("uid") != uid],
                "resourceVersion": current["metadata"].get("resourceVersion"),
            }
        }
        empty = ConnectionSecret(namespace, name)
        answer = await self._send(
            "PATCH", f"{_path(namespace)}/{name}", empty, json.dumps(patch), MERGE_PATCH
        )
        if answer.status_code != 200:
            raise SecretWriteFailed(_failure(namespace, name, answer, {}))

    async def _get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            answer = await self._client().get(f"{_path(namespace)}/{name}")
        except httpx.HTTPError as exc:
            raise SecretWriteFailed(f"read of Secret {namespace}/{name} failed: {exc}") from None
        if answer.status_code == 404:
            return None
        if answer.status_code == 403:
            raise SecretForbidden(
                f"read of Secret {namespace}/{name}: 403 forbidden", "get forbidden"
            )
        if answer.status_code != 200:
            raise SecretWriteFailed(f"read of Secret {namespace}/{name}: {answer.status_code}")
        secret: dict[str, Any] = answer.json()
        return secret

    async def _send(
        self,
        method: str,
        path: str,
        secret: ConnectionSecret,
        content: str,
        headers: Mapping[str, str],
    ) -> httpx.Response:
        try:
            headers = {"Content-Type": "application/json", **headers}
            return await self._client().request(method, path, content=content, headers=headers)
        except httpx.HTTPError as exc:
            # The exception text is httpx's own (no body); redacted all the same.
            message = redact(str(exc), secret.data)
            raise SecretWriteFailed(
                f"write of Secret {secret.namespace}/{secret.name} failed: {message}"
            ) from None


def _path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/secrets"


def _failure(namespace: str, name: str, answer: httpx.Response, values: Mapping[str, str]) -> str:
    """What went wrong, from the API server's Status (its message, redacted), never the body."""
    try:
        message = str(answer.json().get("message", ""))
    except ValueError:
        message = ""
    return (
        f"write of Secret {namespace}/{name} did not land: {answer.status_code} "
        f"{redact(message, values)[:300]}"
    )
