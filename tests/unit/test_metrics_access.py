"""Who may read /metrics (core.metrics_access): the bearer token of a header, the verdict of the
two reviews, and the short-lived cache of verdicts that keeps scrapes off the API server."""

from __future__ import annotations

import pytest

from takoform_operator.core.metrics_access import ReviewCache, Verdict, bearer_token, verdict_of


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc.def", "abc.def"),
        ("bearer abc", "abc"),
        ("  Bearer   abc  ", "abc"),
        (None, None),
        ("", None),
        ("Bearer", None),
        ("Bearer ", None),
        ("Basic dXNlcjpwYXNz", None),
        ("abc", None),
    ],
)
def test_only_a_bearer_header_carries_a_token(header: str | None, token: str | None) -> None:
    assert bearer_token(header) == token


def test_the_verdict_is_401_unless_authenticated_then_403_unless_allowed() -> None:
    assert verdict_of(False, True) is Verdict.UNAUTHENTICATED
    assert verdict_of(False, False) is Verdict.UNAUTHENTICATED
    assert verdict_of(True, False) is Verdict.FORBIDDEN
    assert verdict_of(True, True) is Verdict.ALLOWED
    assert [v.value for v in Verdict] == [200, 401, 403, 503]
    assert "/metrics" in Verdict.FORBIDDEN.text


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_verdict_is_kept_for_its_ttl_under_a_digest_of_the_token() -> None:
    clock = Clock()
    cache = ReviewCache(30.0, clock)
    cache.put("secret-token", Verdict.ALLOWED)
    cache.put("other", Verdict.FORBIDDEN)
    clock.now = 29.9
    assert cache.get("secret-token") is Verdict.ALLOWED
    assert cache.get("other") is Verdict.FORBIDDEN
    assert cache.get("unknown") is None
    assert not any("secret-token" in key for key in cache._kept), "the token itself is kept"
    clock.now = 30.0
    assert cache.get("secret-token") is None, "expired: reviewed again"


def test_a_failure_to_ask_is_never_kept() -> None:
    cache = ReviewCache(30.0, Clock())
    cache.put("t", Verdict.UNAVAILABLE)
    assert cache.get("t") is None


def test_the_cache_is_bounded_the_oldest_going_first() -> None:
    clock = Clock()
    cache = ReviewCache(30.0, clock, size=3)
    for n in range(5):
        cache.put(f"t{n}", Verdict.UNAUTHENTICATED)
    assert [cache.get(f"t{n}") for n in range(5)] == [None, None, *[Verdict.UNAUTHENTICATED] * 3]


def test_an_api_server_that_cannot_be_asked_answers_503_and_nothing_is_kept() -> None:
    """kube.metrics_access against a port nothing listens on: 503 each time, asked again."""
    import asyncio

    from takoform_operator.kube.api import ApiConnection, KubeApi
    from takoform_operator.kube.metrics_access import ApiServerReviews

    cache = ReviewCache(30.0, Clock())
    api = KubeApi(lambda: ApiConnection("http://127.0.0.1:9"))
    reviews = ApiServerReviews(api, cache)

    async def scrapes() -> list[Verdict]:
        try:
            return [await reviews(header) for header in headers]
        finally:
            await api.close()

    headers = [None, "Basic dXNlcjpwYXNz", "Bearer some-token", "Bearer some-token"]
    assert asyncio.run(scrapes()) == [
        Verdict.UNAUTHENTICATED,
        Verdict.UNAUTHENTICATED,
        Verdict.UNAVAILABLE,
        Verdict.UNAVAILABLE,
    ]
    assert cache.get("some-token") is None
