"""Bad input gets a clear error code and stores nothing (H-1, H-4..H-8, H-21, H-22)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from .helpers import API, BUCKET_SPEC, error_code, form_ref, new_space, query, resource_path

pytestmark = pytest.mark.host

Ref = dict[str, str]


@dataclass(frozen=True)
class Case:
    id: str
    status: int
    code: str
    #: (client, space, ref, name) -> response
    send: Callable[[httpx.Client, str, Ref, str], httpx.Response]
    field: str | None = None


def _put(
    body: bytes | None = None,
    spec: Any = None,
    content_type: str | None = "application/json",
    headers: dict[str, str | None] | None = None,
    space: str | None = None,
    name: str | None = None,
    params: Callable[[Ref], dict[str, str]] = query,
) -> Callable[[httpx.Client, str, Ref, str], httpx.Response]:
    def send(client: httpx.Client, sp: str, ref: Ref, nm: str) -> httpx.Response:
        given: dict[str, str | None] = {"If-None-Match": "*", **(headers or {})}
        hdrs = {key: value for key, value in given.items() if value is not None}
        if content_type is not None:
            hdrs["Content-Type"] = content_type
        content = body
        if content is None:
            import json

            content = json.dumps({"spec": BUCKET_SPEC if spec is None else spec}).encode()
        path = resource_path(space or sp, ref, name or nm)
        return client.put(path, params=params(ref), content=content, headers=hdrs)

    return send


def _invalid(case: str, spec: dict[str, Any], field: str) -> Case:
    """A create whose spec the Form's schema refuses at `field` (422 validation_failed)."""
    return Case(case, 422, "validation_failed", _put(spec=spec), field=field)


def _big_spec() -> dict[str, Any]:
    return {**BUCKET_SPEC, "labels": {"blob": "x" * (1024 * 1024 + 10)}}


CASES = [
    Case("malformed-json", 400, "invalid_request", _put(body=b'{"spec": {"region": ')),
    Case("empty-body", 400, "invalid_request", _put(body=b"")),
    Case("nan-is-not-json", 400, "invalid_request", _put(body=b'{"spec": {"sizeGiB": NaN}}')),
    Case("body-not-object", 400, "invalid_request", _put(body=b"[1, 2]")),
    Case("wrong-content-type", 415, "unsupported_media_type", _put(content_type="text/plain")),
    Case("missing-content-type", 415, "unsupported_media_type", _put(content_type=None)),
    Case(
        "latin1-charset",
        415,
        "unsupported_media_type",
        _put(content_type="application/json; charset=latin-1"),
    ),
    _invalid("undeclared-field", {**BUCKET_SPEC, "colour": "red"}, "colour"),
    _invalid("undeclared-by-this-exact-version", {**BUCKET_SPEC, "quota": "10Gi"}, "quota"),
    _invalid("wrong-type", {**BUCKET_SPEC, "sizeGiB": "ten"}, "sizeGiB"),
    _invalid("bool-is-not-integer", {**BUCKET_SPEC, "sizeGiB": True}, "sizeGiB"),
    _invalid("missing-required", {"sizeGiB": 10}, "region"),
    _invalid("below-minimum", {**BUCKET_SPEC, "sizeGiB": 0}, "sizeGiB"),
    _invalid("pattern", {**BUCKET_SPEC, "region": "Europe"}, "region"),
    Case("spec-missing", 422, "validation_failed", _put(body=b"{}"), field="spec"),
    Case(
        "extra-body-member",
        422,
        "validation_failed",
        _put(body=b'{"spec": {"region": "eu-west-1", "sizeGiB": 1}, "metadata": {}}'),
        field="metadata",
    ),
    Case("name-with-slash", 400, "invalid_request", _put(name="a%2Fb")),
    Case("name-uppercase", 400, "invalid_request", _put(name="Logs")),
    Case("name-too-long", 400, "invalid_request", _put(name="a" * 254)),
    Case("space-with-slash", 400, "invalid_request", _put(space="team%2Fa")),
    Case("oversized-body", 413, "payload_too_large", _put(spec=_big_spec())),
    Case("unknown-space", 404, "space_not_found", _put(space="no-such-space")),
    Case(
        "unknown-definition-version",
        404,
        "form_unknown",
        _put(params=lambda ref: {**query(ref), "definitionVersion": "1.9.0"}),
    ),
    Case(
        "unknown-schema-digest",
        404,
        "form_unknown",
        _put(params=lambda ref: {**query(ref), "schemaDigest": "sha256:" + "0" * 64}),
    ),
    Case(
        "missing-formref-member",
        400,
        "invalid_request",
        _put(params=lambda ref: {"definitionVersion": ref["definitionVersion"]}),
    ),
    Case(
        "no-create-fence",
        428,
        "precondition_required",
        _put(headers={"If-None-Match": None}),
    ),
    Case(
        "bad-generation-header",
        400,
        "invalid_request",
        _put(headers={"If-None-Match": None, "Takoform-Expected-Generation": "01"}),
    ),
]


