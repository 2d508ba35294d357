"""Bearer authentication (H-3) and the admin API's own token."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from .helpers import error_code

pytestmark = pytest.mark.host


@pytest.mark.parametrize(
    "headers",
    [
        {},
        {"Authorization": "Bearer wrong-token"},
        {"Authorization": "Basic dXNlcjpwYXNz"},
        {"Authorization": "Bearer"},
    ],
    ids=["none", "wrong", "basic", "empty"],
)
@pytest.mark.parametrize(
    "method_path",
    [
        ("GET", "/v1alpha3/forms"),
        ("PUT", "/v1alpha3/spaces/unauthenticated"),
        ("GET", "/v1alpha3/no-such-route"),
    ],
)
def test_without_a_valid_token_the_host_answers_401_and_does_nothing(
    reference_host: Any, headers: dict[str, str], method_path: tuple[str, str]
) -> None:
    method, path = method_path
    response = httpx.request(method, reference_host.url + path, headers=headers)
    assert response.status_code == 401
    assert error_code(response) == "unauthenticated"
    assert response.headers["www-authenticate"].startswith("Bearer")
    with reference_host.api() as client:
        assert client.get("/v1alpha3/spaces/unauthenticated").status_code == 404


def test_healthz_needs_no_token(reference_host: Any) -> None:
    response = httpx.get(reference_host.url + "/healthz")
    assert response.status_code == 200 and response.json() == {"ok": True}


def test_the_admin_token_is_not_an_api_token(reference_host: Any) -> None:
    response = httpx.get(
        reference_host.url + "/v1alpha3/forms",
        headers={"Authorization": f"Bearer {reference_host.admin_token}"},
    )
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("token", "status", "code"),
    [(None, 401, "unauthenticated"), ("wrong", 401, "unauthenticated"), ("api", 403, "forbidden")],
)
def test_admin_api_needs_the_admin_token(
    reference_host: Any, token: str | None, status: int, code: str
) -> None:
    headers = {}
    if token is not None:
        value = reference_host.token if token == "api" else token
        headers["Authorization"] = f"Bearer {value}"
    for method, path in (
        ("GET", "/admin/v1/misbehaviours"),
        ("PUT", "/admin/v1/faults"),
        ("POST", "/admin/v1/operations/expire"),
    ):
        response = httpx.request(method, reference_host.url + path, headers=headers, json={})
        assert response.status_code == status, (method, path, response.text)
        assert error_code(response) == code
    assert reference_host.admin("GET", "/admin/v1/faults").json()["stuckOperations"] is False
