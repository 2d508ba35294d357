"""One host client per TakoformHost, built from the host objects and the Secrets they name.

Adapter layer: the pool is fed with TakoformHost specs (kube.tenancy, from a kopf index, so it
is complete before any CR is reconciled) and reads Secrets through a `SecretReader`
(kube.secrets: only `get` of named Secrets in the operator's own namespace).
A client is built on first use; a host whose connection settings change gets a new client.
Tokens come from a `SecretToken` source: re-read on an interval and at once after a 401, so a
rotated Secret is used without a restart. Token values are never logged.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from takoform_operator.core.actions import Action, Target
from takoform_operator.core.state import OperationView, ResourceView
from takoform_operator.core.tenancy import DEFAULT_HOST, HostConfig, SecretKeyRef
from takoform_operator.host_client.client import HostClient, TokenSource
from takoform_operator.host_client.port import HostClientPort
from takoform_operator.host_port import HostUnavailable, SecretNotFound
from takoform_spec.identity import FormRef

logger = logging.getLogger("takoform_operator")


class SecretReader(Protocol):
    async def read(self, name: str) -> Mapping[str, bytes] | None:
        """The data of Secret `name` in the operator's namespace, or None when it is absent."""


async def _secret_value(reader: SecretReader, ref: SecretKeyRef, where: str) -> bytes:
    data = await reader.read(ref.name)
    if data is None:
        raise SecretNotFound(f"{where}: Secret {ref.name!r} not found in the operator namespace")
    if ref.key not in data:
        raise SecretNotFound(f"{where}: Secret {ref.name!r} has no key {ref.key!r}")
    return data[ref.key]