@pytest.fixture(scope="module")
def client(reference_host: Any) -> Any:
    with reference_host.api() as c:
        yield c


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_refused_and_stores_nothing(client: httpx.Client, case: Case) -> None:
    space = new_space(client, "bad")
    ref = form_ref(client)
    name = "victim"
    response = case.send(client, space, ref, name)
    assert response.status_code == case.status, response.text
    assert error_code(response) == case.code
    error = response.json()["error"]
    assert isinstance(error["message"], str) and error["message"]
    assert isinstance(error["details"], dict)
    if case.field is not None:
        assert error["details"]["field"] == case.field
    # nothing was stored: no resource, no operation, no new space
    listing = client.get(
        f"{API}/spaces/{space}/forms/{ref['apiVersion']}/{ref['kind']}/resources", params=query(ref)
    )
    assert listing.status_code == 200 and listing.json()["items"] == []
    assert client.get(f"{API}/operations", params={"space": space}).json()["items"] == []
    assert error_code(client.get(resource_path(space, ref, name), params=query(ref))) == (
        "resource_not_found"
    )
    assert client.get(f"{API}/spaces/no-such-space").status_code == 404


def test_a_valid_request_after_the_table_is_accepted(client: httpx.Client) -> None:
    """The table's requests differ from a good one only in the broken part."""
    space = new_space(client, "bad")
    ref = form_ref(client)
    response = _put()(client, space, ref, "victim")
    assert response.status_code == 202, response.text


@pytest.mark.parametrize(
    ("method", "path", "status", "code"),
    [
        ("GET", "/v1alpha3/nothing", 404, "route_not_found"),
        ("GET", "/", 404, "route_not_found"),
        ("POST", "/v1alpha3/forms", 405, "method_not_allowed"),
        ("GET", "/v1alpha3/operations/op-unknown", 404, "operation_not_found"),
        ("GET", "/v1alpha3/spaces/unknown-space", 404, "space_not_found"),
        ("GET", "/v1alpha3/forms/storage.takoform.io/v1/Nope/availability", 400, "invalid_request"),
    ],
)
def test_errors_are_json_with_a_portable_code(
    client: httpx.Client, method: str, path: str, status: int, code: str
) -> None:
    response = client.request(method, path)
    assert response.status_code == status
    assert error_code(response) == code


@pytest.mark.parametrize("member", ["definitionVersion", "schemaDigest"])
def test_form_reads_fail_closed_on_an_unknown_ref(client: httpx.Client, member: str) -> None:
    ref = form_ref(client)
    wrong = {
        **query(ref),
        member: "9.9.9" if member == "definitionVersion" else "sha256:" + "f" * 64,
    }
    base = f"{API}/forms/{ref['apiVersion']}/{ref['kind']}"
    for what in ("availability", "definition"):
        assert error_code(client.get(f"{base}/{what}", params=wrong)) == "form_unknown"
    space = new_space(client, "bad")
    assert error_code(client.get(resource_path(space, ref, "x"), params=wrong)) == "form_unknown"
