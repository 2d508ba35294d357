"""The host pool over TLS against the real reference host: the CA bundle and the client
certificate come from Secrets and are read again when they change, without a new pool."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from processes import HostProcess
from tls import Pki

from takoform_operator.core.tenancy import HostConfig, SecretKeyRef
from takoform_operator.host_client.pool import DOUBT_RECHECK_SECONDS, HostPool
from takoform_operator.host_port import HostCertificateUntrusted, HostUnavailable

pytestmark = pytest.mark.host
REFRESH = 30.0


class Secrets:
    """The Secrets of the operator's namespace, as the pool's reader sees them."""

    def __init__(self) -> None:
        self.data: dict[str, dict[str, bytes]] = {}
        self.reads = 0

    async def read(self, name: str) -> Mapping[str, bytes] | None:
        self.reads += 1
        return self.data.get(name)

    def put_ca(self, crt: Path) -> None:
        self.data["host-ca"] = {"ca.crt": crt.read_bytes()}

    def put_client(self, pair: tuple[Path, Path]) -> None:
        self.data["host-client"] = {
            "tls.crt": pair[0].read_bytes(),
            "tls.key": pair[1].read_bytes(),
        }


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _pool(host: HostProcess, secrets: Secrets, clock: Clock) -> HostPool:
    secrets.data["host-token"] = {"token": host.token.encode()}
    pool = HostPool(secrets, refresh_seconds=REFRESH, read_retries=0, clock=clock)
    pool.observe(
        HostConfig(
            "tls-host",
            host.url,
            SecretKeyRef("host-token", "token"),
            SecretKeyRef("host-ca", "ca.crt"),
            "host-client",
        )
    )
    return pool


def _restart(host: HostProcess, tls: Any) -> None:
    host.stop()
    host.tls = tls
    host.start()


async def test_a_host_moved_to_a_new_ca_is_reached_once_the_bundle_names_it(
    host_factory: Callable[..., HostProcess], tmp_path: Path
) -> None:
    pki, secrets, clock = Pki(tmp_path), Secrets(), Clock()
    host = host_factory(tls=pki.host_tls("server-ca-1", client_ca="client-ca"))
    secrets.put_ca(pki.ca("server-ca-1"))
    secrets.put_client(pki.client("client-ca", "operator"))
    pool = _pool(host, secrets, clock)
    port = pool.prober("tls-host")
    try:
        assert await port.list_forms()
        first = await pool.client("tls-host")

        _restart(host, pki.host_tls("server-ca-2", client_ca="client-ca"))
        with pytest.raises(HostCertificateUntrusted, match="TLS certificate is not trusted"):
            await port.list_forms()
        secrets.put_ca(pki.ca("server-ca-2"))
        clock.now += DOUBT_RECHECK_SECONDS / 2  # read at most every DOUBT_RECHECK_SECONDS
        assert await pool.client("tls-host") is first
        clock.now += DOUBT_RECHECK_SECONDS  # long before the refresh interval
        assert await port.list_forms()
        assert await pool.client("tls-host") is not first
    finally:
        await pool.aclose()


async def test_a_rotated_client_certificate_is_used_after_the_interval(
    host_factory: Callable[..., HostProcess], tmp_path: Path
) -> None:
    pki, secrets, clock = Pki(tmp_path), Secrets(), Clock()
    host = host_factory(tls=pki.host_tls("server-ca", client_ca="client-ca-1"))
    secrets.put_ca(pki.ca("server-ca"))
    secrets.put_client(pki.client("client-ca-1", "operator"))
    pool = _pool(host, secrets, clock)
    port = pool.prober("tls-host")
    try:
        assert await port.list_forms()
        first = await pool.client("tls-host")
        reads = secrets.reads
        clock.now += REFRESH  # unchanged Secrets: read again, same client
        assert await port.list_forms()
        assert await pool.client("tls-host") is first and secrets.reads > reads

        _restart(host, pki.host_tls("server-ca", client_ca="client-ca-2"))
        secrets.put_client(pki.client("client-ca-2", "operator"))
        with pytest.raises(HostUnavailable) as refused:
            await port.list_forms()  # the host refuses the old certificate
        assert not isinstance(refused.value, HostCertificateUntrusted)
        clock.now += REFRESH
        assert await port.list_forms()
        assert await pool.client("tls-host") is not first
    finally:
        await pool.aclose()


async def test_a_missing_tls_secret_is_named(
    host_factory: Callable[..., HostProcess], tmp_path: Path
) -> None:
    pki, secrets, clock = Pki(tmp_path), Secrets(), Clock()
    host = host_factory(tls=pki.host_tls("server-ca"))
    secrets.put_ca(pki.ca("server-ca"))
    pool = _pool(host, secrets, clock)
    try:
        with pytest.raises(HostUnavailable, match="'host-client' not found"):
            await pool.prober("tls-host").list_forms()
    finally:
        await pool.aclose()
