"""The operator's HTTP clients keep no cookies: neither API uses them, and keeping them costs a
pass through urllib's cookie machinery per answer."""

from __future__ import annotations

import httpx

from takoform_operator.http_transport import CookielessClient, Urls


async def test_a_cookie_set_by_an_answer_is_neither_kept_nor_sent() -> None:
    sent: list[str | None] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request.headers.get("cookie"))
        return httpx.Response(200, headers={"Set-Cookie": "session=abc; Path=/"}, json={})

    async with CookielessClient(
        base_url="http://127.0.0.1:1", transport=httpx.MockTransport(answer)
    ) as client:
        first = await client.get("/a")
        assert first.headers["set-cookie"].startswith("session=")  # the answer itself is whole
        await client.get("/b")
        assert not client.cookies
    assert sent == [None, None]


async def test_a_plain_httpx_client_would_send_it_back() -> None:
    # The control: without CookielessClient the cookie comes back on the next request.
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"Set-Cookie": "session=abc; Path=/"}, json={})

    async with httpx.AsyncClient(
        base_url="http://127.0.0.1:1", transport=httpx.MockTransport(answer)
    ) as client:
        await client.get("/a")
        assert client.cookies.get("session") == "abc"


def test_parsed_urls_are_reused_and_bounded() -> None:
    urls = Urls(limit=2)
    first = urls("http://127.0.0.1:1/a?x=1")
    assert urls("http://127.0.0.1:1/a?x=1") is first
    assert first == httpx.URL("http://127.0.0.1:1/a?x=1")
    urls("http://127.0.0.1:1/b")
    urls("http://127.0.0.1:1/c")  # full: starts over
    assert urls("http://127.0.0.1:1/a?x=1") is not first