class SecretToken:
    """A TokenSource reading one Secret key, again after `refresh_seconds` and after a 401."""

    def __init__(
        self,
        reader: SecretReader,
        ref: SecretKeyRef,
        host: str,
        refresh_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader, self._ref, self._host = reader, ref, host
        self._every, self._clock = refresh_seconds, clock
        self._value: str | None = None
        self._read_at: float | None = None
        self._lock = asyncio.Lock()

    async def token(self) -> str | None:
        now = self._clock()
        if self._read_at is None or now - self._read_at >= self._every:
            return await self.refresh()
        return self._value

    async def refresh(self) -> str | None:
        async with self._lock:
            raw = await _secret_value(self._reader, self._ref, f"host {self._host!r}")
            value = raw.decode("utf-8").strip()
            if self._value is not None and value != self._value:
                logger.info("host %s: token Secret %s changed", self._host, self._ref.name)
            self._value, self._read_at = value, self._clock()
            return value


@dataclass
class _Entry:
    config: HostConfig
    client: HostClient | None = None
    lock: asyncio.Lock | None = None


class HostPool:
    """name -> HostClientPort. TakoformHosts replace the implicit host of the same name."""

    def __init__(
        self,
        reader: SecretReader | None,
        *,
        refresh_seconds: float = 30.0,
        read_retries: int = 3,
        max_connections: int = 20,
        implicit: HostClient | None = None,
    ) -> None:
        self._reader = reader
        self._refresh = refresh_seconds
        self._read_retries = read_retries
        self._max_connections = max_connections
        self._implicit = implicit
        self._entries: dict[str, _Entry] = {}
        self._retired: list[HostClient] = []

    # -- the policy side (fed by kube.tenancy) --------------------------------------------------

    def observe(self, config: HostConfig) -> bool:
        """A TakoformHost was seen; True when anything the reconciles depend on changed."""
        old = self._entries.get(config.name)
        if old is not None and old.config == config:
            return False
        if old is not None and old.client is not None:
            if old.config.connection() == config.connection():
                old.config = config  # only `default` changed: keep the client
                return True
            self._retired.append(old.client)
        self._entries[config.name] = _Entry(config)
        return True

    def forget(self, name: str) -> bool:
        old = self._entries.pop(name, None)
        if old is not None and old.client is not None:
            self._retired.append(old.client)
        return old is not None

    def names(self) -> list[str]:
        names = set(self._entries)
        if self._implicit is not None:
            names.add(DEFAULT_HOST)
        return sorted(names)

    def configs(self) -> list[HostConfig]:
        return [entry.config for entry in self._entries.values()]

    def marked_default(self) -> tuple[str, ...]:
        """The TakoformHosts marked default (one is the default; two or more leave none)."""
        return tuple(name for name, entry in self._entries.items() if entry.config.default)

    def default_host(self) -> str | None:
        """The one TakoformHost marked default; else the implicit host; None when two are."""
        marked = self.marked_default()
        if len(marked) == 1:
            return marked[0]
        if not marked and self._implicit is not None:
            return DEFAULT_HOST
        return None

    # -- the reconcile side --------------------------------------------------------------------

    def port(self, name: str) -> PooledPort:
        return PooledPort(self, name)

    def prober(self, name: str) -> PooledPort:
        return PooledPort(self, name)

    async def client(self, name: str) -> HostClient:
        entry = self._entries.get(name)
        if entry is None:
            if name == DEFAULT_HOST and self._implicit is not None:
                return self._implicit
            raise HostUnavailable(f"no TakoformHost {name!r} is known")
        if entry.client is None:
            if entry.lock is None:
                entry.lock = asyncio.Lock()
            async with entry.lock:
                if entry.client is None:
                    entry.client = await self._build(entry.config)
        return entry.client

    async def _build(self, config: HostConfig) -> HostClient:
        where = f"host {config.name!r}"
        token: TokenSource | None = None
        if config.token is not None:
            if self._reader is None:
                raise HostUnavailable(f"{where}: the operator cannot read Secrets")
            token = SecretToken(self._reader, config.token, config.name, self._refresh)
        verify: Any = True
        if config.ca_bundle is not None or config.client_cert is not None:
            assert self._reader is not None
            verify = ssl.create_default_context()
            if config.ca_bundle is not None:
                pem = await _secret_value(self._reader, config.ca_bundle, where)
                verify = ssl.create_default_context(cadata=pem.decode("utf-8"))
            if config.client_cert is not None:
                cert = await _secret_value(
                    self._reader, SecretKeyRef(config.client_cert, "tls.crt"), where
                )
                key = await _secret_value(
                    self._reader, SecretKeyRef(config.client_cert, "tls.key"), where
                )
                _load_cert_chain(verify, cert, key)
        return HostClient(
            config.url,
            token,
            timeout=config.timeout,
            read_retries=self._read_retries,
            max_connections=self._max_connections,
            verify=verify,
        )

    async def aclose(self) -> None:
        clients = [e.client for e in self._entries.values() if e.client is not None]
        for client in [*clients, *self._retired]:
            await client.aclose()
        if self._implicit is not None:
            await self._implicit.aclose()
        self._entries.clear()
        self._retired.clear()


def _load_cert_chain(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """ssl wants files: written to a private temporary directory and removed at once."""
    with tempfile.TemporaryDirectory(prefix="takoform-tls-") as directory:
        os.chmod(directory, 0o700)
        cert_path, key_path = os.path.join(directory, "tls.crt"), os.path.join(directory, "tls.key")
        for path, data in ((cert_path, cert), (key_path, key)):
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
        context.load_cert_chain(cert_path, key_path)


class PooledPort:
    """The HostPort of one named host of the pool (its client is built on first use)."""

    def __init__(self, pool: HostPool, name: str) -> None:
        self._pool, self._name = pool, name

    async def _port(self) -> HostClientPort:
        return HostClientPort(await self._pool.client(self._name))

    async def get_operation(self, operation_id: str) -> OperationView:
        return await (await self._port()).get_operation(operation_id)

    async def read(self, target: Target) -> ResourceView | None:
        return await (await self._port()).read(target)

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        return await (await self._port()).list_operations(target)

    async def execute(self, action: Action) -> tuple[str, OperationView]:
        return await (await self._port()).execute(action)

    async def list_forms(self) -> list[FormRef]:
        return await (await self._pool.client(self._name)).list_forms()
