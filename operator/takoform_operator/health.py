"""Liveness and readiness over HTTP, for the kubelet's probes.

- `/healthz`: 200 while the event loop answers. A stopped or wedged process does not answer, so
  the kubelet's liveness probe fails and the container is restarted.
- `/readyz`: 200 once the operator has started (settings read, host client made, leader election
  running), whether or not this replica is the leader: a standby replica is ready to take over,
  and a rolling update needs new replicas Ready before old ones go.
"""

from __future__ import annotations

import json

from aiohttp import web


class Health:
    def __init__(self) -> None:
        self.ready = False
        self.leader: bool | None = None  # None: no leader election
        self._runner: web.AppRunner | None = None

    def _state(self) -> dict[str, object]:
        return {"ready": self.ready, "leader": self.leader}

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        return web.Response(
            status=200 if self.ready else 503,
            text=json.dumps(self._state()) + "\n",
            content_type="application/json",
        )

    async def start(self, host: str, port: int) -> None:
        app = web.Application()
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
