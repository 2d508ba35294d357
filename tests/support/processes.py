"""Processes the tests and the hack/ scripts start: the reference host, and free loopback ports.

- ``free_port()``: a loopback TCP port nobody listens on right now.
- ``HostProcess``: a real ``takoform-host serve`` subprocess on a free loopback port, with its own
  database, tokens and log file; ``start()`` (or ``with``) returns once /healthz answers, and
  ``stop()`` (or the end of the ``with``) stops it. With a ``HostTls``
  it serves HTTPS (and may require client certificates); the test's own clients use its CA.
  On Linux a host gets SIGKILL when the process that started it dies, and every host still
  running at exit is killed, so no host outlives a test run.

The pytest fixtures around them are in fixtures_host.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import signal
import ssl
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from waiting import TimedOut, wait_until

from localcluster import free_port
from takoform_spec.identity import FormRef

STARTUP_TIMEOUT = 30.0
_LIVE: set[HostProcess] = set()


def _die_with_parent() -> None:  # pragma: no cover - runs in the child
    """Linux: the host gets SIGKILL if the test process dies, so no host outlives a test run."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


@dataclass(frozen=True)
class HostTls:
    """What a host process serves over TLS, and what the test's own clients use with it."""

    cert: Path
    key: Path
    ca: Path  # signed `cert`: the clients verify with it
    client_ca: Path | None = None  # set: the host requires client certificates it signed
    client_cert: tuple[Path, Path] | None = None  # what the test's clients present

    def args(self) -> list[str]:
        args = ["--tls-cert", str(self.cert), "--tls-key", str(self.key)]
        return args + (["--tls-client-ca", str(self.client_ca)] if self.client_ca else [])

    def context(self) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if self.client_cert is not None:
            context.load_cert_chain(*self.client_cert)
        return context


class HostProcess:
    """A real ``takoform-host serve`` subprocess on a loopback port (HTTPS with `tls`)."""

    def __init__(
        self,
        workdir: Path,
        *,
        misbehaviours: Sequence[str] = (),
        commit_delay: float = 0.05,
        retention: float = 3600,
        packages: Sequence[Path | str] = (),
        extra_args: Sequence[str] = (),
        tls: HostTls | None = None,
    ) -> None:
        self.workdir = workdir
        self.tls = tls  # read at every start: replace it and restart to rotate certificates
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.db_path = workdir / "host.sqlite"
        self.log_path = workdir / "host.log"
        self.port = free_port()
        self.token = "tok-" + secrets.token_hex(12)
        self.admin_token = "adm-" + secrets.token_hex(12)
        self.args = [
            "--db",
            str(self.db_path),
            "--listen",
            f"127.0.0.1:{self.port}",
            "--commit-delay",
            str(commit_delay),
            "--retention",
            str(retention),
        ]
        for name in misbehaviours:
            self.args += ["--misbehave", name]
        for package in packages:
            self.args += ["--package", str(package)]
        self.args += list(extra_args)
        self.proc: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"<HostProcess {self.url} db={self.db_path}>"

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.port}"

    def _http(self) -> dict[str, Any]:
        """httpx options for the test's own clients of this host."""
        return {"verify": self.tls.context()} if self.tls else {}

    # -- lifecycle ---------------------------------------------------------------------------

    def command(self) -> list[str]:
        tls = self.tls.args() if self.tls else []
        return [sys.executable, "-m", "takoform_host.cli", "serve", *self.args, *tls]

    def start(self) -> None:
        """(Re)start on the same database and port; wait until /healthz answers."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError(f"{self} is already running")
        env = {
            **os.environ,
            "TAKOFORM_HOST_TOKENS": self.token,
            "TAKOFORM_HOST_ADMIN_TOKEN": self.admin_token,
        }
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        finally:
            log.close()
        _LIVE.add(self)
        try:
            wait_until(self._answers, f"{self} to answer /healthz", STARTUP_TIMEOUT, interval=0.05)
        except TimedOut:
            self.kill()
            raise RuntimeError(
                f"takoform-host did not become ready in time:\n{self.log_tail()}"
            ) from None

    def _answers(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"takoform-host exited with {self.proc.returncode} during start-up:\n"
                + self.log_tail()
            )
        with contextlib.suppress(httpx.HTTPError):
            answer = httpx.get(self.url + "/healthz", timeout=1.0, **self._http())
            return answer.status_code == 200
        return False

    def kill(self) -> None:
        """SIGKILL: no shutdown, nothing flushed beyond what was committed."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)
        _LIVE.discard(self)

    def stop(self) -> None:
        """SIGTERM and wait (SIGKILL after 10 s)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        _LIVE.discard(self)

    def __enter__(self) -> HostProcess:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 50) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    # -- clients -----------------------------------------------------------------------------

    def api(self) -> httpx.Client:
        """A client for the host API (base_url set, bearer token set). Close it (or `with`)."""
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"Bearer {self.token}"},
            timeout=10.0,
            **self._http(),
        )

    def resource_names(self, space: str, ref: FormRef) -> set[str]:
        """The names of the resources of `space` the host serves under the exact `ref`."""
        group, version = ref.api_version.split("/", 1)
        path = f"/v1alpha3/spaces/{space}/forms/{group}/{version}/{ref.kind}/resources"
        exact = {"definitionVersion": ref.definition_version, "schemaDigest": ref.schema_digest}
        with self.api() as api:
            answer = api.get(path, params=exact)
            answer.raise_for_status()
            return {item["metadata"]["name"] for item in answer.json()["items"]}

    def admin(self, method: str, path: str, json: object | None = None) -> httpx.Response:
        """Call the admin API (path like "/admin/v1/faults"); raises on a non-2xx answer."""
        response = httpx.request(
            method,
            self.url + path,
            json=json,
            headers={"Authorization": f"Bearer {self.admin_token}"},
            timeout=10.0,
            **self._http(),
        )
        if not response.is_success:
            raise RuntimeError(
                f"admin {method} {path} -> {response.status_code}: {response.text[:500]}"
            )
        return response

    def set_misbehaviours(self, names: Sequence[str]) -> None:
        self.admin("PUT", "/admin/v1/misbehaviours", {"enabled": list(names)})

    def set_faults(self, **faults: Any) -> None:
        self.admin("PUT", "/admin/v1/faults", faults)


@atexit.register
def _kill_leftovers() -> None:
    for host in list(_LIVE):
        host.kill()
