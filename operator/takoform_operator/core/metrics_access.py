"""Who may read /metrics: the kube-rbac-proxy convention, decided here and asked of the API
server by kube.metrics_access. A caller sends a bearer token; the API server authenticates it
(TokenReview), then says whether its user may `get` the non-resource URL /metrics
(SubjectAccessReview). No token or an unknown one: 401; a known one without the right: 403.

A verdict is kept for `ttl` seconds under the token's SHA-256 (never the token itself), so a
Prometheus scraping every few seconds costs the API server two reviews per `ttl`. Failures to
ask are not kept: the next scrape asks again."""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Callable

#: The non-resource URL and verb a scraper's user needs (a ClusterRole with
#: `nonResourceURLs: [/metrics]`, `verbs: [get]`).
METRICS_PATH = "/metrics"
METRICS_VERB = "get"


class Verdict(enum.Enum):
    """The answer to one scrape, as the HTTP status it is served with."""

    ALLOWED = 200
    UNAUTHENTICATED = 401
    FORBIDDEN = 403
    UNAVAILABLE = 503  # the API server could not be asked: never kept

    @property
    def text(self) -> str:
        return _TEXTS[self]


_TEXTS = {
    Verdict.ALLOWED: "",
    Verdict.UNAUTHENTICATED: "Unauthorized: send a bearer token the API server authenticates\n",
    Verdict.FORBIDDEN: (
        f"Forbidden: the token's user may not {METRICS_VERB} the non-resource URL {METRICS_PATH}\n"
    ),
    Verdict.UNAVAILABLE: "Service Unavailable: the API server could not review the token\n",
}


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization: Bearer TOKEN` header; None for anything else."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


def verdict_of(authenticated: bool, allowed: bool) -> Verdict:
    """The TokenReview's `authenticated`, then the SubjectAccessReview's `allowed`."""
    if not authenticated:
        return Verdict.UNAUTHENTICATED
    return Verdict.ALLOWED if allowed else Verdict.FORBIDDEN


class ReviewCache:
    """Verdicts by token digest for `ttl` seconds, at most `size` of them (the oldest go first:
    random tokens cannot grow it)."""

    def __init__(self, ttl: float, clock: Callable[[], float], size: int = 256) -> None:
        self.ttl = ttl
        self._clock = clock
        self._size = size
        self._kept: dict[str, tuple[float, Verdict]] = {}

    @staticmethod
    def _key(token: str) -> str:
        return hashlib.sha256(token.encode()).hexdigest()

    def get(self, token: str) -> Verdict | None:
        key = self._key(token)
        found = self._kept.get(key)
        if found is None:
            return None
        if self._clock() - found[0] >= self.ttl:
            del self._kept[key]
            return None
        return found[1]

    def put(self, token: str, verdict: Verdict) -> None:
        if verdict is Verdict.UNAVAILABLE:
            return
        key = self._key(token)
        self._kept.pop(key, None)
        while len(self._kept) >= self._size:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = (self._clock(), verdict)
