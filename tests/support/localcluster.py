#!/usr/bin/env python3
"""A local Kubernetes control plane for tests and development: etcd + kube-apiserver +
kube-controller-manager as plain processes on loopback (the envtest idea: no kubelet, no
containers, no images) and, optionally, real nodes: kube-scheduler, and per node a containerd and
a kubelet that run hostNetwork pods only (no CNI, no pod or service network;
docs/local-cluster.md). Node N is the loopback address 127.0.0.N.

    python hack/localcluster.py up     # start it in .cluster/, print `export KUBECONFIG=...`
    python hack/localcluster.py up --node   # the same with one node (127.0.0.1)
    python hack/localcluster.py up --nodes 2   # two nodes, 127.0.0.1 and 127.0.0.2
    python hack/localcluster.py env    # print the export line of the running one
    python hack/localcluster.py down   # stop it and delete .cluster/

As a library (the pytest fixtures use it)::

    cluster = LocalCluster(state_dir, node=True)
    cluster.start()          # raises ClusterError (with each component's log tail) on failure
    cluster.load_image(Path("build/image/takoform-operator-0.1.0.oci.tar"))   # every node
    cluster.add_node("127.0.0.2"); cluster.remove_node("127.0.0.2")   # a node more, for a while
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
import ipaddress
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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
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
# The first node's name and address. A loopback --node-ip is rejected, and without
# --hostname-override the node would register the machine's external address: with the override
# an IP, the kubelet reports it as the node's address and nothing ever dials another one.
NODE_NAME = "127.0.0.1"
# The sandbox image containerd is told to use; imported from a local archive, never pulled.
PAUSE_IMAGE = "localhost/takoform-pause:1"


class ClusterError(RuntimeError):
    """The control plane could not be started (the message carries the logs' tails)."""


@dataclass(frozen=True)
class NodeSpec:
    """One node. Its name is a loopback address: the kubelet's --hostname-override (so the
    node's, and its hostNetwork pods', IP), where the kubelet and its containerd's stream server
    listen. The first node (127.0.0.1) keeps the plain names (components `containerd` and
    `kubelet`, dir `node/`) and the default cgroup root; any other has its own: `containerd-<name>`,
    `kubelet-<name>`, `node-<name>/`, and cgroup root `/takoform-node-<name>` (a kubelet removes
    the pod cgroups it does not know under its root, so two kubelets must never share one)."""

    name: str

    def __post_init__(self) -> None:
        try:
            address = ipaddress.ip_address(self.name)
        except ValueError:
            address = None
        if not (isinstance(address, ipaddress.IPv4Address) and address.is_loopback):
            raise ClusterError(f"a node's name is a 127.0.0.0/8 address, not {self.name!r}")

    @property
    def first(self) -> bool:
        return self.name == NODE_NAME

    @property
    def _suffix(self) -> str:
        return "" if self.first else f"-{self.name}"

    @property
    def containerd(self) -> str:
        return "containerd" + self._suffix

    @property
    def kubelet(self) -> str:
        return "kubelet" + self._suffix

    @property
    def dirname(self) -> str:
        return "node" + self._suffix

    @property
    def cert_suffix(self) -> str:
        return self._suffix

    @property
    def cgroup_root(self) -> str:
        return "/" if self.first else f"/takoform-node-{self.name}"


def node_names(count: int) -> list[str]:
    """The names of `count` nodes: 127.0.0.1, 127.0.0.2, ..."""
    if not 1 <= count <= 9:
        raise ClusterError(f"between 1 and 9 nodes, not {count}")
    return [f"127.0.0.{i}" for i in range(1, count + 1)]


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
    # kube-state-metrics: exports the CRs' conditions the chart's resource alerts read.
    kube_state_metrics: Path | None = None

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
        kube_state_metrics = Path(
            os.environ.get("TAKOFORM_KUBE_STATE_METRICS_BIN")
            or cache / "bin" / f"kube-state-metrics-{versions['KUBE_STATE_METRICS_VERSION']}"
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
            kube_state_metrics=kube_state_metrics / "kube-state-metrics",
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


def signed_cert(
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


CLIENT_CERT = (
    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n"
)


def server_cert(*addresses: str) -> str:
    """The x509v3 section of a serving certificate for these IP addresses and DNS names."""
    names = ",".join(
        ("IP:" if address[:1].isdigit() else "DNS:") + address for address in addresses
    )
    return (
        "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\n"
        f"extendedKeyUsage=serverAuth\nsubjectAltName={names}\n"
    )


def make_ca(pki: Path, subject: str = "/CN=takoform-local-ca") -> Path:
    """A throwaway CA: pki/ca.key and pki/ca.crt, which `signed_cert(pki, ...)` signs with."""
    pki.mkdir(parents=True, exist_ok=True)
    _ec_key("ca.key", pki)
    _openssl(
        "req", "-x509", "-new", "-key", "ca.key", "-subj", subject,
        "-days", "7", "-sha256", "-out", "ca.crt",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=pki,
    )  # fmt: skip
    return pki / "ca.crt"


def make_pki(pki: Path) -> None:
    """A throwaway CA; the API server's serving cert; client certs for the admin (in
    system:masters) and for the controller-manager; the ServiceAccount token signing key."""
    make_ca(pki)
    signed_cert(
        pki,
        "apiserver",
        "/CN=kube-apiserver",
        server_cert(
            "127.0.0.1", "localhost", "10.0.0.1", "kubernetes", "kubernetes.default",
            "kubernetes.default.svc",
        ),
    )  # fmt: skip
    signed_cert(pki, "admin", "/O=system:masters/CN=takoform-admin", CLIENT_CERT)
    # The built-in RBAC role system:kube-controller-manager is bound to this user name.
    signed_cert(pki, "controller-manager", "/CN=system:kube-controller-manager", CLIENT_CERT)
    # The API server's client certificate towards kubelets (logs, exec, port-forward).
    signed_cert(pki, "apiserver-kubelet-client", "/O=system:masters/CN=kube-apiserver", CLIENT_CERT)
    _ec_key("sa.key", pki)
    _openssl("ec", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=pki)


def make_scheduler_pki(pki: Path) -> None:
    signed_cert(pki, "scheduler", "/CN=system:kube-scheduler", CLIENT_CERT)


def make_node_pki(pki: Path, node: NodeSpec) -> None:
    """Certificates of a node's kubelet: its client certificate (the Node authorizer's
    system:node:<name> in system:nodes) and its serving certificate for its address."""
    signed_cert(
        pki, f"kubelet-client{node.cert_suffix}",
        f"/O=system:nodes/CN=system:node:{node.name}", CLIENT_CERT,
    )  # fmt: skip
    signed_cert(
        pki,
        f"kubelet-serving{node.cert_suffix}",
        f"/CN={node.name}",
        server_cert(node.name),
    )


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


#: Below the kernel's ephemeral range, where outgoing connections take their local ports.
_LOWEST_PORT = 10000


def _ephemeral_ports() -> range:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return range(int(low), int(high) + 1)
    except (OSError, ValueError):
        return range(32768, 61000)


def port_slice(worker: str, workers: int, ephemeral: range) -> range:
    """The ports one pytest worker (`gw<i>` of `workers`; any other name is worker 0) hands out:
    its own slice of those below the kernel's ephemeral range."""
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    below = range(_LOWEST_PORT, max(_LOWEST_PORT, ephemeral.start))
    size = len(below) // max(1, workers)
    return below[index * size : (index + 1) * size]


def _port_cycle() -> Iterator[int]:
    ports = port_slice(
        os.environ.get("PYTEST_XDIST_WORKER", "gw0"),
        int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")),
        _ephemeral_ports(),
    )
    if not ports:  # the kernel hands out every port: nothing is safe from outgoing connections
        while True:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                yield int(s.getsockname()[1])
    # A random start keeps two runs on one machine (a developer's and CI's) apart, mostly.
    start = int.from_bytes(os.urandom(2), "big") % len(ports)
    while True:
        yield from ports[start:]
        yield from ports[:start]
        start = 0


_PORTS = _port_cycle()


def free_port() -> int:
    """A loopback port that is free now and that nothing else will take before the process it is
    given to binds it: the kernel's `bind(0)` answer was once taken by an outgoing connection, or
    by another pytest worker, and an operator died on `address already in use`. So the port comes
    from this worker's own slice below the kernel's ephemeral range, in turn, never twice in a row
    of the slice's length."""
    for port in _PORTS:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise AssertionError("unreachable: the port cycle never ends")


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
    kube-scheduler and, per node, containerd and a kubelet (node/, node-<name>/ in `state_dir`).

    Layout: pki/ (certs and keys), etcd-data/, logs/<component>.log, kubeconfig (admin),
    controller-manager.kubeconfig, state.json (pids and ports, so another process can stop it).
    """

    COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager")

    def __init__(
        self,
        state_dir: Path,
        tools: Tools | None = None,
        die_with_parent: bool = False,
        node: bool = False,
        nodes: int = 1,
    ) -> None:
        """`die_with_parent`: the components get SIGKILL if the process that started them dies
        (the test session is killed), so no orphaned control plane survives. Not for `up`.
        `node`: also run `nodes` nodes, 127.0.0.1 on (hostNetwork pods only; needs root)."""
        self.state_dir = Path(state_dir).resolve()
        self.tools = tools or Tools.locate()
        self.die_with_parent = die_with_parent
        self.node = node
        self.node_specs: list[NodeSpec] = (
            [NodeSpec(name) for name in node_names(nodes)] if node else []
        )
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
        if not self.node:
            return self.COMPONENTS
        per_node = tuple(c for spec in self.node_specs for c in (spec.containerd, spec.kubelet))
        return (*self.COMPONENTS, "kube-scheduler", *per_node)

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
                # A cap, not an allocation: the bloated benchmark rows write gigabytes of
                # revisions (100 KB per CR per write) between two compactions, past the 2 GiB
                # default, where etcd would refuse every write.
                "--quota-backend-bytes=8589934592",
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
        binaries = {
            "etcd": str(self.tools.etcd),
            "kube-apiserver": str(self.tools.kube_apiserver),
            "kube-controller-manager": str(self.tools.kube_controller_manager),
            "kube-scheduler": str(self.tools.kube_scheduler),
        }
        for spec in self.node_specs:
            binaries[spec.containerd] = str(_which("containerd") or "containerd")
            binaries[spec.kubelet] = str(self.tools.kubelet)
        state = {
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "pids": self.pids,
            "binaries": binaries,
            "node": self.node,
            "nodes": [spec.name for spec in self.node_specs],
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
        cluster.node_specs = [
            NodeSpec(name) for name in state.get("nodes", [NODE_NAME] if cluster.node else [])
        ]
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

    # --- the nodes -----------------------------------------------------------------------

    @property
    def node_dir(self) -> Path:
        """The first node's directory."""
        return self.state_dir / "node"

    @property
    def containerd_socket(self) -> Path:
        """The first node's containerd socket."""
        return self.containerd_socket_of(NODE_NAME)

    def containerd_socket_of(self, name: str) -> Path:
        return self.state_dir / NodeSpec(name).dirname / "containerd" / "containerd.sock"

    @property
    def containerd_sockets(self) -> list[Path]:
        return [self.containerd_socket_of(spec.name) for spec in self.node_specs]

    def _spec(self, name: str | None) -> NodeSpec:
        name = name or NODE_NAME
        for spec in self.node_specs:
            if spec.name == name:
                return spec
        raise ClusterError(f"no node {name} in this cluster")

    def _start_node(self, deadline: float) -> None:
        """kube-scheduler and the admission policy, then every node."""
        t0 = time.monotonic()
        make_scheduler_pki(self.pki)
        write_kubeconfig(
            self.state_dir / "scheduler.kubeconfig", self.server, self.pki / "ca.crt",
            self.pki / "scheduler.crt", self.pki / "scheduler.key", "system:kube-scheduler",
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
        # hostNetwork pods only: anything else would need a pod network (and containerd would
        # leave a network namespace behind for it).
        self._kubectl_apply(_HOST_NETWORK_ONLY_POLICY)
        for spec in self.node_specs:
            self._start_one_node(spec, deadline)
        self.node_started_seconds = time.monotonic() - t0

    def add_node(self, name: str, timeout: float = 120.0) -> None:
        """Start one more node (`name`: a 127.0.0.0/8 address) on the running cluster and wait
        until it is Ready. Images are not loaded into it: call load_image(..., node=name)."""
        if not self.node:
            raise ClusterError("add_node needs a cluster started with node=True")
        spec = NodeSpec(name)
        if any(s.name == name for s in self.node_specs):
            raise ClusterError(f"node {name} already runs")
        self.node_specs.append(spec)
        try:
            self._start_one_node(spec, time.monotonic() + timeout)
        except BaseException:
            report = "\n".join(
                f"--- last 30 lines of {self.logs / f'{c}.log'}:\n{_tail(self.logs / f'{c}.log')}"
                for c in (spec.containerd, spec.kubelet)
            )
            self.remove_node(name)
            raise ClusterError(f"node {name} did not start\n{report}") from None

    def remove_node(self, name: str) -> None:
        """Stop one node (not the first), remove what it left, and delete its Node object (its
        pods go with it)."""
        spec = self._spec(name)
        if spec.first:
            raise ClusterError("the first node stays until the cluster stops")
        self._stop_nodes([spec])
        _unmount_under(self.state_dir / spec.dirname)
        _remove_links_into(Path("/var/log/containers"), self.state_dir / spec.dirname)
        own = [p for p in self.node_outside if _cgroup_of(p, spec)]
        _remove_outside(own)
        self.node_outside = [p for p in self.node_outside if p not in own]
        self.node_specs.remove(spec)
        self._save_state()
        subprocess.run(
            [str(self.tools.kubectl), f"--kubeconfig={self.kubeconfig}", "delete", "node", name,
             "--ignore-not-found", "--wait=false"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        _log(f"node {name} removed")

    def _start_one_node(self, spec: NodeSpec, deadline: float) -> None:
        t0 = time.monotonic()
        node, pki = self.state_dir / spec.dirname, self.pki
        socket_path = self.containerd_socket_of(spec.name)
        for sub in ("containerd/root", "containerd/state", "containerd/runc", "cni/bin",
                    "cni/conf", "kubelet", "pod-logs"):  # fmt: skip
            (node / sub).mkdir(parents=True, exist_ok=True)
        self._note_outside()
        if not spec.first:
            self._make_cgroup_root(spec)
        make_node_pki(pki, spec)
        # No CNI plugin exists (cni/bin stays empty): hostNetwork pods never call one. The
        # placeholder only lets containerd report its network as ready, so the node is Ready.
        (node / "cni/conf/00-takoform-no-pod-network.conflist").write_text(
            json.dumps({
                "cniVersion": "1.0.0",
                "name": "takoform-no-pod-network",
                "plugins": [{"type": "takoform-no-pod-network"}],
            }) + "\n"
        )  # fmt: skip

        (node / "containerd.toml").write_text(_containerd_config(node, socket_path, spec))
        self._spawn(
            spec.containerd,
            [shutil.which("containerd") or "containerd", f"--config={node / 'containerd.toml'}"],
        )
        self._save_state()
        self._wait_for(
            f"containerd's socket ({spec.name})",
            lambda: self._ctr("version", node=spec.name).returncode == 0,
            deadline,
        )
        pause_archive = node / "pause.oci.tar"
        assert self.tools.pause is not None
        write_oci_archive(pause_archive, PAUSE_IMAGE, {"pause": self.tools.pause.read_bytes()},
                          entrypoint=["/pause"])  # fmt: skip
        self.load_image(pause_archive, PAUSE_IMAGE, node=spec.name)

        kubelet_port, healthz_port = free_port(), free_port()
        (node / "kubelet.yaml").write_text(
            json.dumps(
                _kubelet_config(node, pki, kubelet_port, healthz_port, socket_path, spec),
                indent=2,
            )
        )
        write_kubeconfig(
            node / "kubelet.kubeconfig", self.server, pki / "ca.crt",
            pki / f"kubelet-client{spec.cert_suffix}.crt",
            pki / f"kubelet-client{spec.cert_suffix}.key", f"system:node:{spec.name}",
        )  # fmt: skip
        kubelet_t0 = time.monotonic()
        self._spawn(
            spec.kubelet,
            [
                str(self.tools.kubelet),
                f"--config={node / 'kubelet.yaml'}",
                f"--kubeconfig={node / 'kubelet.kubeconfig'}",
                f"--root-dir={node / 'kubelet'}",
                f"--cert-dir={node / 'kubelet' / 'pki'}",
                f"--hostname-override={spec.name}",
                "--v=1",
            ],
        )
        self._save_state()
        self._wait_for(
            f"the node {spec.name} to be Ready", lambda: self._node_ready(spec.name), deadline
        )
        _log(
            f"node {spec.name} Ready {time.monotonic() - kubelet_t0:.1f}s after the kubelet "
            f"started ({time.monotonic() - t0:.1f}s with containerd)"
        )

    def _make_cgroup_root(self, spec: NodeSpec) -> None:
        """The node's own cgroup root in every hierarchy (the kubelet wants it to exist),
        recorded for removal; a cpuset one gets its parent's cpus and mems, or nothing could
        run in it."""
        for hierarchy in _cgroup_hierarchies():
            path = hierarchy / spec.cgroup_root.strip("/")
            if not path.exists():
                path.mkdir()
                if str(path) not in self.node_outside:
                    self.node_outside.append(str(path))
            if hierarchy.name == "cpuset":
                for knob in ("cpuset.cpus", "cpuset.mems"):
                    if not (path / knob).read_text().strip():
                        (path / knob).write_text((hierarchy / knob).read_text())
        self._save_state()

    def _node_ready(self, name: str = NODE_NAME) -> bool:
        req = urllib.request.Request(f"{self.server}/api/v1/nodes/{name}")
        try:
            with urllib.request.urlopen(req, context=self._ssl_context(), timeout=5) as resp:
                node = json.load(resp)
        except urllib.error.HTTPError:
            return False
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    def _ctr(
        self, *args: str, check: bool = False, node: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`ctr` against a node's containerd (the first node's by default)."""
        socket_path = self.containerd_socket_of(node or NODE_NAME)
        proc = subprocess.run(
            ["ctr", f"--address={socket_path}", "--namespace=k8s.io", *args],
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

    def load_image(self, archive: Path, name: str | None = None, node: str | None = None) -> str:
        """Import an OCI archive into a node's containerd (every node's without `node`), where
        the kubelet finds it, so it is never pulled; return the name the kubelet knows it by.
        `name` defaults to the archive's own reference (org.opencontainers.image.ref.name)."""
        if not self.node:
            raise ClusterError("load_image needs a cluster started with node=True")
        ref = name or _archive_ref(archive)
        full = _normalize_image(ref)
        targets = [self._spec(node)] if node else self.node_specs
        for spec in targets:
            self._ctr(
                "images", "import", "--snapshotter=overlayfs", str(archive),
                check=True, node=spec.name,
            )  # fmt: skip
            imported = set(
                self._ctr("images", "ls", "-q", check=True, node=spec.name).stdout.split()
            )
            if full not in imported:
                # containerd names what it imports after the archive's annotations; tag it to
                # the reference the kubelet will ask for.
                source = next((i for i in imported if i.endswith(ref) or i == ref), None)
                if source is None:
                    raise ClusterError(
                        f"{archive}: no image named like {ref} in {sorted(imported)}"
                    )
                self._ctr("images", "tag", "--force", source, full, check=True, node=spec.name)
            _log(f"image {full} loaded into node {spec.name}")
        return full

    def _note_outside(self) -> None:
        """Record the places outside state_dir that the kubelet or containerd create, if they
        did not exist before the node started (so the node's cleanup removes only its own)."""
        for path in _NODE_OUTSIDE:
            if path not in self.node_outside and not os.path.lexists(path):
                self.node_outside.append(path)

    def _stop_node(self) -> None:
        """Stop every node and the scheduler; unmount what the kubelets mounted; remove the
        cgroups and directories they made outside state_dir."""
        self._stop_nodes(list(self.node_specs))
        pid = self.pids.pop("kube-scheduler", None)
        if pid is not None:
            stop_process_group(pid, "kube-scheduler")
        _unmount_under(self.state_dir)
        _remove_outside(self.node_outside)
        self.node_outside = []

    def _stop_nodes(self, specs: Sequence[NodeSpec]) -> None:
        """The kubelets first (so nothing restarts), then every container (through containerd
        and through the node's cgroups), then containerd and its shims."""
        for spec in specs:
            pid = self.pids.pop(spec.kubelet, None)
            if pid is not None:
                stop_process_group(pid, spec.kubelet)
        for spec in specs:
            if spec.containerd in self.pids and self.containerd_socket_of(spec.name).exists():
                with contextlib.suppress(OSError, subprocess.SubprocessError):
                    tasks = self._ctr("tasks", "ls", "-q", node=spec.name).stdout.split()
                    for task in tasks:
                        self._ctr(
                            "tasks", "kill", "--all", "--signal=SIGKILL", task, node=spec.name
                        )
                    for task in tasks:
                        self._ctr("tasks", "delete", "--force", task, node=spec.name)
        whole_cluster = len(specs) == len(self.node_specs)
        _kill_cgroup_processes(
            [p for p in self.node_outside if whole_cluster or any(_cgroup_of(p, s) for s in specs)]
        )
        for spec in specs:
            pid = self.pids.pop(spec.containerd, None)
            if pid is not None:
                stop_process_group(pid, spec.containerd)
            _kill_shims(self.containerd_socket_of(spec.name))

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

_CGROUP_ROOT = Path("/sys/fs/cgroup")


def _cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1: one per controller, plus the unified one)."""
    return [c for c in sorted(_CGROUP_ROOT.glob("*")) if (c / "cgroup.procs").exists()]


def _cgroup_of(path: str, node: NodeSpec) -> bool:
    """True if `path` is (under) the node's own cgroup root, in any hierarchy."""
    if node.first or not path.startswith(str(_CGROUP_ROOT)):
        return False
    root = node.cgroup_root.strip("/")
    return f"/{root}/" in path + "/"


# Paths outside the state directory that the kubelets or containerds create whatever they are
# told; removed again at stop when a node made them. cgroups: the first kubelet's kubepods
# hierarchy (the other nodes' are under their own cgroup roots, recorded when made).
_NODE_OUTSIDE = [
    "/var/lib/kubelet",
    "/var/log/containers",
    "/var/log/pods",
    "/run/containerd",
    "/run/netns",
    "/etc/cni",
    "/opt/cni",
    *(str(c / "kubepods") for c in _cgroup_hierarchies()),
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


def _containerd_config(node: Path, socket_path: Path, spec: NodeSpec) -> str:
    """containerd 1.6: private root, state and socket; CRI with cgroupfs and overlayfs; the
    stream server on the node's loopback address; the local pause image. restrict_oom_score_adj
    is required on these machines (without it every sandbox fails with "can't get final child's
    PID from pipe")."""
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
  stream_server_address = "{spec.name}"
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
    node: Path, pki: Path, port: int, healthz_port: int, socket_path: Path, spec: NodeSpec
) -> dict[str, object]:
    config: dict[str, object] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": spec.name,
        "port": port,
        "readOnlyPort": 0,
        "healthzBindAddress": spec.name,
        "healthzPort": healthz_port,
        "tlsCertFile": str(pki / f"kubelet-serving{spec.cert_suffix}.crt"),
        "tlsPrivateKeyFile": str(pki / f"kubelet-serving{spec.cert_suffix}.key"),
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
    if not spec.first:
        # Its own cgroup root: a kubelet removes the pod cgroups under its root that it does not
        # know, so two sharing one would kill each other's pods.
        config["cgroupRoot"] = spec.cgroup_root
    return config


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


def _remove_links_into(directory: Path, target: Path) -> None:
    """Remove the symlinks in `directory` that point under `target` (the kubelet's
    /var/log/containers links to a removed node's pod logs; the directory itself is shared)."""
    with contextlib.suppress(OSError):
        for link in directory.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and os.readlink(link).startswith(str(target) + "/"):
                    link.unlink()


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
        "--nodes",
        type=int,
        default=1,
        help="up --node: how many nodes (127.0.0.1, 127.0.0.2, ...; default 1)",
    )
    parser.add_argument(
        "--image",
        type=Path,
        action="append",
        default=[],
        help="up --node: OCI archive to load into the nodes (e.g. from `make image`); repeatable",
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
            cluster = LocalCluster(
                args.state_dir, node=args.node or args.nodes > 1, nodes=args.nodes
            )
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
