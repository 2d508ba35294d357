"""One host client per TakoformHost, built from the host objects and the Secrets they name.

Adapter layer: the pool is fed with TakoformHost specs (kube.tenancy, from a kopf index, so it
is complete before any CR is reconciled) and reads Secrets through a `SecretReader`
(kube.secrets: only `get` of named Secrets in the operator's own namespace).
A client is built on first use; a host whose connection settings change gets a new client.
Tokens come from a `SecretToken` source: re-read on an interval and at once after a 401, so a
rotated Secret is used without a restart. The TLS Secrets (CA bundle, client certificate) are
re-read on the same interval and soon after the host's certificate failed to verify; when they
changed, the host gets a new client. Secret values are never logged.

Nothing is sent that the cluster admin did not mean (docs/tenancy.md): a Secret is used only when
it is opted in as a credential of that very host at that very URL
(core.tenancy.CREDENTIAL_ANNOTATION), and a host is reached over https, plain http only when it
says `insecure` explicitly.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import ssl
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from takoform_operator.core.actions import Action, Target
from takoform_operator.core.host_budget import HostBudget
from takoform_operator.core.state import DEFAULT_HOST, OperationView, ResourceView
from takoform_operator.core.tenancy import (
    HostConfig,
    SecretKeyRef,
    credential_refusal,
)
from takoform_operator.host_client.client import HostClient, RequestObserver, TokenSource
from takoform_operator.host_client.port import HostClientPort
from takoform_operator.host_port import (
    BudgetSpent,
    HostCertificateUntrusted,
    HostInsecure,
    HostThrottled,
    HostUnavailable,
    SecretNotFound,
    SecretNotOptedIn,
    SecretNotOptedInForUrl,
    StoredSecret,
)
from takoform_spec.identity import FormRef

logger = logging.getLogger("takoform_operator")


class SecretReader(Protocol):
    #: The operator's namespace, where every Secret it reads lives.
    namespace: str

    async def read(self, name: str) -> StoredSecret | None:
        """Secret `name` in the operator's namespace, or None when it is absent."""


async def _secret_value(reader: SecretReader, ref: SecretKeyRef, host: str, url: str) -> bytes:
    """One key of a Secret opted in as a credential of `host` at `url`; raises SecretNotFound
    (and SecretNotOptedIn, before any of its content is looked at) otherwise."""
    where = f"host {host!r}"
    secret = await reader.read(ref.name)
    if secret is None:
        raise SecretNotFound(f"{where}: Secret {ref.name!r} not found in the operator namespace")
    refusal = credential_refusal(reader.namespace, ref.name, host, url, secret.annotations)
    if refusal is not None:
        raise (SecretNotOptedInForUrl if refusal.elsewhere else SecretNotOptedIn)(refusal.message)
    if ref.key not in secret.data:
        raise SecretNotFound(f"{where}: Secret {ref.name!r} has no key {ref.key!r}")
    return secret.data[ref.key]


