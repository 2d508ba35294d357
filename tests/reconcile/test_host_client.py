"""The host client: one translation of host answers, reads retried, mutations sent once."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator
from typing import Any

import builders
import httpx
import pytest
from memory_bindings import MemoryBindings
from one_host import OneHost

from takoform_operator import host_port as errors
from takoform_operator.core.actions import Target
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.host_client.client import HostClient
from takoform_operator.host_client.port import HostClientPort
from takoform_operator.registry_data import load_registry
from takoform_operator.service import reconcile
from takoform_spec.identity import FormLine, FormRef

REGISTRY = load_registry()
BUCKET_REF = REGISTRY.default_create_ref(FormLine("storage.takoform.io/v1", "Bucket"))
assert BUCKET_REF is not None


def _error(status: int, code: str, **details: Any) -> httpx.Response:
    body = {"error": {"code": code, "message": f"{code} happened", "details": details}}
    return httpx.Response(status, json=body)


@pytest.mark.parametrize(
    ("status", "code", "expected"),
    [
        (400, "invalid_request", errors.InvalidRequest),
        (401, "unauthenticated", errors.Unauthenticated),
        (403, "forbidden", errors.Forbidden),
        (404, "space_not_found", errors.SpaceNotFound),
        (404, "form_unknown", errors.FormUnknown),
        (404, "resource_not_found", errors.ResourceNotFound),
        (404, "operation_not_found", errors.OperationNotFound),
        (409, "operation_in_progress", errors.OperationInProgress),
        (412, "resource_exists", errors.ResourceExists),
        (412, "generation_conflict", errors.GenerationConflict),
        (412, "revision_conflict", errors.RevisionConflict),
        (412, "uid_mismatch", errors.UidMismatch),
        (413, "payload_too_large", errors.PayloadTooLarge),
        (415, "unsupported_media_type", errors.UnsupportedMediaType),
        (422, "validation_failed", errors.ValidationFailed),
        (422, "idempotency_key_reused", errors.IdempotencyKeyReused),
        (428, "precondition_required", errors.InvalidRequest),
        (404, "made_up_code", errors.HostProtocolError),
    ],
)
async def test_error_codes_translate_once_to_types(
    status: int, code: str, expected: type[Exception]
) -> None:
    transport = httpx.MockTransport(lambda request: _error(status, code, operationId="op-9"))
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(expected) as caught:
            await client.get_operation("op-1")
    if isinstance(caught.value, errors.HostRejected):
        assert caught.value.code == code and caught.value.status == status


async def test_operation_in_progress_names_the_operation() -> None:
    transport = httpx.MockTransport(
        lambda r: _error(409, "operation_in_progress", operationId="op-7")
    )
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(errors.OperationInProgress) as caught:
            await client.create("s", BUCKET_REF, "n", {"region": "eu-west-1", "sizeGiB": 1}, "k")
    assert caught.value.operation_id == "op-7"


async def test_error_body_outside_the_contract_is_a_protocol_error() -> None:
    transport = httpx.MockTransport(lambda r: httpx.Response(404, text="not found"))
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(errors.HostProtocolError):
            await client.get_operation("op-1")


@pytest.mark.parametrize("status", [429, 503])
async def test_a_read_answered_with_retry_after_is_never_slept_on_in_the_reconcile(
    status: int,
) -> None:
    # Retry-After: 120 slept three times would hold a reconcile slot for six minutes; it is
    # handed to the CR's back-off instead (capped there: core.backoff.next_delay).
    calls: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(status, headers={"Retry-After": "120"}, json={})

    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    transport = httpx.MockTransport(answer)
    async with HostClient("http://host", "t", transport=transport, sleep=sleep) as client:
        with pytest.raises(errors.HostUnavailable) as caught:
            await client.get_operation("op-1")
    assert caught.value.retry_after == 120.0
    assert slept == [] and len(calls) == 1


async def test_reads_are_retried_briefly_without_retry_after() -> None:
    answers = iter([httpx.Response(503, json={}), httpx.Response(502), _operation_response()])
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    transport = httpx.MockTransport(lambda request: next(answers))
    async with HostClient("http://host", "t", transport=transport, sleep=sleep) as client:
        operation = await client.get_operation("op-1")
    assert operation.id == "op-1"
    assert slept == [0.4, 0.8]


async def test_reads_give_up_after_the_configured_retries() -> None:
    calls = []

    def unavailable(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        raise httpx.ConnectError("refused", request=request)

    async def sleep(seconds: float) -> None:
        return None

    transport = httpx.MockTransport(unavailable)
    async with HostClient(
        "http://host", "t", transport=transport, read_retries=2, sleep=sleep
    ) as client:
        with pytest.raises(errors.HostUnavailable):
            await client.get_operation("op-1")
    assert len(calls) == 3


@pytest.mark.parametrize("failure", ["transport", "503"])
async def test_mutations_are_sent_exactly_once(failure: str) -> None:
    calls: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        if failure == "transport":
            raise httpx.ReadError("connection dropped", request=request)
        return httpx.Response(503, headers={"Retry-After": "1"}, json={})

    transport = httpx.MockTransport(answer)
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(errors.HostUnavailable):
            await client.create("s", BUCKET_REF, "n", {"region": "eu-west-1", "sizeGiB": 1}, "k")
    assert len(calls) == 1, "a mutation is never re-sent blindly"
    sent = calls[0]
    assert sent.headers["If-None-Match"] == "*"
    assert sent.headers["Idempotency-Key"] == "k"
    assert sent.headers["Authorization"] == "Bearer t"
    assert sent.url.params["definitionVersion"] == BUCKET_REF.definition_version
    assert sent.url.params["schemaDigest"] == BUCKET_REF.schema_digest
    assert json.loads(sent.content) == {"spec": {"region": "eu-west-1", "sizeGiB": 1}}


async def test_a_representation_under_another_ref_is_refused() -> None:
    other = next(r for r in REGISTRY.known_refs(BUCKET_REF.line) if r != BUCKET_REF)
    body = _resource_body(other)
    transport = httpx.MockTransport(lambda r: httpx.Response(200, json=body))
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(errors.HostProtocolError):
            await client.get_resource("s", BUCKET_REF, "n")


def _operation_response() -> httpx.Response:
    assert BUCKET_REF is not None
    return httpx.Response(
        200,
        json={
            "id": "op-1",
            "verb": "create",
            "state": "running",
            "space": "s",
            "name": "n",
            "formRef": BUCKET_REF.to_json(),
            "resourceUid": "u",
            "error": None,
        },
    )


def _resource_body(ref: FormRef) -> dict[str, Any]:
    return {
        "formRef": ref.to_json(),
        "metadata": {"space": "s", "name": "n", "uid": "u", "generation": "1", "revision": "1"},
        "spec": {},
        "status": {},
    }


# -- against the real host -----------------------------------------------------------------------


@pytest.fixture
async def real(reference_host: Any) -> AsyncIterator[HostClient]:
    async with HostClient(reference_host.url, reference_host.token) as client:
        await client.ensure_space("client-tests")
        yield client


@pytest.mark.host
async def test_real_host_answers_translate(real: HostClient) -> None:
    assert BUCKET_REF is not None
    unknown = FormRef(BUCKET_REF.api_version, BUCKET_REF.kind, "9.9.9", BUCKET_REF.schema_digest)
    with pytest.raises(errors.FormUnknown):
        await real.get_resource("client-tests", unknown, "x")
    with pytest.raises(errors.ResourceNotFound):
        await real.get_resource("client-tests", BUCKET_REF, "missing")
    with pytest.raises(errors.ValidationFailed) as caught:
        await real.create("client-tests", BUCKET_REF, "bad", {"region": "eu-west-1"}, "key-bad")
    assert caught.value.field == "sizeGiB"
    with pytest.raises(errors.OperationNotFound):
        await real.get_operation("op-does-not-exist")


@pytest.mark.host
async def test_real_host_retry_after_goes_to_the_caller_at_once(host_factory: Any) -> None:
    host = host_factory(commit_delay=0.05)
    host.set_faults(errorRate=1.0)
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async with HostClient(host.url, host.token, read_retries=2, sleep=sleep) as client:
        with pytest.raises(errors.HostUnavailable) as caught:
            await client.get_operation("op-1")
    assert caught.value.retry_after == 1.0
    assert slept == [], "Retry-After is the back-off's to honour, not a sleep in the reconcile"


@pytest.mark.host
def test_operation_listing_never_crosses_spaces(reference_host: Any) -> None:
    with reference_host.api() as api:
        answer = api.get("/v1alpha3/operations", params={"name": "anything"})
    assert answer.status_code == 400
    assert answer.json()["error"]["code"] == "invalid_request"


@pytest.mark.host
async def test_the_pooled_transport_keeps_timeouts_and_failures_as_the_client_expects(
    host_factory: Any,
) -> None:
    """The client's own transport (http_transport, aiohttp's pool): its timeout applies, and a
    slow, dropped or refused request is HostUnavailable, never another exception type."""
    host = host_factory(commit_delay=0.05)
    host.set_faults(latencyMs=2000)
    async with HostClient(host.url, host.token, timeout=0.3, read_retries=0) as client:
        with pytest.raises(errors.HostUnavailable, match="Timeout"):
            await client.get_operation("op-1")
    host.set_faults(latencyMs=0, dropRate=1.0)
    async with HostClient(host.url, host.token, read_retries=0) as client:
        with pytest.raises(errors.HostUnavailable):
            await client.get_operation("op-1")
    host.set_faults(dropRate=0.0)
    async with HostClient(host.url, host.token, read_retries=0) as client:
        with pytest.raises(errors.OperationNotFound):
            await client.get_operation("op-1")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    async with HostClient(f"http://127.0.0.1:{port}", "t", read_retries=0) as client:
        with pytest.raises(errors.HostUnavailable, match="Connect"):
            await client.get_operation("op-1")


async def test_a_read_answered_form_unknown_is_never_an_absent_resource() -> None:
    # 0017 rule 4: a host that cannot serve the exact FormRef right now says nothing about the
    # resource; read as "absent", a bound CR would re-create it (or an import would re-bind).
    sent: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        return _error(404, "form_unknown")

    transport = httpx.MockTransport(answer)
    desired = builders.desired(
        space="s", name="n", parameters={"region": "eu-west-1", "sizeGiB": 1}
    )
    bound = builders.bound(desired)
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(errors.FormUnknown):
            await client.find_resource("s", BUCKET_REF, "n")
        port = HostClientPort(client)
        with pytest.raises(errors.FormUnknown):
            await port.read(Target("s", BUCKET_REF, "n"))
        outcome = (
            await reconcile(desired, bound, REGISTRY, OneHost(port), MemoryBindings())
        ).outcome
    assert outcome.asserted() == {ConditionType.DEGRADED: Reason.HOST_REJECTED}
    assert outcome.state == bound, "still bound to the same incarnation"
    assert {request.method for request in sent} == {"GET"}, "nothing but reads was sent"


def _serving(body: dict[str, Any]) -> httpx.MockTransport:
    return httpx.MockTransport(lambda request: httpx.Response(200, json=body))


@pytest.mark.parametrize(
    ("member", "value"),
    [("space", "another-space"), ("name", "another-name")],
)
async def test_a_read_served_for_another_space_or_name_is_a_protocol_error(
    member: str, value: str
) -> None:
    # The recorded target is re-pointed by nothing the host says: asked for s/n, served s/n.
    assert BUCKET_REF is not None
    body = _resource_body(BUCKET_REF)
    body["metadata"][member] = value
    async with HostClient("http://host", "t", transport=_serving(body)) as client:
        with pytest.raises(errors.HostProtocolError, match=f"served {member}"):
            await client.get_resource("s", BUCKET_REF, "n")


@pytest.mark.parametrize("version", ["abc", "1.0", "01.0.0", ""])
async def test_a_served_formref_that_is_not_exact_is_a_protocol_error(version: str) -> None:
    assert BUCKET_REF is not None
    body = _resource_body(BUCKET_REF)
    body["formRef"]["definitionVersion"] = version
    async with HostClient("http://host", "t", transport=_serving(body)) as client:
        with pytest.raises(errors.HostProtocolError):
            await client.get_resource("s", BUCKET_REF, "n")


@pytest.mark.parametrize(
    ("status", "code"),
    [(403, "resource_not_found"), (410, "resource_not_found"), (200 + 209, "validation_failed")],
)
async def test_an_error_code_with_another_status_than_its_contract_is_a_protocol_error(
    status: int, code: str
) -> None:
    # A 403 or 410 saying resource_not_found must not unbind a Ready CR (docs/host-api.md §9).
    transport = httpx.MockTransport(lambda request: _error(status, code))
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(errors.HostProtocolError, match="contract"):
            await client.get_resource("s", BUCKET_REF, "n")  # type: ignore[arg-type]


async def test_an_answer_larger_than_the_bound_is_refused_unread() -> None:
    # H-40: the client never holds more than MAX_ANSWER_BYTES of one answer.
    from takoform_operator.host_client.client import MAX_ANSWER_BYTES

    chunks = 0

    async def stream() -> Any:
        nonlocal chunks
        for _ in range(MAX_ANSWER_BYTES // 65536 + 10):
            chunks += 1
            yield b"x" * 65536

    class Endless(httpx.AsyncByteStream):
        async def __aiter__(self) -> Any:
            async for chunk in stream():
                yield chunk

    transport = httpx.MockTransport(lambda request: httpx.Response(200, stream=Endless()))
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(errors.HostProtocolError, match="more than 4 MiB"):
            await client.get_operation("op-1")
    assert chunks <= MAX_ANSWER_BYTES // 65536 + 2, "reading stopped at the bound"


async def test_a_long_error_message_is_cut_and_says_so() -> None:
    body = {"error": {"code": "validation_failed", "message": "m" * 100_000, "details": []}}
    transport = httpx.MockTransport(lambda request: httpx.Response(422, json=body))
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(errors.ValidationFailed) as caught:
            await client.get_operation("op-1")
    assert (
        len(caught.value.message) < 17 * 1024 and "(cut: 100000 characters)" in caught.value.message
    )
    assert caught.value.details == {}, "details that are not an object are dropped"


async def test_a_document_outside_the_contract_is_reported_without_its_values() -> None:
    # pydantic's own text quotes the input: a whole representation, sensitive outputs included.
    assert BUCKET_REF is not None
    body = _resource_body(BUCKET_REF)
    body["metadata"]["uid"] = 7
    body["status"] = {"outputs": "hunter22-secret"}
    async with HostClient("http://host", "t", transport=_serving(body)) as client:
        with pytest.raises(errors.HostProtocolError) as caught:
            await client.get_resource("s", BUCKET_REF, "n")
    assert "metadata.uid" in str(caught.value) and "status.outputs" in str(caught.value)
    assert "hunter22" not in str(caught.value)


def _deep(depth: int) -> str:
    return '{"a":' * depth + '"x"' + "}" * depth


@pytest.mark.parametrize("status", [200, 422])
async def test_an_answer_nested_too_deep_is_a_protocol_error_not_a_traceback(status: int) -> None:
    """Python's json raises RecursionError from about 1,000 levels: a host answer (a document or
    an error body) nested deeper than the depth-safe decoder reads is outside the contract."""
    if status == 200:
        text = '{"id":"op-1","state":"running","extra":' + _deep(5000) + "}"
    else:
        text = '{"error":{"code":"validation_failed","message":"m","details":' + _deep(5000) + "}}"
    transport = httpx.MockTransport(
        lambda request: httpx.Response(
            status, content=text.encode(), headers={"Content-Type": "application/json"}
        )
    )
    async with HostClient("http://host", "t", transport=transport) as client:
        with pytest.raises(errors.HostProtocolError, match="nested deeper than"):
            await client.get_operation("op-1")
