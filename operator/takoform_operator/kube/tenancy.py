"""The tenancy policy as the operator holds it: hosts (in the HostPool), grants and the labels of
namespaces, fed by kopf indexes so the picture is complete before any CR is reconciled.

Implements service.Tenancy. No kopf and no API calls here: the handlers feed it.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Protocol

from takoform_operator.core.tenancy import (
    HostConfig,
    InvalidPolicy,
    SpaceGrant,
    grant_from_body,
    host_config_from_body,
)
from takoform_operator.host_port import HostPort

logger = logging.getLogger("takoform_operator")


class HostDirectory(Protocol):
    """The hosts the operator can reach (host_client.pool.HostPool)."""

    def observe(self, config: HostConfig) -> bool: ...

    def forget(self, name: str) -> bool: ...

    def names(self) -> list[str]: ...

    def configs(self) -> list[HostConfig]: ...

    def default_host(self) -> str | None: ...

    def marked_default(self) -> tuple[str, ...]: ...

    def port(self, name: str, namespace: str | None = None) -> HostPort: ...


class TenancyBook:
    def __init__(self, pool: HostDirectory) -> None:
        self.pool = pool
        self._grants: dict[str, SpaceGrant] = {}
        self._labels: dict[str, dict[str, str]] = {}
        #: namespace name -> its metadata.uid (core.binding.ClaimRef.namespace_uid).
        self._namespace_uids: dict[str, str] = {}
        #: TakoformHost name -> metadata.generation (for the host status).
        self.host_generations: dict[str, int] = {}

    # -- fed by the handlers: each returns True when reconciles may decide differently now -----

    def observe_host(self, body: Mapping[str, Any]) -> bool:
        name = str(body["metadata"]["name"])
        self.host_generations[name] = int(body["metadata"].get("generation") or 0)
        try:
            config = host_config_from_body(body)
        except InvalidPolicy as exc:
            logger.warning("%s; it is ignored", exc)
            return self.pool.forget(name)
        return self.pool.observe(config)

    def forget_host(self, name: str) -> bool:
        self.host_generations.pop(name, None)
        return self.pool.forget(name)

    def observe_grant(self, body: Mapping[str, Any]) -> bool:
        name = str(body["metadata"]["name"])
        try:
            grant: SpaceGrant | None = grant_from_body(body)
        except InvalidPolicy as exc:
            logger.warning("%s; it grants nothing", exc)
            grant = None
        old = self._grants.pop(name, None)
        if grant is not None:
            self._grants[name] = grant
        return old != grant

    def forget_grant(self, name: str) -> bool:
        return self._grants.pop(name, None) is not None

    def observe_namespace(self, body: Mapping[str, Any]) -> bool:
        metadata = body.get("metadata") or {}
        name = str(metadata.get("name"))
        labels = {str(k): str(v) for k, v in (metadata.get("labels") or {}).items()}
        changed = self._labels.get(name) != labels
        self._labels[name] = labels
        # A namespace created again under its old name: its CRs are woken by the labels' change
        # if any, and every binding rule compares the uid recorded beside the name.
        self._namespace_uids[name] = str(metadata.get("uid") or "")
        return changed

    def forget_namespace(self, name: str) -> bool:
        self._namespace_uids.pop(name, None)
        return self._labels.pop(name, None) is not None

    # -- read by the reconcile (service.Tenancy) -----------------------------------------------

    def default_host(self) -> str | None:
        return self.pool.default_host()

    def marked_default(self) -> tuple[str, ...]:
        return self.pool.marked_default()

    def hosts(self) -> Collection[str]:
        return self.pool.names()

    def grants(self) -> Iterable[SpaceGrant]:
        return tuple(self._grants.values())

    def namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self._labels.get(namespace, {})

    def namespace_uid(self, namespace: str) -> str:
        return self._namespace_uids.get(namespace, "")

    def port(self, host: str, namespace: str) -> HostPort:
        return self.pool.port(host, namespace)
