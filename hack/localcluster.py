#!/usr/bin/env python3
"""A local Kubernetes control plane for tests and development: etcd + kube-apiserver +
kube-controller-manager as plain processes on loopback (the envtest idea: no kubelet, no
containers, no images) and, optionally, one real node: kube-scheduler, containerd and a kubelet
that runs hostNetwork pods only (no CNI, no pod or service network; docs/local-cluster.md).

    python hack/localcluster.py up     # start it in .cluster/, print `export KUBECONFIG=...`
    python hack/localcluster.py up --node   # the same with the node
    python hack/localcluster.py env    # print the export line of the running one
    python hack/localcluster.py down   # stop it and delete .cluster/

As a library (the pytest fixtures use it)::

    cluster = LocalCluster(state_dir, node=True)
    cluster.start()          # raises ClusterError (with each component's log tail) on failure
    cluster.load_image(Path("build/image/takoform-operator-0.1.0.oci.tar"))   # node only
    ...cluster.kubeconfig, cluster.server...
    cluster.stop()

Stdlib only; the throwaway CA, certificates and keys are made with the `openssl` CLI. The
binaries come from `hack/tools.sh` (same version pins: hack/versions.env), or from the
directories named by TAKOFORM_KUBE_BIN / TAKOFORM_ETCD_BIN / TAKOFORM_HELM_BIN.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
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
# With the node, also: Deployments and ReplicaSets make Pods, every namespace gets the
# kube-root-ca.crt ConfigMap that ServiceAccount token volumes project, nodes that stop reporting
# go NotReady and their pods are evicted, PodDisruptionBudgets get their status.
NODE_CONTROLLERS = (
    "deployment-controller",
    "replicaset-controller",
    "root-ca-certificate-publisher-controller",
    "node-lifecycle-controller",
    "taint-eviction-controller",
    "disruption-controller",
)
# The node's name and address. A loopback --node-ip is rejected, and without
# --hostname-override the node would register the machine's external address: with the override
# an IP, the kubelet reports it as the node's address and nothing ever dials another one.
NODE_NAME = "127.0.0.1"
# The sandbox image containerd is told to use; imported from a local archive, never pulled.
PAUSE_IMAGE = "localhost/takoform-pause:1"


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
    kubelet: Path | None = None
    kube_scheduler: Path | None = None
    pause: Path | None = None
    # Upstream Prometheus 3.x with kubernetes_sd (Debian's, on PATH, lacks it).
    prometheus_upstream: Path | None = None

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
        node = Path(
            os.environ.get("TAKOFORM_NODE_BIN")
            or cache / "bin" / f"kubernetes-node-{versions['KUBERNETES_VERSION']}"
        )
        pause_key = hashlib.sha256((REPO / "hack" / "node" / "pause.c").read_bytes()).hexdigest()
        pause = Path(
            os.environ.get("TAKOFORM_PAUSE_BIN") or cache / "bin" / f"pause-{pause_key[:12]}"
        )
        prometheus_upstream = Path(
            os.environ.get("TAKOFORM_PROMETHEUS_UPSTREAM_BIN")
            or cache / "bin" / f"prometheus-{versions['PROMETHEUS_MODULE_VERSION']}"
        )
        tools = cls(
            kube_apiserver=kube / "kube-apiserver",
            kube_controller_manager=kube / "kube-controller-manager",
            kubectl=kube / "kubectl",
            etcd=etcd / "etcd",
            helm=helm / "helm",
            prometheus=_which("prometheus"),
            promtool=_which("promtool"),
            kubelet=node / "kubelet",
            kube_scheduler=node / "kube-scheduler",
            pause=pause / "pause",
            prometheus_upstream=prometheus_upstream / "prometheus",
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

    def check_node(self) -> None:
        """Raise ClusterError unless everything the node needs is there."""
        missing = [
            str(p)
            for p in (self.kubelet, self.kube_scheduler, self.pause)
            if p is None or not os.access(p, os.X_OK)
        ]
        missing += [
            n for n in ("containerd", "containerd-shim-runc-v2", "ctr", "runc") if not _which(n)
        ]
        if os.geteuid() != 0:
            missing.append("root (the kubelet and containerd need it)")
        if missing:
            raise ClusterError(
                "the node needs (build/install them with `make tools` / hack/tools.sh): "
                + ", ".join(missing)
            )


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
    # The API server's client certificate towards kubelets (logs, exec, port-forward).
    _signed_cert(pki, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver", client)
    _ec_key("sa.key", pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def make_node_pki(pki: Path) -> None:
    """Certificates of the node: the kubelet's client certificate (the Node authorizer's
    system:node:<name> in system:nodes), its serving certificate, and the scheduler's."""
    client = (
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
        "extendedKeyUsage=clientAuth\n"
    )
    _signed_cert(pki, "kubelet-client", f"/O=system:nodes/CN=system:node:{NODE_NAME}", client)
    _signed_cert(
        pki,
        "kubelet-serving",
        f"/CN={NODE_NAME}",
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        "extendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1\n",
    )
    _signed_cert(pki, "scheduler", "/CN=system:kube-scheduler", client)


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
    """etcd + kube-apiserver + kube-controller-manager, all in `state_dir`; with `node`, also
    kube-scheduler, containerd and a kubelet (node/ in `state_dir`).

    Layout: pki/ (certs and keys), etcd-data/, logs/<component>.log, kubeconfig (admin),
    controller-manager.kubeconfig, state.json (pids and ports, so another process can stop it).
    """

    COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")
    NODE_COMPONENTS = ("kube-scheduler", "containerd", "kubelet")

    def __init__(
        self,
        state_dir: Path,
        tools: Tools | None = None,
        die_with_parent: bool = False,
        node: bool = False,
    ) -> None:
        """`die_with_parent`: the components get SIGKILL if the process that started them dies
        (the test session is killed), so no orphaned control plane survives. Not for `up`.
        `node`: also run one node (hostNetwork pods only; needs root)."""
        self.state_dir = Path(state_dir).resolve()
        self.tools = tools or Tools.locate()
        self.die_with_parent = die_with_parent
        self.node = node
        if node:
            self.tools.check_node()
        self.pids: dict[str, int] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self.server = ""
        self.started_seconds: float | None = None
        self.node_started_seconds: float | None = None
        # What the node made outside state_dir and must remove again (see _node_cleanup).
        self.node_outside: list[str] = []

    @property
    def components(self) -> tuple[str, ...]:
        return self.COMPONENTS + (self.NODE_COMPONENTS if self.node else ())

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
                # Node: kubelets may touch only their own node and its pods' objects.
                "--authorization-mode=Node,RBAC",
                f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
                f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
                f"--kubelet-certificate-authority={pki / 'ca.crt'}",
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
                "--controllers=" + ",".join(CONTROLLERS + (NODE_CONTROLLERS if self.node else ())),
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
        if self.node:
            self._start_node(deadline)

    def _clear_state_dir(self) -> None:
        # Only ever delete a directory that is empty or was made by us.
        if not self.state_dir.exists():
            return
        if any(self.state_dir.iterdir()) and not (self.state_dir / "pki").is_dir():
            raise ClusterError(f"{self.state_dir} is not empty and not a local cluster's state")
        shutil.rmtree(self.state_dir)

    def stop(self, remove: bool = True) -> None:
        """Stop the components (reverse order, by process group) and, with `remove`, delete the
        state directory. The node's containers are killed first and everything it left outside
        the state directory is removed."""
        if self.node:
            self._stop_node()
        for name in reversed(self.components):
            pid = self.pids.pop(name, None)
            if pid is not None:
                stop_process_group(pid, name)
        if remove and self.state_dir.exists():
            shutil.rmtree(self.state_dir, ignore_errors=True)

    def log_tails(self, lines: int = 30) -> str:
        parts = []
        for name in self.components:
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
                "kube-scheduler": str(self.tools.kube_scheduler),
                "containerd": _which("containerd") and str(_which("containerd")),
                "kubelet": str(self.tools.kubelet),
            },
            "node": self.node,
            "node_outside": self.node_outside,
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
        cluster.node = bool(state.get("node"))
        cluster.node_outside = list(state.get("node_outside", []))
        cluster.node_started_seconds = None
        cluster.pids = {
            name: pid
            for name, pid in state["pids"].items()
            if _same_process(pid, state["binaries"][name])
        }
        return cluster

    def running(self) -> bool:
        return set(self.pids) == set(self.components) and all(map(_alive, self.pids.values()))

    # --- the node ------------------------------------------------------------------------

    @property
    def node_dir(self) -> Path:
        return self.state_dir / "node"

    @property
    def containerd_socket(self) -> Path:
        return self.node_dir / "containerd" / "containerd.sock"

    def _start_node(self, deadline: float) -> None:
        t0 = time.monotonic()
        node, pki = self.node_dir, self.pki
        for sub in ("containerd/root", "containerd/state", "containerd/runc", "cni/bin",
                    "cni/conf", "kubelet", "pod-logs"):  # fmt: skip
            (node / sub).mkdir(parents=True, exist_ok=True)
        self._note_outside()
        make_node_pki(pki)
        # No CNI plugin exists (cni/bin stays empty): hostNetwork pods never call one. The
        # placeholder only lets containerd report its network as ready, so the node is Ready.
        (node / "cni/conf/00-takoform-no-pod-network.conflist").write_text(
            json.dumps({
                "cniVersion": "1.0.0",
                "name": "takoform-no-pod-network",
                "plugins": [{"type": "takoform-no-pod-network"}],
            }) + "\n"
        )  # fmt: skip

        write_kubeconfig(
            self.state_dir / "scheduler.kubeconfig", self.server, pki / "ca.crt",
            pki / "scheduler.crt", pki / "scheduler.key", "system:kube-scheduler",
        )  # fmt: skip
        self._spawn(
            "kube-scheduler",
            [
                str(self.tools.kube_scheduler),
                f"--kubeconfig={self.state_dir / 'scheduler.kubeconfig'}",
                "--leader-elect=false",
                "--secure-port=0",
                "--v=1",
            ],
        )

        (node / "containerd.toml").write_text(_containerd_config(node, self.containerd_socket))
        self._spawn(
            "containerd",
            [shutil.which("containerd") or "containerd", f"--config={node / 'containerd.toml'}"],
        )
        self._wait_for(
            "containerd's socket", lambda: self._ctr("version").returncode == 0, deadline
        )
        pause_archive = node / "pause.oci.tar"
        assert self.tools.pause is not None
        write_oci_archive(pause_archive, PAUSE_IMAGE, {"pause": self.tools.pause.read_bytes()},
                          entrypoint=["/pause"])  # fmt: skip
        self.load_image(pause_archive, PAUSE_IMAGE)

        # hostNetwork pods only: anything else would need a pod network (and containerd would
        # leave a network namespace behind for it).
        self._kubectl_apply(_HOST_NETWORK_ONLY_POLICY)

        kubelet_port, healthz_port = free_port(), free_port()
        (node / "kubelet.yaml").write_text(
            json.dumps(
                _kubelet_config(node, pki, kubelet_port, healthz_port, self.containerd_socket),
                indent=2,
            )
        )
        write_kubeconfig(
            node / "kubelet.kubeconfig", self.server, pki / "ca.crt",
            pki / "kubelet-client.crt", pki / "kubelet-client.key", f"system:node:{NODE_NAME}",
        )  # fmt: skip
        kubelet_t0 = time.monotonic()
        self._spawn(
            "kubelet",
            [
                str(self.tools.kubelet),
                f"--config={node / 'kubelet.yaml'}",
                f"--kubeconfig={node / 'kubelet.kubeconfig'}",
                f"--root-dir={node / 'kubelet'}",
                f"--cert-dir={node / 'kubelet' / 'pki'}",
                f"--hostname-override={NODE_NAME}",
                "--v=1",
            ],
        )
        self._save_state()
        self._wait_for("the node to be Ready", self._node_ready, deadline)
        self.node_started_seconds = time.monotonic() - t0
        _log(
            f"node {NODE_NAME} Ready {time.monotonic() - kubelet_t0:.1f}s after the kubelet "
            f"started ({self.node_started_seconds:.1f}s with scheduler and containerd)"
        )

    def _node_ready(self) -> bool:
        req = urllib.request.Request(f"{self.server}/api/v1/nodes/{NODE_NAME}")
        try:
            with urllib.request.urlopen(req, context=self._ssl_context(), timeout=5) as resp:
                node = json.load(resp)
        except urllib.error.HTTPError:
            return False
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    def _ctr(self, *args: str, check: bool = False) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            ["ctr", f"--address={self.containerd_socket}", "--namespace=k8s.io", *args],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise ClusterError(f"ctr {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
        return proc

    def _kubectl_apply(self, manifest: str) -> None:
        proc = subprocess.run(
            [str(self.tools.kubectl), f"--kubeconfig={self.kubeconfig}", "apply", "-f", "-"],
            input=manifest, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        if proc.returncode != 0:
            raise ClusterError(f"kubectl apply failed:\n{proc.stderr}")

    def load_image(self, archive: Path, name: str | None = None) -> str:
        """Import an OCI archive into the node's containerd (where the kubelet finds it, so it is
        never pulled) and return the name the kubelet knows it by. `name` defaults to the
        archive's own reference (org.opencontainers.image.ref.name)."""
        if not self.node:
            raise ClusterError("load_image needs a cluster started with node=True")
        ref = name or _archive_ref(archive)
        full = _normalize_image(ref)
        self._ctr("images", "import", "--snapshotter=overlayfs", str(archive), check=True)
        imported = set(self._ctr("images", "ls", "-q", check=True).stdout.split())
        if full not in imported:
            # containerd names what it imports after the archive's annotations; tag it to the
            # reference the kubelet will ask for.
            source = next((i for i in imported if i.endswith(ref) or i == ref), None)
            if source is None:
                raise ClusterError(f"{archive}: no image named like {ref} in {sorted(imported)}")
            self._ctr("images", "tag", "--force", source, full, check=True)
        _log(f"image {full} loaded into the node")
        return full

    def _note_outside(self) -> None:
        """Record the places outside state_dir that the kubelet or containerd create, if they
        did not exist before the node started (so the node's cleanup removes only its own)."""
        for path in _NODE_OUTSIDE:
            if path not in self.node_outside and not os.path.lexists(path):
                self.node_outside.append(path)

    def _stop_node(self) -> None:
        """Kill the kubelet, then every container, then containerd; unmount what the kubelet
        mounted; remove the cgroups and directories it made outside state_dir."""
        for name in ("kubelet", "kube-scheduler"):
            pid = self.pids.pop(name, None)
            if pid is not None:
                stop_process_group(pid, name)
        if "containerd" in self.pids and self.containerd_socket.exists():
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                tasks = self._ctr("tasks", "ls", "-q").stdout.split()
                for task in tasks:
                    self._ctr("tasks", "kill", "--all", "--signal=SIGKILL", task)
                for task in tasks:
                    self._ctr("tasks", "delete", "--force", task)
        _kill_cgroup_processes(self.node_outside)
        pid = self.pids.pop("containerd", None)
        if pid is not None:
            stop_process_group(pid, "containerd")
        _kill_shims(self.containerd_socket)
        _unmount_under(self.state_dir)
        _remove_outside(self.node_outside)
        self.node_outside = []

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


# --- node helpers ------------------------------------------------------------------------------

# Paths outside the state directory that the kubelet or containerd create whatever they are told;
# removed again at stop when the node made them. cgroups: the kubelet's kubepods hierarchy.
_CGROUP_ROOT = Path("/sys/fs/cgroup")
_NODE_OUTSIDE = [
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/run/netns",
    "/etc/cni",
    "/opt/cni",
    *(str(c / "kubepods") for c in sorted(_CGROUP_ROOT.glob("*")) if (c / "cgroup.procs").exists()),
]

_HOST_NETWORK_ONLY_POLICY = """\
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: takoform-local-host-network-only
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - apiGroups: [""]
        apiVersions: [v1]
        operations: [CREATE]
        resources: [pods]
  validations:
    - expression: "has(object.spec.hostNetwork) && object.spec.hostNetwork"
      message: >-
        this local cluster runs hostNetwork pods only (no CNI, no pod or service network);
        set hostNetwork: true
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: takoform-local-host-network-only
spec:
  policyName: takoform-local-host-network-only
  validationActions: [Deny]
"""


def _containerd_config(node: Path, socket_path: Path) -> str:
    """containerd 1.6: private root, state and socket; CRI with cgroupfs and overlayfs; the
    stream server on loopback; the local pause image. restrict_oom_score_adj is required on these
    machines (without it every sandbox fails with "can't get final child's PID from pipe")."""
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""\
version = 2
root = "{node / "containerd/root"}"
state = "{node / "containerd/state"}"
disabled_plugins = [
  "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]

[grpc]
  address = "{socket_path}"

[ttrpc]
  address = "{socket_path}.ttrpc"

[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{node / "containerd/opt"}"

[{cri}]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_selinux = false
  disable_apparmor = true

[{cri}.containerd]
  snapshotter = "overlayfs"
  default_runtime_name = "runc"

[{cri}.containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[{cri}.containerd.runtimes.runc.options]
  SystemdCgroup = false
  Root = "{node / "containerd/runc"}"

[{cri}.cni]
  bin_dir = "{node / "cni/bin"}"
  conf_dir = "{node / "cni/conf"}"
  max_conf_num = 1
"""


def _kubelet_config(
    node: Path, pki: Path, port: int, healthz_port: int, socket_path: Path
) -> dict[str, object]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": "127.0.0.1",
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": healthz_port,
        "tlsCertFile": str(pki / "kubelet-serving.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet-serving.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{socket_path}",
        "imageServiceEndpoint": f"unix://{socket_path}",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,  # these machines have cgroup v1
        "failSwapOn": False,
        "podLogsDir": str(node / "pod-logs"),
        # No evictions and no image GC: this is a test node, and its images cannot be pulled back.
        "evictionHard": {},
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "serializeImagePulls": False,
        "registerNode": True,
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "clusterDNS": [],
        "resolvConf": "/etc/resolv.conf",
        "maxPods": 30,
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "10s",
        "logging": {"format": "text"},
    }


def _normalize_image(ref: str) -> str:
    """The reference as the kubelet asks containerd for it (docker.io/library defaults)."""
    name, _, _ = ref.partition("@")
    first = name.split("/", 1)[0]
    if "/" not in name:
        ref = f"docker.io/library/{ref}"
    elif "." not in first and ":" not in first and first != "localhost":
        ref = f"docker.io/{ref}"
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last and "@" not in ref:
        ref += ":latest"
    return ref


def _archive_ref(archive: Path) -> str:
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        index = json.load(member)
    for manifest in index.get("manifests", []):
        ref = manifest.get("annotations", {}).get("org.opencontainers.image.ref.name")
        if ref:
            return str(ref)
    raise ClusterError(f"{archive}: no org.opencontainers.image.ref.name; pass the image name")


def write_oci_archive(
    dest: Path, ref: str, files: dict[str, bytes], entrypoint: Sequence[str]
) -> None:
    """A one-layer OCI image archive holding executable `files` (e.g. the static pause binary),
    written with the standard library: no image builder needed for it."""
    layer = io.BytesIO()
    with tarfile.open(fileobj=layer, mode="w") as tar:
        for path, data in files.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o755, 0
            tar.addfile(info, io.BytesIO(data))
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, object]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    layer_desc = blob(layer.getvalue())
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Entrypoint": list(entrypoint), "User": "65535:65535"},
        "rootfs": {"type": "layers", "diff_ids": [layer_desc["digest"]]},
    }
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   **blob(json.dumps(config).encode())},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", **layer_desc}],
    }  # fmt: skip
    manifest_desc = blob(json.dumps(manifest).encode())
    index = {
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json", **manifest_desc,
            "annotations": {"org.opencontainers.image.ref.name": ref,
                            "io.containerd.image.name": _normalize_image(ref)},
        }],
    }  # fmt: skip
    with tarfile.open(dest, "w") as tar:

        def add(name: str, data: bytes) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))

        add("oci-layout", b'{"imageLayoutVersion": "1.0.0"}')
        add("index.json", json.dumps(index).encode())
        for digest, data in blobs.items():
            add("blobs/sha256/" + digest.split(":", 1)[1], data)


def _kill_cgroup_processes(outside: Sequence[str]) -> None:
    """SIGKILL every process in the kubepods cgroups this node created (its containers)."""
    for root in outside:
        if not root.startswith(str(_CGROUP_ROOT)):
            continue
        for procs in Path(root).rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)


def _kill_shims(socket_path: Path) -> None:
    """SIGKILL the containerd shims that serve our containerd (they outlive it by design)."""
    marker = str(socket_path).encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            if argv[0].endswith(b"containerd-shim-runc-v2") and marker in argv:
                os.kill(int(proc.name), signal.SIGKILL)


def _unmount_under(root: Path) -> None:
    """Unmount (lazily, deepest first) every mount point under `root`: the kubelet's volumes
    (tmpfs for projected tokens), its bind mount of its own root dir, container rootfs."""
    prefix = str(root) + "/"
    for _ in range(3):
        points = []
        with contextlib.suppress(OSError):
            for line in Path("/proc/self/mountinfo").read_text().splitlines():
                point = line.split()[4].replace("\\040", " ")
                if point.startswith(prefix) or point == str(root):
                    points.append(point)
        if not points:
            return
        for point in sorted(points, key=len, reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)


def _remove_outside(outside: Sequence[str]) -> None:
    """Remove what the node created outside its state dir: cgroups bottom-up (rmdir only works
    on empty ones), the rest as trees."""
    for path in outside:
        p = Path(path)
        if not p.exists():
            continue
        if path.startswith(str(_CGROUP_ROOT)):
            for sub in sorted((d for d in p.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
                with contextlib.suppress(OSError):
                    sub.rmdir()
            with contextlib.suppress(OSError):
                p.rmdir()
        else:
            shutil.rmtree(p, ignore_errors=True)


# --- command line ----------------------------------------------------------------------------


def _export_line(kubeconfig: Path) -> str:
    return f"export KUBECONFIG={kubeconfig}"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "env"))
    parser.add_argument(
        "--node",
        action="store_true",
        help="up: also run a node (kube-scheduler, containerd, kubelet; hostNetwork pods only)",
    )
    parser.add_argument(
        "--image",
        type=Path,
        action="append",
        default=[],
        help="up --node: OCI archive to load into the node (e.g. from `make image`); repeatable",
    )
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
        try:
            cluster = LocalCluster(args.state_dir, node=args.node)
            cluster.start()
            for archive in args.image:
                cluster.load_image(archive)
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
