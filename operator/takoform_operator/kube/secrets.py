"""Reading the Secrets TakoformHosts name: `get` of one named Secret in the operator's own
namespace, nothing else (no list, no watch, no other namespace; docs/tenancy.md)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from typing import Any

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from takoform_operator.host_port import HostUnavailable, StoredSecret
from takoform_operator.kube.client_config import api_client, load_kube_config


class KubernetesSecretReader:
    """The official client, in a thread (it is synchronous). Its CoreV1Api is made at the first
    read: importing it loads every core model of the client (about a second of CPU at start-up),
    and an operator whose hosts name no token Secret never reads one."""

    def __init__(self, namespace: str, api: Any = None) -> None:
        if api is None:
            load_kube_config()  # at start-up: an unusable configuration is said at once
        self._api = api
        self.namespace = namespace

    def _read(self, name: str) -> Any:
        if self._api is None:
            self._api = k8s.CoreV1Api(api_client())
        return self._api.read_namespaced_secret(name, self.namespace)

    async def read(self, name: str) -> StoredSecret | None:
        """Secret `name` (data and annotations), or None when it does not exist."""
        try:
            secret = await asyncio.to_thread(self._read, name)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise HostUnavailable(
                f"cannot read Secret {self.namespace}/{name}: {exc.status} {exc.reason}"
            ) from None
        data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        annotations: Mapping[str, str] = (secret.metadata and secret.metadata.annotations) or {}
        return StoredSecret(data, dict(annotations))
