"""The API server's reviews of a scraper's token (core.metrics_access decides what they mean):
a TokenReview, then a SubjectAccessReview of `get` on the non-resource URL /metrics (kube.api).
The operator's ServiceAccount needs `create` on tokenreviews and subjectaccessreviews (the chart's
tenancy ClusterRole)."""

from __future__ import annotations

import logging
import time

from takoform_operator.core.metrics_access import (
    METRICS_PATH,
    METRICS_VERB,
    ReviewCache,
    Verdict,
    bearer_token,
    verdict_of,
)
from takoform_operator.kube.api import ApiError, KubeApi

logger = logging.getLogger(__name__)

#: Seconds a verdict is kept: a scrape every few seconds costs two reviews a minute per scraper.
REVIEW_TTL = 30.0


class ApiServerReviews:
    """`await reviews(authorization_header)` -> the Verdict to answer a scrape with."""

    def __init__(self, api: KubeApi, cache: ReviewCache | None = None) -> None:
        self._api = api
        self._cache = cache or ReviewCache(REVIEW_TTL, time.monotonic)

    async def __call__(self, authorization: str | None) -> Verdict:
        token = bearer_token(authorization)
        if token is None:
            return Verdict.UNAUTHENTICATED
        kept = self._cache.get(token)
        if kept is not None:
            return kept
        try:
            verdict, user = await self._review(token)
        except (ApiError, AttributeError, TypeError) as exc:  # refused, unreachable, or garbled
            logger.warning("cannot review a metrics scraper's token: %s", exc)
            return Verdict.UNAVAILABLE
        if verdict is not Verdict.ALLOWED:
            logger.info("metrics scrape refused (%d) for %s", verdict.value, user or "a token")
        self._cache.put(token, verdict)
        return verdict

    async def _review(self, token: str) -> tuple[Verdict, str]:
        review = await self._api.request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
             "spec": {"token": token}},
        )  # fmt: skip
        status = review.get("status") or {}
        user = status.get("user")
        if not status.get("authenticated") or not isinstance(user, dict):
            return verdict_of(False, False), ""
        spec = {
            "user": user.get("username"),
            "uid": user.get("uid"),
            "groups": user.get("groups"),
            "extra": user.get("extra"),
            "nonResourceAttributes": {"path": METRICS_PATH, "verb": METRICS_VERB},
        }
        access = await self._api.request(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
             "spec": {k: v for k, v in spec.items() if v is not None}},
        )  # fmt: skip
        allowed = bool((access.get("status") or {}).get("allowed"))
        return verdict_of(True, allowed), str(user.get("username"))
