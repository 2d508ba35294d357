"""What the node fixtures (tests/kube/conftest.py) hand to the tests, and the network rule's
check (every socket of the cluster and its pods on loopback)."""

from __future__ import annotations

import ipaddress
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixtures_kube import KubeCluster


@dataclass
class NodeCluster:
    kube: KubeCluster
    local: Any  # localcluster.LocalCluster
    image: str  # the operator image's name as the kubelet knows it

    @property
    def api_port(self) -> int:
        return int(self.kube.server.rsplit(":", 1)[1])


# -- the network rule ---------------------------------------------------------------------------


def _our_pids(node: NodeCluster) -> set[int]:
    """The control plane's and every node's processes, their containerds' shims, and every
    process in the kubelets' pod cgroups (the containers)."""
    pids = set(node.local.pids.values())
    sockets = [str(s).encode() for s in node.local.containerd_sockets]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
            cgroups = (proc / "cgroup").read_text()
        except OSError:
            continue
        if argv[0].endswith(b"containerd-shim-runc-v2") and any(s in argv for s in sockets):
            pids.add(int(proc.name))
        # The pods' cgroups: /kubepods/..., or /<node's cgroup root>/kubepods/... (other nodes).
        if "/kubepods" in cgroups:
            pids.add(int(proc.name))
    return pids


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    if host in ("*", "0.0.0.0", "::"):
        return False
    host = host.split("%", 1)[0]
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def assert_loopback_only(node: NodeCluster) -> None:
    """Every TCP/UDP socket of ours (`ss`) is bound to, and talks to, loopback only."""
    out = subprocess.run(["ss", "-tunapH"], capture_output=True, text=True, check=True).stdout
    ours = _our_pids(node)
    offending = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        local, peer = fields[4], fields[5]
        pids = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if not pids & ours:
            continue
        peer_ok = peer.rsplit(":", 1)[0] in (
            "*",
            "0.0.0.0",
            "[::]",
            "[::ffff:0.0.0.0]",
        ) or _loopback(peer)
        if not (_loopback(local) and peer_ok):
            offending.append(line)
    assert offending == [], "sockets off loopback:\n" + "\n".join(offending)
