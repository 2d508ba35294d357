"""Liveness and readiness over HTTP, for the kubelet's probes.

- `/healthz`: 200 while the event loop answers and every list and watch of the API server works.
  A stopped or wedged process does not answer, so the kubelet's liveness probe fails and the
  container is restarted. A list or watch that has kept failing (after kopf's own retries) for
  `watch_failure_seconds` answers 503 naming it: kopf retries such a watch forever (the API
  server answering 429 "storage is (re)initializing", or not at all), and a process that cannot
  see its CRs must say so rather than look healthy (kube.json_seam reports every request).
- `/readyz`: 200 once the operator has started (settings read, host client made, leader election
  running), whether or not this replica is the leader: a standby replica is ready to take over,
  and a rolling update needs new replicas Ready before old ones go.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

from aiohttp import web

from takoform_operator.metrics import serve

#: kopf gives a failing request up after about 54 s of retries and starts again at once: a
#: watch it still runs fails at least this often.
RETRIED_WITHIN = 120.0


class Health:
    def __init__(
        self,
        watch_failure_seconds: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.ready = False
        self.leader: bool | None = None  # None: no leader election
        self._runner: web.AppRunner | None = None
        self.watch_failure_seconds = watch_failure_seconds
        self._clock = clock
        #: API path -> (first, last) failure of its lists/watches (cleared by a success).
        self._failing: dict[str, tuple[float, float]] = {}

    def requested(self, path: str, ok: bool) -> None:
        """A list or watch of `path` succeeded (`ok`) or failed after kopf's retries."""
        if ok:
            self._failing.pop(path, None)
        else:
            now = self._clock()
            self._failing[path] = (self._failing.get(path, (now, now))[0], now)

    def failing(self) -> list[str]:
        """The API paths whose lists and watches have failed for too long, sorted. A path kopf
        no longer asks for (its watch was stopped, e.g. its CRD deleted) stops counting once
        no failure was seen for a retry cycle of kopf (about 54 s; RETRIED_WITHIN)."""
        now = self._clock()
        recent = max(self.watch_failure_seconds, RETRIED_WITHIN)
        return sorted(
            path
            for path, (first, last) in self._failing.items()
            if now - first >= self.watch_failure_seconds and now - last <= recent
        )

    def _state(self) -> dict[str, object]:
        return {"ready": self.ready, "leader": self.leader}

    async def _healthz(self, request: web.Request) -> web.Response:
        failing = self.failing()
        if failing:
            lines = "".join(f"{path}\n" for path in failing)
            text = f"lists/watches failing for {self.watch_failure_seconds:g}s or more:\n{lines}"
            return web.Response(status=503, text=text)
        return web.Response(text="ok\n")

    async def _readyz(self, request: web.Request) -> web.Response:
        return web.Response(
            status=200 if self.ready else 503,
            text=json.dumps(self._state()) + "\n",
            content_type="application/json",
        )

    async def start(self, host: str, port: int) -> None:
        routes = {"/healthz": self._healthz, "/readyz": self._readyz}
        self._runner = await serve(routes, host, port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
