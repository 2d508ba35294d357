"""The API server's reviews of a scraper's token (core.metrics_access decides what they mean):
a TokenReview, then a SubjectAccessReview of `get` on the non-resource URL /metrics, with the
official client in a thread. The operator's ServiceAccount needs `create` on tokenreviews and
subjectaccessreviews (the chart's tenancy ClusterRole)."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from takoform_operator.core.metrics_access import (
    METRICS_PATH,
    METRICS_VERB,
    ReviewCache,
    Verdict,
    bearer_token,
    verdict_of,
)
from takoform_operator.kube.client_config import api_client, load_kube_config

logger = logging.getLogger(__name__)

#: Seconds a verdict is kept: a scrape every few seconds costs two reviews a minute per scraper.
REVIEW_TTL = 30.0


class ApiServerReviews:
    """`await reviews(authorization_header)` -> the Verdict to answer a scrape with."""

    def __init__(self, cache: ReviewCache | None = None, client: Any = None) -> None:
        if client is None:
            load_kube_config()  # at start-up: an unusable configuration is said at once
        self._client = client
        self._cache = cache or ReviewCache(REVIEW_TTL, time.monotonic)

    async def __call__(self, authorization: str | None) -> Verdict:
        token = bearer_token(authorization)
        if token is None:
            return Verdict.UNAUTHENTICATED
        kept = self._cache.get(token)
        if kept is not None:
            return kept
        try:
            verdict, user = await asyncio.to_thread(self._review, token)
        except Exception as exc:  # the client raises ApiException, urllib3's errors, OSError
            logger.warning("cannot review a metrics scraper's token: %s", _reason(exc))
            return Verdict.UNAVAILABLE
        if verdict is not Verdict.ALLOWED:
            logger.info("metrics scrape refused (%d) for %s", verdict.value, user or "a token")
        self._cache.put(token, verdict)
        return verdict

    def _review(self, token: str) -> tuple[Verdict, str]:
        from kubernetes import client as k8s  # its models cost a second: at the first scrape

        if self._client is None:
            self._client = api_client()
        review = k8s.AuthenticationV1Api(self._client).create_token_review(
            k8s.V1TokenReview(spec=k8s.V1TokenReviewSpec(token=token))
        )
        status = review.status
        if status is None or not status.authenticated or status.user is None:
            return verdict_of(False, False), ""
        user = status.user
        access = k8s.AuthorizationV1Api(self._client).create_subject_access_review(
            k8s.V1SubjectAccessReview(
                spec=k8s.V1SubjectAccessReviewSpec(
                    user=user.username,
                    uid=user.uid,
                    groups=user.groups,
                    extra=user.extra,
                    non_resource_attributes=k8s.V1NonResourceAttributes(
                        path=METRICS_PATH, verb=METRICS_VERB
                    ),
                )
            )
        )
        allowed = bool(access.status is not None and access.status.allowed)
        return verdict_of(True, allowed), str(user.username)


def _reason(exc: Exception) -> str:
    status = getattr(exc, "status", None)
    if status is not None:
        return f"{status} {getattr(exc, 'reason', '')}".strip()
    return str(exc) or type(exc).__name__
