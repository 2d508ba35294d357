#!/usr/bin/env python3
"""A local Kubernetes control plane for tests and development: etcd + kube-apiserver +
kube-controller-manager as plain processes on loopback (the envtest idea: no kubelet, no
containers, no images).

    python hack/localcluster.py up     # start it in .cluster/, print `export KUBECONFIG=...`
    python hack/localcluster.py env    # print the export line of the running one
    python hack/localcluster.py down   # stop it and delete .cluster/

As a library (the pytest fixtures use it)::

    cluster = LocalCluster(state_dir)
    cluster.start()          # raises ClusterError (with each component's log tail) on failure
    ...cluster.kubeconfig, cluster.server...
    cluster.stop()

Stdlib only; the throwaway CA, certificates and keys are made with the `openssl` CLI. The
binaries come from `hack/tools.sh` (same version pins: hack/versions.env), or from the
directories named by TAKOFORM_KUBE_BIN / TAKOFORM_ETCD_BIN / TAKOFORM_HELM_BIN.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VERSIONS_FILE = REPO / "hack" / "versions.env"
DEFAULT_STATE_DIR = REPO / ".cluster"
SERVICE_CIDR = "10.0.0.0/24"
# Controllers the tests rely on: namespaces finish deleting, ownerReferences collect, every
# namespace gets its `default` ServiceAccount (and legacy token Secrets keep working), and
# ClusterRoles labelled aggregate-to-edit/view reach the built-in edit and view roles.
CONTROLLERS = (
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "clusterrole-aggregation-controller",
)


class ClusterError(RuntimeError):
    """The control plane could not be started (the message carries the logs' tails)."""


def _log(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} localcluster: {msg}", file=sys.stderr, flush=True)


# --- locating the binaries ------------------------------------------------------------------


def read_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """Parse hack/versions.env (KEY=VALUE lines, # comments)."""
    versions = {}
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            versions[key.strip()] = value.strip()
    return versions


@dataclass(frozen=True)
class Tools:
    """Absolute paths of the pinned binaries."""

    kube_apiserver: Path
    kube_controller_manager: Path
    kubectl: Path
    etcd: Path
    helm: Path
    prometheus: Path | None
    promtool: Path | None

    @classmethod
    def locate(cls) -> Tools:
        """Find the binaries hack/tools.sh built (TAKOFORM_*_BIN override the cache layout)."""
        versions = read_versions()
        cache = Path(
            os.environ.get("TAKOFORM_TOOLS_CACHE") or Path.home() / ".cache" / "takoform-operator"
        )
        kube = Path(
            os.environ.get("TAKOFORM_KUBE_BIN")
            or cache / "bin" / f"kubernetes-{versions['KUBERNETES_VERSION']}"
        )
        etcd = Path(
            os.environ.get("TAKOFORM_ETCD_BIN")
            or cache / "bin" / f"etcd-{versions['ETCD_VERSION']}"
        )
        helm = Path(
            os.environ.get("TAKOFORM_HELM_BIN")
            or cache / "bin" / f"helm-{versions['HELM_VERSION']}"
        )
        tools = cls(
            kube_apiserver=kube / "kube-apiserver",
            kube_controller_manager=kube / "kube-controller-manager",
            kubectl=kube / "kubectl",
            etcd=etcd / "etcd",
            helm=helm / "helm",
            prometheus=_which("prometheus"),
            promtool=_which("promtool"),
        )
        missing = [
            str(p)
            for p in (
                tools.kube_apiserver,
                tools.kube_controller_manager,
                tools.kubectl,
                tools.etcd,
            )
            if not os.access(p, os.X_OK)
        ]
        if missing:
            raise ClusterError(
                "missing binaries (build them with `make tools` / hack/tools.sh): "
                + ", ".join(missing)
            )
        return tools


def _which(name: str) -> Path | None:
    found = shutil.which(name)
    return Path(found) if found else None


# --- certificates ----------------------------------------------------------------------------


def _openssl(*args: str, cwd: Path) -> None:
    proc = subprocess.run(["openssl", *args], cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ClusterError(f"openssl {' '.join(args)} failed:\n{proc.stderr}")


def _ec_key(name: str, cwd: Path) -> None:
    # P-256 keys: generated instantly, accepted everywhere (TLS, client certs, ES256 tokens).
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", name, cwd=cwd)


def _signed_cert(
    cwd: Path, name: str, subject: str, extensions: str, days: int = 7
) -> tuple[Path, Path]:
    """Make <name>.key and <name>.crt signed by ca.key; `extensions` is an x509v3 section."""
    _ec_key(f"{name}.key", cwd)
    # Key identifiers keep strict verifiers (e.g. Python's VERIFY_X509_STRICT) happy.
    ids = "subjectKeyIdentifier=hash\nauthorityKeyIdentifier=keyid,issuer\n"
    (cwd / f"{name}.ext").write_text(extensions + ids)
    _openssl("req", "-new", "-key", f"{name}.key", "-subj", subject, "-out", f"{name}.csr", cwd=cwd)
    _openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
        "-CAcreateserial", "-days", str(days), "-sha256",
        "-extfile", f"{name}.ext", "-out", f"{name}.crt",
        cwd=cwd,
    )  # fmt: skip
    return cwd / f"{name}.crt", cwd / f"{name}.key"


def make_pki(pki: Path) -> None:
    """A throwaway CA; the API server's serving cert; client certs for the admin (in
    system:masters) and for the controller-manager; the ServiceAccount token signing key."""
    pki.mkdir(parents=True, exist_ok=True)
    _ec_key("ca.key", pki)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", "/CN=takoform-local-ca",
        "-days", "7", "-sha256", "-out", "ca.crt",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=pki,
    )  # fmt: skip
    client = (
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _signed_cert(
        pki,
        "apiserver",
        "/CN=kube-apiserver",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\n"
        "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,"
        "DNS:kubernetes.default,DNS:kubernetes.default.svc\n",
    )
    _signed_cert(pki, "admin", "/O=system:masters/CN=takoform-admin", client)
    # The built-in RBAC role system:kube-controller-manager is bound to this user name.
    _signed_cert(pki, "controller-manager", "/CN=system:kube-controller-manager", client)
    _ec_key("sa.key", pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def write_kubeconfig(path: Path, server: str, ca: Path, cert: Path, key: Path, user: str) -> None:
    # JSON is valid YAML; embedding paths (not data) keeps it readable.
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "takoform-local",
                "cluster": {"server": server, "certificate-authority": str(ca)},
            }
        ],
        "users": [
            {"name": user, "user": {"client-certificate": str(cert), "client-key": str(key)}}
        ],
        "contexts": [
            {"name": "takoform-local", "context": {"cluster": "takoform-local", "user": user}}
        ],
        "current-context": "takoform-local",
    }
    path.write_text(json.dumps(config, indent=2) + "\n")
    path.chmod(0o600)


