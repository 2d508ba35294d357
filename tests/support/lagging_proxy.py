"""A TLS proxy in front of the API server that delivers watch streams late.

An API server under load can send a watch event well after it answered the write that caused
it, so an operator may see an older body of its CR after a newer one. ``lagging_watches(cluster,
lag, workdir)`` starts this proxy in a thread and yields a kubeconfig pointing at it: every byte
the API server sends on a connection that carried a watch request reaches the client `lag`
seconds late, in order; every other request passes at once. The proxy terminates TLS with its own
throwaway CA and connects upstream with the cluster kubeconfig's CA and client certificate (the
client's own credentials are not seen upstream; a bearer token header is passed through).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from fixtures_kube import KubeCluster
from tls import Pki

#: How a watch request looks on the wire (kopf and the kubernetes client both say watch=true).
WATCH = b"watch=true"
#: Where the e2e `operator` fixture keeps the proxy of a test marked lagging_watches.
STASHED = pytest.StashKey["LaggingProxy"]()


class LaggingProxy:
    def __init__(
        self,
        upstream: tuple[str, int],
        upstream_tls: ssl.SSLContext,
        tls: ssl.SSLContext,
        lag: float,
    ) -> None:
        self._upstream, self._upstream_tls, self._tls, self.lag = upstream, upstream_tls, tls, lag
        self.watches = 0  # connections that carried a watch request
        self.late_chunks = 0  # chunks of a watch stream delivered `lag` late
        self.kubeconfig: Path | None = None  # set once it listens

    async def serve(self) -> asyncio.Server:
        return await asyncio.start_server(self._connection, "127.0.0.1", 0, ssl=self._tls)

    async def _connection(
        self, client: asyncio.StreamReader, to_client: asyncio.StreamWriter
    ) -> None:
        host, port = self._upstream
        try:
            upstream, to_upstream = await asyncio.open_connection(
                host, port, ssl=self._upstream_tls, server_hostname=host
            )
        except OSError:
            to_client.close()
            return
        watching = asyncio.Event()
        await asyncio.gather(
            self._requests(client, to_upstream, watching),
            self._answers(upstream, to_client, watching),
            return_exceptions=True,
        )

    async def _requests(
        self,
        client: asyncio.StreamReader,
        to_upstream: asyncio.StreamWriter,
        watching: asyncio.Event,
    ) -> None:
        tail = b""
        try:
            while chunk := await client.read(65536):
                if not watching.is_set() and WATCH in tail + chunk:
                    watching.set()
                    self.watches += 1
                tail = chunk[-len(WATCH) :]
                to_upstream.write(chunk)
                await to_upstream.drain()
        finally:
            to_upstream.close()

    async def _answers(
        self,
        upstream: asyncio.StreamReader,
        to_client: asyncio.StreamWriter,
        watching: asyncio.Event,
    ) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, chunk = await queue.get()
                if not chunk:
                    return
                await asyncio.sleep(max(0.0, due - loop.time()))  # the lag itself: the fault
                to_client.write(chunk)
                await to_client.drain()

        delivering = asyncio.create_task(deliver())
        try:
            while chunk := await upstream.read(65536):
                lag = self.lag if watching.is_set() else 0.0
                self.late_chunks += lag > 0
                queue.put_nowait((loop.time() + lag, chunk))
        finally:
            queue.put_nowait((loop.time() + self.lag, b""))
            with contextlib.suppress(Exception):
                await delivering
            to_client.close()


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    path.chmod(0o600)
    return path


@contextlib.contextmanager
def lagging_watches(cluster: KubeCluster, lag: float, workdir: Path) -> Iterator[LaggingProxy]:
    """The proxy, running; its kubeconfig is `proxy.kubeconfig`."""
    workdir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = cluster.kubectl_json(
        "config", "view", "--minify", "--raw", "--flatten"
    )
    server = config["clusters"][0]["cluster"]
    user = config["users"][0]["user"]
    upstream_tls = ssl.create_default_context(
        cadata=base64.b64decode(server["certificate-authority-data"]).decode()
    )
    if "client-certificate-data" in user:
        upstream_tls.load_cert_chain(
            _write(workdir / "upstream.crt", base64.b64decode(user["client-certificate-data"])),
            _write(workdir / "upstream.key", base64.b64decode(user["client-key-data"])),
        )
    served = Pki(workdir / "pki").host_tls("lagging-proxy-ca")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(served.cert, served.key)
    url = urlsplit(server["server"])
    proxy = LaggingProxy((url.hostname or "127.0.0.1", url.port or 443), upstream_tls, tls, lag)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="lagging-proxy", daemon=True)
    thread.start()
    listening = asyncio.run_coroutine_threadsafe(proxy.serve(), loop).result(timeout=10)
    port = listening.sockets[0].getsockname()[1]
    server["server"] = f"https://127.0.0.1:{port}"
    server["certificate-authority-data"] = base64.b64encode(served.ca.read_bytes()).decode()
    proxy.kubeconfig = _write(workdir / "lagging.kubeconfig", json.dumps(config).encode())
    try:
        yield proxy
    finally:

        async def stop() -> None:
            listening.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        asyncio.run_coroutine_threadsafe(stop(), loop).result(timeout=10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)
