"""The host pool: one client per TakoformHost, tokens from Secrets re-read without a restart."""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Mapping

import httpx
import pytest

from takoform_operator.core.host_budget import HostBudget
from takoform_operator.core.state import DEFAULT_HOST
from takoform_operator.core.tenancy import (
    CREDENTIAL_ANNOTATION,
    HostConfig,
    SecretKeyRef,
    host_config_from_body,
    implicit_host_refusal,
)
from takoform_operator.host_client.client import HostClient
from takoform_operator.host_client.pool import Endpoint, HostPool, SecretToken
from takoform_operator.host_port import (
    HostInsecure,
    SecretNotFound,
    SecretNotOptedIn,
    SecretNotOptedInForUrl,
    StoredSecret,
)

#: The hosts the Secrets of these tests are opted in for, unless a test says otherwise.
OPTED_IN = {CREDENTIAL_ANNOTATION: "prod=https://h,staging=https://h,h=https://h"}


class FakeSecrets:
    namespace = "ops"

    def __init__(self, data: dict[str, dict[str, bytes]]) -> None:
        self.data = data
        self.annotations: dict[str, Mapping[str, str]] = {}
        self.reads: list[str] = []

    async def read(self, name: str) -> StoredSecret | None:
        self.reads.append(name)
        await asyncio.sleep(0)  # as the API server's answer: others run meanwhile
        if name not in self.data:
            return None
        return StoredSecret(self.data[name], self.annotations.get(name, OPTED_IN))


