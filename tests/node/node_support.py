"""What the node fixtures (tests/node/conftest.py) hand to the tests, and the network rule's
check (every socket of the cluster and its pods on loopback)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixtures_kube import KubeCluster
from loopback import off_loopback


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


def assert_loopback_only(node: NodeCluster) -> None:
    """Every TCP/UDP socket of ours (`ss`) is bound to, and talks to, loopback only."""
    offending = [s.line for s in off_loopback(_our_pids(node))]
    assert offending == [], "sockets off loopback:\n" + "\n".join(offending)
