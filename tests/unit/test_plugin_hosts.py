"""Which host a plugin command talks to (plugin.hosts): the operator's rules, from the
TakoformHosts the cluster holds and the single-host settings (the implicit host `default`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from takoform_operator.host_client.client import HostClient
from takoform_operator.plugin.cluster import Forbidden, PluginError
from takoform_operator.plugin.hosts import chosen_host, host_pool
from takoform_operator.settings import Settings


class Hosts:
    """The two reads hosts.py makes of the cluster, answered from memory."""

    def __init__(self, *hosts: dict[str, Any], forbidden: bool = False) -> None:
        self._hosts, self._forbidden = list(hosts), forbidden
        self.secret_reads: list[tuple[str, str]] = []

    def takoform_hosts(self) -> list[dict[str, Any]]:
        if self._forbidden:
            raise Forbidden("list takoformhosts: forbidden: no")
        return self._hosts

    def secret_data(
        self, namespace: str, name: str
    ) -> tuple[Mapping[str, bytes], Mapping[str, str]] | None:
        self.secret_reads.append((namespace, name))
        host = name.removesuffix("-tok")
        url = f"http://127.0.0.1:1/{host}"
        return {"token": b"t0ken"}, {"takoform.io/host-credential-for": f"{host}={url}"}


def host(name: str, *, default: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"url": f"http://127.0.0.1:1/{name}", "tokenSecretRef": {"name": f"{name}-tok"},
                 "default": default, "insecure": True},
    }  # fmt: skip


def pool_of(cluster: Hosts, warnings: list[str] | None = None, **env: Any) -> Any:
    settings = Settings(**env)
    said = warnings if warnings is not None else []
    return host_pool(cluster, settings, None, said.append)[0]  # type: ignore[arg-type]


def test_without_a_name_the_host_marked_default_else_the_implicit_one() -> None:
    assert chosen_host(pool_of(Hosts(host("a"), host("b", default=True))), None) == "b"
    assert chosen_host(pool_of(Hosts(host("a"))), None) == "default"


def test_two_marked_default_or_no_implicit_host_is_an_error() -> None:
    with pytest.raises(PluginError, match="no default host"):
        chosen_host(pool_of(Hosts(host("a", default=True), host("b", default=True))), None)
    with pytest.raises(PluginError, match="no default host"):
        chosen_host(pool_of(Hosts(host("a")), implicit_host=False), None)


def test_an_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(PluginError, match=r"no TakoformHost named 'c'; known hosts: a, default"):
        chosen_host(pool_of(Hosts(host("a"))), "c")
    with pytest.raises(PluginError, match="implicit host `default` is switched off"):
        chosen_host(pool_of(Hosts(host("a")), implicit_host=False), "default")


def test_a_host_hidden_by_the_users_rights_is_named_as_such() -> None:
    """A namespace user may not list TakoformHosts: the host a CR records is then not unknown,
    it is out of the user's reach, and the error says which."""
    with pytest.raises(PluginError, match="cannot read TakoformHost 'prod' with your rights"):
        chosen_host(pool_of(Hosts(host("a"))), "prod", "listing forbidden")
    assert chosen_host(pool_of(Hosts(host("a"))), "a", "listing forbidden") == "a"


def test_a_takoformhost_named_default_replaces_the_implicit_host() -> None:
    cluster = Hosts(host("default"))
    pool = pool_of(cluster, host_url="http://127.0.0.1:2")
    client = asyncio.run(pool.client("default"))
    assert isinstance(client, HostClient)
    assert str(client._http.base_url).startswith("http://127.0.0.1:1/default")
    asyncio.run(pool.aclose())


def test_the_token_secret_is_read_in_the_operator_namespace() -> None:
    cluster = Hosts(host("a"))
    pool, _ = host_pool(cluster, Settings(operator_namespace="ops"), None, print)  # type: ignore[arg-type]

    async def token() -> str | None:
        client = await pool.client("a")
        source = client._http.auth._source  # type: ignore[union-attr]
        value: str | None = await source.token()
        await pool.aclose()
        return value

    assert asyncio.run(token()) == "t0ken"
    assert cluster.secret_reads == [("ops", "a-tok")]


def test_a_user_who_may_not_list_hosts_gets_the_implicit_host_and_a_warning() -> None:
    warnings: list[str] = []
    pool = pool_of(Hosts(forbidden=True), warnings)
    assert chosen_host(pool, None) == "default"
    assert len(warnings) == 1 and "forbidden" in warnings[0] and "implicit" in warnings[0]