# --- processes -------------------------------------------------------------------------------


def free_port() -> int:
    """A loopback port that was free a moment ago (the kernel picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie (exited, not yet reaped by its parent) is not alive for our purposes.
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False
    return True


def _same_process(pid: int, binary: str) -> bool:
    """True if `pid` still runs `binary` (guards against a reused pid in a stale state file)."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode()
    except OSError:
        return False
    return argv0 == binary


def stop_process_group(pid: int, name: str, timeout: float = 15.0) -> None:
    """SIGTERM the process group led by `pid` (each component runs in its own session), then
    SIGKILL whatever is left after `timeout`."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 5.0)
        while time.monotonic() < deadline:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
            if not _alive(pid):
                return
            time.sleep(0.05)
        if sig == signal.SIGTERM:
            _log(f"{name} (pid {pid}) ignored SIGTERM for {timeout:.0f}s; killing it")


def _kill_me_with_parent() -> None:
    """Runs in the child before exec: ask Linux for SIGKILL when the parent dies."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "    (no log)"
    return "\n".join("    " + line for line in text[-lines:])


# --- the control plane -----------------------------------------------------------------------


class LocalCluster:
    """etcd + kube-apiserver + kube-controller-manager, all in `state_dir`.

    Layout: pki/ (certs and keys), etcd-data/, logs/<component>.log, kubeconfig (admin),
    controller-manager.kubeconfig, state.json (pids and ports, so another process can stop it).
    """

    COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")

    def __init__(
        self, state_dir: Path, tools: Tools | None = None, die_with_parent: bool = False
    ) -> None:
        """`die_with_parent`: the components get SIGKILL if the process that started them dies
        (the test session is killed), so no orphaned control plane survives. Not for `up`."""
        self.state_dir = Path(state_dir).resolve()
        self.tools = tools or Tools.locate()
        self.die_with_parent = die_with_parent
        self.pids: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.server = ""
        self.started_seconds: float | None = None

    # paths
    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.state_dir / "pki"

    @property
    def logs(self) -> Path:
        return self.state_dir / "logs"

    @property
    def state_file(self) -> Path:
        return self.state_dir / "state.json"

    # lifecycle
    def start(self, timeout: float = 120.0, attempts: int = 2) -> None:
        """Start everything and wait until it is usable; on any failure stop what started and
        raise ClusterError with the tail of each component's log. A failed attempt is retried
        once with fresh ports (another process may have taken a port we picked)."""
        t0 = time.monotonic()
        for attempt in range(1, attempts + 1):
            try:
                self._start(timeout)
                break
            except BaseException as exc:
                report = self.log_tails()
                self.stop(remove=False)
                if not isinstance(exc, ClusterError):
                    raise
                if attempt == attempts:
                    raise ClusterError(f"{exc}\n{report}") from None
                _log(f"start-up failed ({exc}); retrying with new ports\n{report}")
        self.started_seconds = time.monotonic() - t0
        _log(f"control plane ready in {self.started_seconds:.1f}s at {self.server}")

    def _start(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self._clear_state_dir()
        self.logs.mkdir(parents=True)
        make_pki(self.pki)
        pki = self.pki

        etcd_client, etcd_peer, api_port = free_port(), free_port(), free_port()
        etcd_url = f"http://127.0.0.1:{etcd_client}"
        self._spawn(
            "etcd",
            [
                str(self.tools.etcd),
                "--name=takoform-local",
                f"--data-dir={self.state_dir / 'etcd-data'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=takoform-local=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",  # test data: durability is not wanted, speed is
                "--log-level=warn",
            ],
        )
        self._wait_http("etcd", f"{etcd_url}/health", deadline, lambda body: b'"true"' in body)

        self.server = f"https://127.0.0.1:{api_port}"
        self._spawn(
            "kube-apiserver",
            [
                str(self.tools.kube_apiserver),
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={api_port}",
                f"--cert-dir={pki}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                "--authorization-mode=RBAC",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # The `kubernetes` Service's Endpoints would point at 127.0.0.1, which the API
                # rejects (loopback) every 10s; nothing here routes to it anyway.
                "--endpoint-reconciler-type=none",
                # ServiceAccount tokens (TokenRequest API): issuer, signing key, verification key.
                f"--service-account-issuer={self.server}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait_apiserver(deadline)
        write_kubeconfig(
            self.kubeconfig, self.server, pki / "ca.crt",
            pki / "admin.crt", pki / "admin.key", "takoform-admin",
        )  # fmt: skip
        kcm_config = self.state_dir / "controller-manager.kubeconfig"
        write_kubeconfig(
            kcm_config, self.server, pki / "ca.crt",
            pki / "controller-manager.crt", pki / "controller-manager.key",
            "system:kube-controller-manager",
        )  # fmt: skip
        self._spawn(
            "kube-controller-manager",
            [
                str(self.tools.kube_controller_manager),
                f"--kubeconfig={kcm_config}",
                "--controllers=" + ",".join(CONTROLLERS),
                # Each controller acts as its own ServiceAccount in kube-system, as in real
                # clusters, so RBAC sees the same identities there.
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--leader-elect=false",
                # No metrics/health endpoint needed: readiness is checked through the API.
                "--secure-port=0",
                "--v=1",
            ],
        )
        self._save_state()
        # The serviceaccount controller creating default/default proves the controller-manager
        # is up, authenticated and authorised.
        self._wait_for(
            "the default ServiceAccount (controller-manager running)",
            lambda: self._get("/api/v1/namespaces/default/serviceaccounts/default") == 200,
            deadline,
        )

    def _clear_state_dir(self) -> None:
        # Only ever delete a directory that is empty or was made by us.
        if not self.state_dir.exists():
            return
        if any(self.state_dir.iterdir()) and not (self.state_dir / "pki").is_dir():
            raise ClusterError(f"{self.state_dir} is not empty and not a local cluster's state")
        shutil.rmtree(self.state_dir)

    def stop(self, remove: bool = True) -> None:
        """Stop the components (reverse order, by process group) and, with `remove`, delete the
        state directory."""
        for name in reversed(self.COMPONENTS):
            pid = self.pids.pop(name, None)
            if pid is not None:
                stop_process_group(pid, name)
        if remove and self.state_dir.exists():
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def log_tails(self, lines: int = 30) -> str:
        parts = []
        for name in self.COMPONENTS:
            log = self.logs / f"{name}.log"
            if log.exists():
                parts.append(f"--- last {lines} lines of {log}:\n{_tail(log, lines)}")
        return "\n".join(parts)

    # state file, for `down` from another process
    def _save_state(self) -> None:
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "pids": self.pids,
            "binaries": {
                "etcd": str(self.tools.etcd),
                "kube-apiserver": str(self.tools.kube_apiserver),
                "kube-controller-manager": str(self.tools.kube_controller_manager),
            },
        }
        self.state_file.write_text(json.dumps(state, indent=2) + "\n")

    @classmethod
    def from_state(cls, state_dir: Path) -> LocalCluster | None:
        """The cluster recorded in state_dir, with only the pids that still run our binaries."""
        state_file = Path(state_dir) / "state.json"
        if not state_file.exists():
            return None
        state = json.loads(state_file.read_text())
        cluster = cls.__new__(cls)
        cluster.state_dir = Path(state_dir).resolve()
        cluster.tools = None  # type: ignore[assignment]
        cluster.server = state["server"]
        cluster.started_seconds = None
        cluster._procs = {}
        cluster.die_with_parent = False
        cluster.pids = {
            name: pid
            for name, pid in state["pids"].items()
            if _same_process(pid, state["binaries"][name])
        }
        return cluster

    def running(self) -> bool:
        return set(self.pids) == set(self.COMPONENTS) and all(map(_alive, self.pids.values()))

    # restarts (the chaos soak: hack/soak.py)
    def restart(self, name: str, down_seconds: float = 0.0, timeout: float = 60.0) -> None:
        """SIGKILL one component (etcd or kube-apiserver) and start it again with the same
        command line, ports and data after `down_seconds`; wait until the API server is ready.
        Additive: the components are started exactly as `start` does."""
        pid = self.pids[name]
        argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
        proc = self._procs.pop(name, None)
        if proc is not None:
            proc.wait(timeout=15)
        time.sleep(down_seconds)
        self._spawn(name, argv)
        self._save_state()
        self._wait_apiserver(time.monotonic() + timeout)

    # helpers
    def _spawn(self, name: str, argv: list[str]) -> None:
        log = (self.logs / f"{name}.log").open("ab")
        # Own session => own process group: stop() can signal it and everything it forked,
        # and a Ctrl-C in the terminal that ran `up` does not reach it.
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd=self.state_dir,
            preexec_fn=_kill_me_with_parent if self.die_with_parent else None,
        )
        log.close()
        self.pids[name] = proc.pid
        self._procs[name] = proc  # keep the Popen so it is reaped, not left a zombie
        _log(f"started {name} (pid {proc.pid})")

    def _check_running(self) -> None:
        for name, pid in self.pids.items():
            proc = self._procs.get(name)
            if (proc.poll() is not None) if proc else not _alive(pid):
                raise ClusterError(f"{name} exited during start-up")

    def _wait_for(self, what: str, ready, deadline: float) -> None:
        while True:
            self._check_running()
            with contextlib.suppress(OSError, ssl.SSLError):
                if ready():
                    return
            if time.monotonic() > deadline:
                raise ClusterError(f"timed out waiting for {what}")
            time.sleep(0.1)

    def _wait_http(self, name: str, url: str, deadline: float, ok) -> None:
        def ready() -> bool:
            with urllib.request.urlopen(url, timeout=2) as resp:
                return bool(ok(resp.read()))

        self._wait_for(name, ready, deadline)

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _get(self, path: str) -> int:
        req = urllib.request.Request(self.server + path)
        try:
            with urllib.request.urlopen(req, context=self._ssl_context(), timeout=5) as resp:
                return int(resp.status)
        except urllib.error.HTTPError as err:
            return int(err.code)

    def _wait_apiserver(self, deadline: float) -> None:
        self._wait_for("kube-apiserver /readyz", lambda: self._get("/readyz") == 200, deadline)


# --- command line ----------------------------------------------------------------------------


def _export_line(kubeconfig: Path) -> str:
    return f"export KUBECONFIG={kubeconfig}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "env"))
    parser.add_argument(
        "--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="default: .cluster/ in the repo"
    )
    args = parser.parse_args(argv)
    existing = LocalCluster.from_state(args.state_dir)

    if args.command == "up":
        if existing and existing.running():
            _log(f"already running at {existing.server}")
            print(_export_line(existing.kubeconfig))
            return 0
        if existing:
            existing.stop()  # leftovers of a half-dead cluster
        cluster = LocalCluster(args.state_dir)
        try:
            cluster.start()
        except ClusterError as exc:
            print(f"localcluster: {exc}", file=sys.stderr)
            return 1
        # stdout is only the export line, so `eval "$(python hack/localcluster.py up)"` works.
        _log(f"logs in {cluster.logs}; stop with: python hack/localcluster.py down")
        print(_export_line(cluster.kubeconfig))
        return 0

    if args.command == "env":
        if not (existing and existing.running()):
            print("localcluster: not running (start it with `make cluster-up`)", file=sys.stderr)
            return 1
        print(_export_line(existing.kubeconfig))
        return 0

    # down
    if existing is None:
        _log("nothing to stop")
        if (args.state_dir / "pki").is_dir():  # leftovers of a failed `up`
            shutil.rmtree(args.state_dir, ignore_errors=True)
        return 0
    existing.stop()
    _log("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
