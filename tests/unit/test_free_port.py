"""`free_port` hands out ports that no other pytest worker and no outgoing connection can take
before the process they were given to binds them: an operator once died on `address already in use`
for a metrics port handed out a moment before."""

from __future__ import annotations

from pathlib import Path

from localcluster import free_port, port_slice


def _ephemeral() -> range:
    low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
    return range(int(low), int(high) + 1)


def test_a_port_is_never_one_the_kernel_gives_to_outgoing_connections() -> None:
    ephemeral = _ephemeral()
    ports = [free_port() for _ in range(50)]
    assert not [p for p in ports if p in ephemeral]
    assert len(set(ports)) == len(ports)


def test_two_workers_never_share_a_port() -> None:
    first = port_slice("gw0", 2, _ephemeral())
    second = port_slice("gw1", 2, _ephemeral())
    assert first and second
    assert not set(first) & set(second)
    assert not (set(first) | set(second)) & set(_ephemeral())
