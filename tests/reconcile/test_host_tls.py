"""The host pool over TLS against the real reference host: the CA bundle and the client
certificate come from Secrets and are read again when they change, without a new pool."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from processes import HostProcess, HostTls
from tls import Pki

from takoform_operator.core.tenancy import CREDENTIAL_ANNOTATION, HostConfig, SecretKeyRef
from takoform_operator.host_client.client import HostClient
from takoform_operator.host_client.pool import DOUBT_RECHECK_SECONDS, HostPool
from takoform_operator.host_port import HostCertificateUntrusted, HostUnavailable, StoredSecret

pytestmark = pytest.mark.host
REFRESH = 30.0


class Secrets:
    """The Secrets of the operator's namespace, as the pool's reader sees them (each opted in
    as a credential of the host of these tests)."""

    namespace = "ops"

    def __init__(self) -> None:
        self.data: dict[str, dict[str, bytes]] = {}
        self.reads = 0
        self.url = ""  # the URL the Secrets are opted in for, with the host `tls-host`

    async def read(self, name: str) -> StoredSecret | None:
        self.reads += 1
        if name not in self.data:
            return None
        return StoredSecret(self.data[name], {CREDENTIAL_ANNOTATION: f"tls-host={self.url}"})

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


class Setup:
    """A host over TLS, its Secrets as the operator would read them, and a pool on a clock."""

    def __init__(
        self, host_factory: Callable[..., HostProcess], root: Path, server_ca: str, client_ca: str
    ) -> None:
        self.pki, self.secrets, self.clock = Pki(root), Secrets(), Clock()
        self.host = host_factory(tls=self.pki.host_tls(server_ca, client_ca=client_ca))
        self.secrets.put_ca(self.pki.ca(server_ca))
        self.secrets.put_client(self.pki.client(client_ca, "operator"))
        self.secrets.data["host-token"] = {"token": self.host.token.encode()}
        self.secrets.url = self.host.url
        self.pool = HostPool(
            self.secrets, refresh_seconds=REFRESH, read_retries=0, clock=self.clock
        )
        self.pool.observe(
            HostConfig(
                "tls-host",
                self.host.url,
                SecretKeyRef("host-token", "token"),
                SecretKeyRef("host-ca", "ca.crt"),
                "host-client",
            )
        )
        self.port = self.pool.prober("tls-host")

    async def client(self) -> HostClient:
        return await self.pool.client("tls-host")


Make = Callable[[str, str], Setup]


@pytest.fixture
async def tls_setup(
    host_factory: Callable[..., HostProcess], tmp_path: Path
) -> AsyncIterator[Make]:
    """Setup(server CA, client CA) for the test; every pool made is closed afterwards."""
    made: list[Setup] = []

    def make(server_ca: str, client_ca: str) -> Setup:
        made.append(Setup(host_factory, tmp_path, server_ca, client_ca))
        return made[-1]

    yield make
    for setup in made:
        await setup.pool.aclose()


def _restart(host: HostProcess, tls: HostTls) -> None:
    host.stop()
    host.tls = tls
    host.start()


async def test_a_host_moved_to_a_new_ca_is_reached_once_the_bundle_names_it(
    tls_setup: Make,
) -> None:
    t = tls_setup("server-ca-1", "client-ca")
    assert await t.port.list_forms()
    first = await t.client()

    _restart(t.host, t.pki.host_tls("server-ca-2", client_ca="client-ca"))
    with pytest.raises(HostCertificateUntrusted, match="TLS certificate is not trusted"):
        await t.port.list_forms()
    t.secrets.put_ca(t.pki.ca("server-ca-2"))
    t.clock.now += DOUBT_RECHECK_SECONDS / 2  # read at most every DOUBT_RECHECK_SECONDS
    assert await t.client() is first
    t.clock.now += DOUBT_RECHECK_SECONDS  # long before the refresh interval
    assert await t.port.list_forms()
    assert await t.client() is not first


async def test_a_rotated_client_certificate_is_used_after_the_interval(tls_setup: Make) -> None:
    t = tls_setup("server-ca", "client-ca-1")
    assert await t.port.list_forms()
    first = await t.client()
    reads = t.secrets.reads
    t.clock.now += REFRESH  # unchanged Secrets: read again, same client
    assert await t.port.list_forms()
    assert await t.client() is first and t.secrets.reads > reads

    _restart(t.host, t.pki.host_tls("server-ca", client_ca="client-ca-2"))
    t.secrets.put_client(t.pki.client("client-ca-2", "operator"))
    with pytest.raises(HostUnavailable) as refused:
        await t.port.list_forms()  # the host refuses the old certificate
    assert not isinstance(refused.value, HostCertificateUntrusted)
    t.clock.now += REFRESH
    assert await t.port.list_forms()
    assert await t.client() is not first


async def test_a_missing_tls_secret_is_named(tls_setup: Make) -> None:
    t = tls_setup("server-ca", "client-ca")
    del t.secrets.data["host-client"]
    with pytest.raises(HostUnavailable, match="'host-client' not found"):
        await t.port.list_forms()


async def test_a_broken_bundle_keeps_the_working_client_and_is_warned_once(
    tls_setup: Make, caplog: pytest.LogCaptureFixture
) -> None:
    t = tls_setup("server-ca", "client-ca")
    assert await t.port.list_forms()
    first = await t.client()
    t.secrets.data["host-ca"] = {"ca.crt": b"not a certificate"}
    for _ in range(2):
        t.clock.now += REFRESH
        assert await t.port.list_forms()  # still served over the client that works
    assert await t.client() is first
    warnings = [r.getMessage() for r in caplog.records if "keeping its current" in r.message]
    assert len(warnings) == 1 and "not usable PEM" in warnings[0]

    t.secrets.put_ca(t.pki.ca("server-ca"))  # mended (the same CA): warned problem cleared
    t.clock.now += REFRESH
    assert await t.port.list_forms()
    assert await t.client() is first


async def test_a_bundle_that_is_not_pem_is_named_at_the_first_build(tls_setup: Make) -> None:
    t = tls_setup("server-ca", "client-ca")
    t.secrets.data["host-ca"] = {"ca.crt": b"not a certificate"}
    with pytest.raises(HostUnavailable, match=r"'tls-host'.*not usable PEM"):
        await t.port.list_forms()
