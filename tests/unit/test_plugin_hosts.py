"""Which host a plugin command talks to (plugin.hosts): the operator's rules, from the
TakoformHosts the cluster holds and the single-host settings (the implicit host `default`)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from takoform_operator.host_client.client import HostClient
from takoform_operator.host_port import HostInsecure
from takoform_operator.plugin.cluster import Forbidden, PluginError
from takoform_operator.plugin.host_reach import dialled_url
from takoform_operator.plugin.hosts import chosen_host, host_pool
from takoform_operator.plugin.render import UsageError
from takoform_operator.settings import Settings


class Hosts:
    """The two reads hosts.py makes of the cluster, answered from memory."""

    def __init__(
        self,
        *hosts: dict[str, Any],
        forbidden: bool = False,
        credentials: Mapping[str, str] | None = None,
    ) -> None:
        """`credentials`: {Secret name: its takoform.io/host-credential-for annotation}."""
        self._hosts, self._forbidden = list(hosts), forbidden
        self._credentials = credentials or {}
        self.secret_reads: list[tuple[str, str]] = []

    def secret_annotations(self, namespace: str) -> dict[str, dict[str, str]]:
        return {
            name: {"takoform.io/host-credential-for": opt_in}
            for name, opt_in in self._credentials.items()
        }

    def takoform_hosts(self) -> list[dict[str, Any]]:
        if self._forbidden:
            raise Forbidden("list takoformhosts: forbidden: no")
        return self._hosts

    def secret_data(
        self, namespace: str, name: str
    ) -> tuple[Mapping[str, bytes], Mapping[str, str]] | None:
        self.secret_reads.append((namespace, name))
        if name in self._credentials:
            opt_in = self._credentials[name]
        else:
            host = name.removesuffix("-tok")
            opt_in = f"{host}=http://127.0.0.1:1/{host}"
        return {"token": b"t0ken"}, {"takoform.io/host-credential-for": opt_in}


def host(name: str, *, default: bool = False) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"url": f"http://127.0.0.1:1/{name}", "tokenSecretRef": {"name": f"{name}-tok"},
                 "default": default, "insecure": True},
    }  # fmt: skip


def pool_of(
    cluster: Hosts, warnings: list[str] | None = None, dial: str | None = None, **env: Any
) -> Any:
    """The pool, with `dial` as --host-url and `env` as the settings."""
    said = warnings if warnings is not None else []
    return host_pool(cluster, Settings(**env), None, said.append, host_url=dial)[0]  # type: ignore[arg-type]


def dialled(pool: Any, name: str) -> tuple[str, str | None]:
    """The URL host `name`'s client dials, and the token it sends."""

    async def read() -> tuple[str, str | None]:
        client = await pool.client(name)
        source = client._http.auth._source
        token = await source.token()
        await pool.aclose()
        return str(client._http.base_url).rstrip("/"), token

    return asyncio.run(read())


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


IMPLICIT_URL = "http://takoform-host.takoform-system.svc:8787"


def test_without_the_shell_the_implicit_host_is_the_one_its_credential_secret_names() -> None:
    """The chart opts the implicit host's token Secret in for `default` at the operator's URL:
    that Secret gives the plugin the URL and the token; the shell's settings win over it."""
    cluster = Hosts(credentials={"ref-token": f"default={IMPLICIT_URL}", "other": "a=https://a"})
    refused = pool_of(cluster)
    with pytest.raises(HostInsecure, match="plain http URL") as caught:
        dialled(refused, "default")
    assert "--host-url" in str(caught.value), "the port-forward is the way from a laptop"
    assert dialled(pool_of(cluster, host_insecure=True), "default") == (IMPLICIT_URL, "t0ken")
    assert cluster.secret_reads[-1] == ("takoform-system", "ref-token")
    shell = pool_of(cluster, host_url="http://127.0.0.1:9", host_insecure=True, host_token="mine")
    assert dialled(shell, "default") == ("http://127.0.0.1:9", "mine")


def test_two_credential_secrets_for_the_implicit_host_leave_the_shells_with_a_warning() -> None:
    warnings: list[str] = []
    two = {"x": f"default={IMPLICIT_URL}", "y": "default=https://elsewhere"}
    pool = pool_of(Hosts(credentials=two), warnings, host_insecure=True, host_token="mine")
    assert dialled(pool, "default") == ("http://127.0.0.1:8787", "mine")
    assert len(warnings) == 1 and "2 Secrets" in warnings[0] and "TAKOFORM_HOST_URL" in warnings[0]


def test_host_url_dials_a_port_forward_with_the_credentials_of_the_hosts_own_url() -> None:
    """The Secret is opted in for the host's own URL only: it is read and checked against that,
    and the client connects to the port-forward."""
    forward = "http://127.0.0.1:18787"
    assert dialled(pool_of(Hosts(host("a")), dial=forward), "a") == (forward, "t0ken")
    cluster = Hosts(credentials={"ref-token": f"default={IMPLICIT_URL}"})
    assert dialled(pool_of(cluster, dial=forward + "/"), "default") == (forward, "t0ken")


@pytest.mark.parametrize(
    ("url", "accepted"),
    [
        ("http://127.0.0.1:8787", True),
        ("http://localhost:8787", True),
        ("http://[::1]:8787", True),
        ("https://host.example:8443", True),
        ("http://host.example:8787", False),  # the token in clear text across a network
        ("http://takoform-host.takoform-system.svc:8787", False),
        ("ftp://127.0.0.1", False),
        ("https://", False),
    ],
)
def test_host_url_is_https_or_plain_http_to_this_machine_only(url: str, accepted: bool) -> None:
    if accepted:
        assert dialled_url(url) == url
    else:
        with pytest.raises(UsageError, match="--host-url"):
            dialled_url(url)
