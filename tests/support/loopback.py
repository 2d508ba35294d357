"""The network rule's check: every TCP and UDP socket of the processes under test is bound to
loopback, and either unconnected (listening, or UDP with no peer) or talking to loopback."""

from __future__ import annotations

import ipaddress
import re
import subprocess
from collections.abc import Collection
from dataclasses import dataclass

_WILDCARDS = ("*", "0.0.0.0", "::", "::ffff:0.0.0.0")


@dataclass(frozen=True)
class Socket:
    state: str
    local: str
    peer: str
    line: str  # as `ss` printed it, for the failure message

    @property
    def on_loopback(self) -> bool:
        unconnected = self.peer.endswith(":*") or _host(self.peer) in _WILDCARDS
        return _loopback(self.local) and (unconnected or _loopback(self.peer))


def sockets_of(pids: Collection[int]) -> list[Socket]:
    """Every TCP and UDP socket (`ss`) held by one of `pids`."""
    out = subprocess.run(["ss", "-tunapH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 6:
            continue
        if {int(p) for p in re.findall(r"pid=(\d+)", line)} & set(pids):
            found.append(Socket(fields[1], fields[4], fields[5], line))
    return found


def off_loopback(pids: Collection[int]) -> list[Socket]:
    return [s for s in sockets_of(pids) if not s.on_loopback]


def _host(address: str) -> str:
    return address.rsplit(":", 1)[0].strip("[]").split("%", 1)[0]


def _loopback(address: str) -> bool:
    host = _host(address)
    if host in _WILDCARDS:
        return False
    ip = ipaddress.ip_address(host)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return ip.is_loopback