class SecretToken:
    """A TokenSource reading one Secret key, again after `refresh_seconds` and after a 401: the
    token of `host` at `url`, used only while the Secret is opted in for both."""

    def __init__(
        self,
        reader: SecretReader,
        ref: SecretKeyRef,
        host: str,
        url: str,
        refresh_seconds: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._reader, self._ref, self._host, self._url = reader, ref, host, url
        self._every, self._clock = refresh_seconds, clock
        self._value: str | None = None
        self._read_at: float | None = None
        self._lock = asyncio.Lock()

    async def token(self) -> str | None:
        if self._due():
            async with self._lock:
                # Requests that waited here for the same read take its value: one read each
                # time the token is due, however many requests wait for it.
                if self._due():
                    return await self._read()
        return self._value

    async def refresh(self) -> str | None:
        """Read the Secret again now (the host refused the token: 401)."""
        async with self._lock:
            return await self._read()

    def _due(self) -> bool:
        return self._read_at is None or self._clock() - self._read_at >= self._every

    async def _read(self) -> str | None:
        where = f"host {self._host!r}"
        raw = await _secret_value(self._reader, self._ref, self._host, self._url)
        try:
            value = raw.decode("utf-8").strip()
        except UnicodeDecodeError:
            raise SecretNotFound(
                f"{where}: Secret {self._ref.name!r} key {self._ref.key!r} is not UTF-8 text"
            ) from None
        if self._value is not None and value != self._value:
            logger.info(
                "host %s: token Secret %s changed",
                self._host,
                self._ref.name,
                extra={"host": self._host},
            )
        self._value, self._read_at = value, self._clock()
        return value


#: A replaced client (new URL, token Secret reference or TLS material) is closed this long after
#: it was replaced: far beyond any request it may still carry (timeouts plus read retries).
RETIRE_AFTER_SECONDS = 300.0

#: After the host's certificate failed to verify, the TLS Secrets are read again, at most this
#: often (a host that moved to a new CA fails every request until its bundle is read).
DOUBT_RECHECK_SECONDS = 2.0


@dataclass(frozen=True)
class TlsMaterial:
    """The PEM data a host's client was built with (compared, never logged)."""

    ca_bundle: bytes | None
    cert: bytes | None
    key: bytes | None

    def context(self) -> ssl.SSLContext:
        if self.ca_bundle is not None:
            context = ssl.create_default_context(cadata=self.ca_bundle.decode("utf-8"))
        else:
            context = ssl.create_default_context()
        if self.cert is not None and self.key is not None:
            _load_cert_chain(context, self.cert, self.key)
        return context


async def read_tls(reader: SecretReader, config: HostConfig) -> TlsMaterial | None:
    """The TLS Secrets a TakoformHost names; None when it names none."""
    if not config.has_tls():
        return None
    host, url = config.name, config.url
    ca = await _secret_value(reader, config.ca_bundle, host, url) if config.ca_bundle else None
    cert = key = None
    if config.client_cert is not None:
        cert = await _secret_value(reader, SecretKeyRef(config.client_cert, "tls.crt"), host, url)
        key = await _secret_value(reader, SecretKeyRef(config.client_cert, "tls.key"), host, url)
    return TlsMaterial(ca, cert, key)


@dataclass(frozen=True)
class Endpoint:
    """How a client reaches one host: its URL, token, timeout and TLS (httpx's `verify` and
    `cert`)."""

    url: str
    token: TokenSource | str | None
    timeout: float = 10.0
    verify: Any = True
    cert: Any = None


#: observe(host, verb, code, seconds): a request to the TakoformHost `host`.
HostObserver = Callable[[str, str, str, float], None]


def observer_of(observe: HostObserver | None, host: str) -> RequestObserver | None:
    """The RequestObserver of one host's client."""
    if observe is None:
        return None
    return lambda verb, code, seconds: observe(host, verb, code, seconds)


@dataclass
class _Entry:
    config: HostConfig
    client: HostClient | None = None
    lock: asyncio.Lock | None = None
    tls: TlsMaterial | None = None
    tls_read_at: float = 0.0
    doubted: bool = False  # the host's certificate failed to verify since the last read
    tls_problem: str | None = None  # why the last re-read was not used (warned once)


class HostPool:
    """name -> HostClientPort. TakoformHosts replace the implicit host of the same name."""

    def __init__(
        self,
        reader: SecretReader | None,
        *,
        refresh_seconds: float = 30.0,
        read_retries: int = 3,
        max_connections: int = 20,
        implicit: Endpoint | None = None,
        implicit_refusal: str | None = None,
        clock: Callable[[], float] = time.monotonic,
        retire_after: float = RETIRE_AFTER_SECONDS,
        observe: HostObserver | None = None,
        budget: HostBudget | None = None,
        dial: str | None = None,
    ) -> None:
        """`observe(host, verb, code, seconds)` hears of every request a client built here
        sends (host_client.client.HostClient's `observe`, with the TakoformHost's name).
        `budget`: the requests each namespace may send to each host (None: no budget).
        `implicit`: host `default` where no TakoformHost of that name is known. `dial`: the
        address every client connects to whatever its host's URL (the plugin's port-forward);
        each host's Secrets stay bound to its own URL."""
        self._dial = dial
        self._reader = reader
        self._budget = budget
        self._observe = observe
        #: Why nothing may be sent to the implicit host (core.tenancy.url_refusal), or None.
        self._implicit_refusal = implicit_refusal
        self._clock = clock
        self._refresh = refresh_seconds
        self._read_retries = read_retries
        self._max_connections = max_connections
        self._implicit = self._client(DEFAULT_HOST, implicit) if implicit is not None else None
        self._entries: dict[str, _Entry] = {}
        self._retire_after = retire_after
        self._retired: list[HostClient] = []  # replaced clients not closed yet
        self._closing: set[asyncio.Task[None]] = set()

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
            self._retire(old.client)
        self._entries[config.name] = _Entry(config)
        return True

    def forget(self, name: str) -> bool:
        old = self._entries.pop(name, None)
        if old is not None and old.client is not None:
            self._retire(old.client)
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

    def port(self, name: str, namespace: str | None = None) -> PooledPort:
        """The port the CRs of `namespace` reach host `name` by, within their budget."""
        return PooledPort(self, name, namespace)

    def prober(self, name: str) -> PooledPort:
        return PooledPort(self, name)

    async def client(self, name: str) -> HostClient:
        entry = self._entries.get(name)
        if entry is None:
            if name == DEFAULT_HOST and self._implicit is not None:
                if self._implicit_refusal is not None:
                    raise HostInsecure(self._implicit_refusal)
                return self._implicit
            raise HostUnavailable(f"no TakoformHost {name!r} is known")
        if entry.client is None or self._tls_due(entry):
            if entry.lock is None:
                entry.lock = asyncio.Lock()
            async with entry.lock:
                if entry.client is None:
                    entry.client = await self._build(entry)
                elif self._tls_due(entry):
                    await self._reread_tls(entry)
        assert entry.client is not None
        return entry.client

    def admit(self, name: str, namespace: str | None) -> None:
        """Take one request of `namespace`'s budget on host `name`; raises BudgetSpent (with
        the wait as retry_after, nothing sent) when its share is spent."""
        if self._budget is None or namespace is None:
            return
        now = self._clock()
        wait = self._budget.take(name, namespace, now)
        if wait > 0:
            raise BudgetSpent(
                f"namespace {namespace!r} has spent its share of host {name!r}'s request "
                f"budget ({self._budget.share(name, now):.3g} requests/s, shared by "
                f"{self._budget.active(name, now)} namespaces); nothing sent, its next request "
                f"in {wait:.2f} s",
                retry_after=wait,
            )

    def throttled(self, name: str, namespace: str | None, exc: HostThrottled) -> HostThrottled:
        """The host answered 429 to a request of `namespace`: only that namespace is held (for
        its Retry-After, else one refill of its share). The error to raise, with that hold."""
        if self._budget is None or namespace is None:
            return exc
        hold = self._budget.throttled(name, namespace, self._clock(), exc.retry_after)
        return HostThrottled(f"{exc} (namespace {namespace!r} held {hold:.2f} s)", retry_after=hold)

    def doubt(self, name: str) -> None:
        """The host's certificate failed to verify: read its TLS Secrets again soon."""
        entry = self._entries.get(name)
        if entry is not None and entry.config.has_tls():
            entry.doubted = True

    def _tls_due(self, entry: _Entry) -> bool:
        if entry.client is None or not entry.config.has_tls():
            return False
        age = self._clock() - entry.tls_read_at
        return age >= self._refresh or (entry.doubted and age >= DOUBT_RECHECK_SECONDS)

    async def _reread_tls(self, entry: _Entry) -> None:
        """Read the TLS Secrets again; when they changed, the host gets a new client. A Secret
        gone or not PEM keeps the client that works, with a warning (once per problem)."""
        assert self._reader is not None and entry.client is not None
        entry.tls_read_at, entry.doubted = self._clock(), False
        name = entry.config.name
        try:
            material = await read_tls(self._reader, entry.config)
            client = None if material == entry.tls else self._new_client(entry.config, material)
        except HostUnavailable as exc:
            if str(exc) != entry.tls_problem:
                logger.warning(
                    "host %s: keeping its current TLS settings: %s", name, exc, extra={"host": name}
                )
            entry.tls_problem = str(exc)
            return
        entry.tls_problem = None
        if client is not None:
            logger.info(
                "host %s: its TLS Secrets changed; new connections use them",
                name,
                extra={"host": name},
            )
            self._retire(entry.client)
            entry.client, entry.tls = client, material

    async def _build(self, entry: _Entry) -> HostClient:
        config = entry.config
        refusal = config.refusal()
        if refusal is not None:
            raise HostInsecure(refusal)  # before any Secret is read
        if self._reader is None and (config.token is not None or config.has_tls()):
            raise HostUnavailable(f"host {config.name!r}: the operator cannot read Secrets")
        if self._reader is not None:
            entry.tls = await read_tls(self._reader, config)
        entry.tls_read_at, entry.doubted = self._clock(), False
        return self._new_client(config, entry.tls)

    def _new_client(self, config: HostConfig, tls: TlsMaterial | None) -> HostClient:
        token: TokenSource | None = None
        if config.token is not None:
            assert self._reader is not None
            token = SecretToken(self._reader, config.token, config.name, config.url, self._refresh)
        try:
            verify = tls.context() if tls is not None else True
        except (ssl.SSLError, ValueError) as exc:
            raise HostUnavailable(
                f"host {config.name!r}: its CA bundle or client certificate Secret is not "
                f"usable PEM: {exc}"
            ) from None
        return self._client(config.name, Endpoint(config.url, token, config.timeout, verify))

    def _client(self, name: str, endpoint: Endpoint) -> HostClient:
        return HostClient(
            self._dial or endpoint.url,
            endpoint.token,
            timeout=endpoint.timeout,
            read_retries=self._read_retries,
            max_connections=self._max_connections,
            verify=endpoint.verify,
            cert=endpoint.cert,
            observe=observer_of(self._observe, name),
        )

    def _retire(self, client: HostClient) -> None:
        """Close a replaced client once the requests it may still carry are over."""
        self._retired.append(client)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # not within the event loop (tests): closed by aclose()
        task = loop.create_task(self._close_later(client))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    async def _close_later(self, client: HostClient) -> None:
        await asyncio.sleep(self._retire_after)
        await client.aclose()
        self._retired.remove(client)

    def closing(self) -> list[asyncio.Task[None]]:
        """The replaced clients' pending closes (for tests and shutdown)."""
        return list(self._closing)

    async def aclose(self) -> None:
        for task in self.closing():
            task.cancel()
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
    """The HostPort of one named host of the pool (its client is built on first use), for the
    CRs of `namespace`: each call is one request of its budget (HostPool.admit)."""

    def __init__(self, pool: HostPool, name: str, namespace: str | None = None) -> None:
        self._pool, self._name, self._namespace = pool, name, namespace

    async def get_operation(self, operation_id: str) -> OperationView:
        port = await self._port()
        with self._guarded():
            return await port.get_operation(operation_id)

    async def read(self, target: Target) -> ResourceView | None:
        port = await self._port()
        with self._guarded():
            return await port.read(target)

    async def list_operations(self, target: Target) -> list[tuple[str, OperationView]]:
        port = await self._port()
        with self._guarded():
            return await port.list_operations(target)

    async def execute(self, action: Action) -> tuple[str, OperationView]:
        port = await self._port()
        with self._guarded():
            return await port.execute(action)

    async def list_forms(self) -> list[FormRef]:
        client = await self._client()
        with self._guarded():
            return await client.list_forms()

    async def _client(self) -> HostClient:
        client = await self._pool.client(self._name)
        await client.ready()
        return client

    async def _port(self) -> HostClientPort:
        return HostClientPort(await self._client())

    @contextlib.contextmanager
    def _guarded(self) -> Iterator[None]:
        """One request of the namespace's budget, taken once its client is built and its token
        read: right before it goes out, so a slow read of Secrets (at a start) cannot gather
        the requests admitted meanwhile into one burst."""
        self._pool.admit(self._name, self._namespace)
        try:
            yield
        except HostCertificateUntrusted:
            self._pool.doubt(self._name)
            raise
        except HostThrottled as exc:
            raise self._pool.throttled(self._name, self._namespace, exc) from exc
