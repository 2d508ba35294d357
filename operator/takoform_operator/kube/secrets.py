"""Reading the Secrets TakoformHosts name: `get` of one named Secret in the operator's own
namespace, nothing else (no list, no watch, no other namespace; docs/tenancy.md)."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping

from takoform_operator.host_port import HostUnavailable, StoredSecret
from takoform_operator.kube.api import ApiError, KubeApi


class ApiSecretReader:
    def __init__(self, namespace: str, api: KubeApi) -> None:
        self._api = api
        self.namespace = namespace

    async def read(self, name: str) -> StoredSecret | None:
        """Secret `name` (data and annotations), or None when it does not exist."""
        try:
            secret = await self._api.request(
                "GET", f"/api/v1/namespaces/{self.namespace}/secrets/{name}"
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise HostUnavailable(f"cannot read Secret {self.namespace}/{name}: {exc}") from None
        try:
            data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        except (AttributeError, TypeError, binascii.Error):
            raise HostUnavailable(f"Secret {self.namespace}/{name}: data is not base64") from None
        annotations: Mapping[str, str] = (secret.get("metadata") or {}).get("annotations") or {}
        return StoredSecret(data, dict(annotations))