def _forms_host(accepted: set[str], seen: list[str]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        header = request.headers.get("Authorization", "")
        seen.append(header)
        if header.removeprefix("Bearer ") not in accepted:
            body = {"error": {"code": "unauthenticated", "message": "wrong bearer token"}}
            return httpx.Response(401, json=body)
        return httpx.Response(200, json={"items": []})

    return httpx.MockTransport(handler)


def test_a_rotated_secret_is_used_after_a_401_without_a_new_client() -> None:
    secrets = FakeSecrets({"tok": {"token": b"old\n"}})
    source = SecretToken(secrets, SecretKeyRef("tok", "token"), "prod", "https://h", 3600)
    accepted, seen = {"old"}, []
    client = HostClient("http://h", source, transport=_forms_host(accepted, seen))

    async def scenario() -> None:
        assert await client.list_forms() == []
        secrets.data["tok"] = {"token": b"new"}  # the admin rotates the Secret...
        accepted.clear()
        accepted.add("new")  # ...and revokes the old token on the host
        assert await client.list_forms() == []  # 401, re-read, retried with the new token
        assert await client.list_forms() == []
        await client.aclose()

    asyncio.run(scenario())
    assert seen == ["Bearer old", "Bearer old", "Bearer new", "Bearer new"]


def test_the_token_is_re_read_on_its_interval() -> None:
    now = [0.0]
    secrets = FakeSecrets({"tok": {"token": b"a"}})
    source = SecretToken(
        secrets, SecretKeyRef("tok", "token"), "h", "https://h", 30, clock=lambda: now[0]
    )

    async def scenario() -> list[str | None]:
        first = await source.token()
        secrets.data["tok"] = {"token": b"b"}
        now[0] = 10
        cached = await source.token()
        now[0] = 31
        return [first, cached, await source.token()]

    assert asyncio.run(scenario()) == ["a", "a", "b"]
    assert secrets.reads == ["tok", "tok"]


def test_requests_waiting_for_the_first_token_share_one_read_of_its_secret() -> None:
    # A start sends a request for each reconcile slot at once: one Secret read serves them
    # all, not one read each, one after the other (each request waiting for every read before
    # it, then all sent together).
    secrets = FakeSecrets({"tok": {"token": b"a"}})
    source = SecretToken(secrets, SecretKeyRef("tok", "token"), "h", "https://h", 30)

    async def scenario() -> list[str | None]:
        return list(await asyncio.gather(*(source.token() for _ in range(16))))

    assert asyncio.run(scenario()) == ["a"] * 16
    assert secrets.reads == ["tok"]


def test_a_request_takes_its_namespace_budget_only_once_its_client_is_built() -> None:
    # A client that cannot be built (its CA bundle Secret is missing) sends nothing, so it
    # spends no token: the namespace's next request names the Secret again, not a spent
    # budget; and a request is admitted right before it goes out, not before a slow build.
    secrets = FakeSecrets({})
    pool = HostPool(secrets, budget=HostBudget(rate=1, burst=1))
    pool.observe(HostConfig("prod", "https://h", None, ca_bundle=SecretKeyRef("ops-ca", "ca")))
    port = pool.port("prod", "team-a")

    async def scenario() -> None:
        for _ in range(3):
            with pytest.raises(SecretNotFound, match="ops-ca"):
                await port.list_forms()
        await pool.aclose()

    asyncio.run(scenario())


def test_a_missing_secret_or_key_names_it_and_never_a_value() -> None:
    secrets = FakeSecrets({"tok": {"other": b"s3cr3t"}})

    async def read(name: str) -> None:
        await SecretToken(secrets, SecretKeyRef(name, "token"), "h", "https://h", 30).token()

    with pytest.raises(SecretNotFound, match="'missing' not found"):
        asyncio.run(read("missing"))
    with pytest.raises(SecretNotFound, match="no key 'token'") as caught:
        asyncio.run(read("tok"))
    assert "s3cr3t" not in str(caught.value)
    secrets.data["bin"] = {"token": b"\xff\xfes3cr3t"}
    with pytest.raises(SecretNotFound, match="'bin' key 'token' is not UTF-8 text") as caught:
        asyncio.run(read("bin"))
    assert "s3cr3t" not in str(caught.value) and "xff" not in str(caught.value)


def _config(
    name: str, *, default: bool = False, url: str = "https://h", insecure: bool = False
) -> HostConfig:
    return HostConfig(
        name, url, SecretKeyRef(f"{name}-token", "token"), default=default, insecure=insecure
    )


def test_the_default_host_is_the_one_marked_else_the_implicit_one() -> None:
    pool = HostPool(FakeSecrets({}), implicit=Endpoint("http://implicit", "t"))
    assert pool.default_host() == DEFAULT_HOST and pool.names() == [DEFAULT_HOST]
    pool.observe(_config("prod", default=True))
    pool.observe(_config("staging"))
    assert pool.default_host() == "prod"
    assert pool.names() == ["default", "prod", "staging"]
    pool.observe(_config("staging", default=True))
    assert pool.default_host() is None  # two marked default: none is, CRs are told why
    assert HostPool(FakeSecrets({})).default_host() is None  # no implicit host either
    asyncio.run(pool.aclose())


def test_observing_reports_only_real_changes_and_a_new_url_gets_a_new_client() -> None:
    secrets = FakeSecrets({"prod-token": {"token": b"t"}})
    pool = HostPool(secrets)
    assert pool.observe(_config("prod")) is True
    assert pool.observe(_config("prod")) is False  # e.g. the echo of our own status write

    async def scenario() -> None:
        first = await pool.client("prod")
        assert await pool.client("prod") is first
        assert pool.observe(_config("prod", url="https://elsewhere")) is True
        assert await pool.client("prod") is not first
        await pool.aclose()

    asyncio.run(scenario())


def test_a_replaced_client_is_closed_after_the_grace_and_the_current_one_is_not() -> None:
    pool = HostPool(FakeSecrets({"prod-token": {"token": b"t"}}), retire_after=0.0)

    async def scenario() -> None:
        pool.observe(_config("prod"))
        first = await pool.client("prod")
        pool.observe(_config("prod", url="https://elsewhere"))
        second = await pool.client("prod")
        assert not first.closed
        await asyncio.gather(*pool.closing())
        assert first.closed and not second.closed
        await pool.aclose()
        assert second.closed

    asyncio.run(scenario())


def test_host_objects_are_read_with_their_secret_references() -> None:
    body = {
        "metadata": {"name": "prod"},
        "spec": {
            "url": "https://prod",
            "tokenSecretRef": {"name": "prod-token"},
            "caBundleSecretRef": {"name": "prod-ca"},
            "clientCertSecretRef": {"name": "prod-client"},
            "timeoutSeconds": 3,
            "default": True,
        },
    }
    assert host_config_from_body(body) == HostConfig(
        "prod",
        "https://prod",
        SecretKeyRef("prod-token", "token"),
        SecretKeyRef("prod-ca", "ca.crt"),
        "prod-client",
        3.0,
        True,
    )


def test_a_secret_not_opted_in_for_the_host_is_never_sent_and_says_how_to_opt_in() -> None:
    secrets = FakeSecrets({"prod-token": {"token": b"s3cr3t"}, "ops-ca": {"ca.crt": b"x"}})
    seen: list[str] = []
    # Opted in for another host only: a TakoformHost naming it gets nothing of it.
    secrets.annotations["prod-token"] = {CREDENTIAL_ANNOTATION: "staging=https://s"}
    source = SecretToken(secrets, SecretKeyRef("prod-token", "token"), "prod", "https://h", 30)
    client = HostClient("https://h", source, transport=_forms_host({"s3cr3t"}, seen))

    async def scenario() -> None:
        with pytest.raises(SecretNotOptedIn) as caught:
            await client.list_forms()
        assert type(caught.value) is SecretNotOptedIn
        message = str(caught.value)
        assert "s3cr3t" not in message
        assert "(it is opted in for staging only)" in message
        assert message.endswith(
            "kubectl -n ops annotate secret prod-token "
            "takoform.io/host-credential-for=staging=https://s,prod=https://h --overwrite"
        )
        secrets.annotations["prod-token"] = {}  # no annotation at all
        with pytest.raises(SecretNotOptedIn, match="it is not opted in") as caught:
            await source.refresh()
        assert caught.value.args[0].endswith(
            "kubectl -n ops annotate secret prod-token "
            "takoform.io/host-credential-for=prod=https://h"
        )
        # The CA bundle and client certificate Secrets are held to the same rule.
        pool = HostPool(secrets)
        pool.observe(
            HostConfig("prod", "https://h", None, ca_bundle=SecretKeyRef("ops-ca", "ca.crt"))
        )
        secrets.annotations["ops-ca"] = {
            CREDENTIAL_ANNOTATION: "staging=https://h, other=https://h"
        }
        with pytest.raises(SecretNotOptedIn, match="'prod'"):
            await pool.client("prod")
        await pool.aclose()
        # A trailing slash on either side is the same URL.
        secrets.annotations["prod-token"] = {
            CREDENTIAL_ANNOTATION: "staging=https://s,prod=https://h/"
        }
        assert await client.list_forms() == []
        await client.aclose()

    asyncio.run(scenario())
    assert seen == ["Bearer s3cr3t"]  # only once opted in for that very host at its URL


def _opt_in_of(command: str) -> dict[str, str]:
    """The annotation a printed `kubectl annotate` remedy writes."""
    key, _, value = shlex.split(command.split(": kubectl ", 1)[1])[5].partition("=")
    return {key: value}


@pytest.mark.parametrize(
    ("written", "says"),
    [
        # The host's URL changed (or another host of that name points elsewhere).
        ("prod=https://old", "is a credential of this host at https://old only, not at its URL"),
        # An earlier release's opt-in, by name only: bound to no URL, so used for none.
        ("prod", "opts this host in by name only"),
        ("prod, staging=https://s", "opts this host in by name only"),
    ],
)
def test_a_secret_opted_in_for_the_host_at_another_url_or_by_name_only_is_never_sent(
    written: str, says: str
) -> None:
    url = "https://new.example:8443/api"
    secrets = FakeSecrets({"prod-token": {"token": b"s3cr3t"}})
    secrets.annotations["prod-token"] = {CREDENTIAL_ANNOTATION: written}
    seen: list[str] = []
    source = SecretToken(secrets, SecretKeyRef("prod-token", "token"), "prod", url, 30)
    client = HostClient(url, source, transport=_forms_host({"s3cr3t"}, seen))

    async def scenario() -> None:
        with pytest.raises(SecretNotOptedInForUrl) as caught:
            await client.list_forms()
        message = str(caught.value)
        assert says in message and "s3cr3t" not in message
        assert message.endswith(f"prod={url} --overwrite")
        assert seen == []  # refused before anything went out
        # The remedy as printed, written: the token is used at this URL, other hosts' opt-ins
        # are kept as they were.
        secrets.annotations["prod-token"] = _opt_in_of(message)
        assert await client.list_forms() == []
        await client.aclose()

    asyncio.run(scenario())
    assert seen == ["Bearer s3cr3t"]
    kept = "staging=https://s," if "staging" in written else ""
    assert secrets.annotations["prod-token"] == {CREDENTIAL_ANNOTATION: f"{kept}prod={url}"}


def test_a_host_moved_to_another_url_gets_a_client_that_sends_nothing_there() -> None:
    secrets = FakeSecrets({"prod-token": {"token": b"s3cr3t"}})
    secrets.annotations["prod-token"] = {CREDENTIAL_ANNOTATION: "prod=https://h"}
    pool = HostPool(secrets)
    pool.observe(_config("prod"))

    async def scenario() -> None:
        first = await pool.client("prod")
        # Nothing listens on 127.0.0.1:9: a connection would fail with HostUnavailable; the
        # refusal comes first, before any connection is made.
        pool.observe(_config("prod", url="https://127.0.0.1:9"))
        moved = await pool.client("prod")
        assert moved is not first
        with pytest.raises(SecretNotOptedInForUrl, match=r"not at its URL https://127\.0\.0\.1:9"):
            await moved.list_forms()
        await pool.aclose()

    asyncio.run(scenario())


def test_a_plain_http_host_gets_nothing_unless_it_says_insecure() -> None:
    secrets = FakeSecrets({"prod-token": {"token": b"t"}})
    pool = HostPool(secrets)

    async def scenario() -> None:
        pool.observe(_config("prod", url="http://h"))
        with pytest.raises(HostInsecure, match=r"plain http URL without spec\.insecure"):
            await pool.client("prod")
        assert secrets.reads == []  # refused before any Secret is read
        pool.observe(_config("prod", url="http://h", insecure=True))
        assert (await pool.client("prod")).closed is False
        implicit = HostPool(
            secrets,
            implicit=Endpoint("http://implicit", "t"),
            implicit_refusal=implicit_host_refusal("http://implicit", False),
        )
        with pytest.raises(HostInsecure, match="TAKOFORM_HOST_INSECURE"):
            await implicit.client(DEFAULT_HOST)
        await implicit.aclose()
        await pool.aclose()

    asyncio.run(scenario())
    assert implicit_host_refusal("https://h", False) is None
    assert implicit_host_refusal("http://h", True) is None
    assert "neither https nor http" in str(implicit_host_refusal("ftp://h", True))
