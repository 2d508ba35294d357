"""Host answers are checked, not trusted: each misbehaviour switch of the reference host that
breaks an answer the operator relies on, against the real host over HTTP.

For every switch the operator stays safe: a Ready CR is never unbound or re-created, nothing is
deleted or sent, the CR gets a Degraded condition naming what was wrong, the state (uid, FormRef,
pending operation) is kept, and no traceback is logged. When the switch goes off the CR settles
as it would have. The echoing switch proves no sensitive output reaches a condition, an Event or
the log (docs/host-api.md H-37 to H-40; docs/operator.md, Host answers).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import builders
import pytest
from processes import HostProcess

from takoform_operator.core.actions import Create, Delete, Update
from takoform_operator.core.conditions import ConditionType, Reason
from takoform_operator.core.outcome import Outcome
from takoform_operator.core.state import Desired, State
from takoform_operator.host_client.client import HostClient
from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

from .harness import SimulatedCr, SpyPort, condition, message

pytestmark = pytest.mark.host

REGISTRY = load_registry()
BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
POSTGRES = FormLine("database.takoform.io/v1", "PostgresInstance")
SPACE = "team-a"
BUCKET_SPEC = {"region": "eu-west-1", "sizeGiB": 10}
POSTGRES_SPEC = {"region": "eu-west-1", "engineVersion": "16", "storageGiB": 20}
LOOKS = 3  # reconciles with the switch on: a protocol error must hold on every look


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    with HostProcess(tmp_path_factory.mktemp("hostile-host"), commit_delay=0.02) as started:
        yield started


@pytest.fixture
async def client(host: HostProcess) -> AsyncIterator[HostClient]:
    host.set_misbehaviours([])
    host.set_faults(stuckOperations=False)
    async with HostClient(host.url, host.token, read_retries=1) as http:
        await http.ensure_space(SPACE)
        yield http
    host.set_misbehaviours([])
    host.set_faults(stuckOperations=False)


def desired(line: FormLine, spec: dict[str, Any]) -> Desired:
    name = f"{line.kind.lower()}-{uuid.uuid4().hex[:8]}"
    return builders.desired(cr_uid=f"cr-{uuid.uuid4()}", line=line, name=name, parameters=spec)


def admin_target(cr: SimulatedCr) -> dict[str, str]:
    line = cr.desired.line
    return {"space": SPACE, "apiVersion": line.api_version, "kind": line.kind,
            "name": cr.desired.name}  # fmt: skip


async def ready(spy: SpyPort, line: FormLine = BUCKET, spec: Any = None) -> SimulatedCr:
    cr = SimulatedCr(desired(line, spec or BUCKET_SPEC))
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE, outcome
    return cr


def assert_kept(cr: SimulatedCr, before: State, outcome: Outcome, says: str) -> None:
    """The one safe answer to a host answer outside the contract."""
    assert condition(outcome, ConditionType.DEGRADED) is Reason.HOST_REJECTED, outcome
    assert says in message(outcome, ConditionType.DEGRADED), message(
        outcome, ConditionType.DEGRADED
    )
    assert cr.state == before, "uid, FormRef, target and pending operation are kept"
    assert outcome.state.bound and outcome.state.uid == before.uid


def no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    assert "Traceback" not in caplog.text
    assert not [r for r in caplog.records if r.exc_info], "no exception was logged"


@pytest.mark.parametrize(
    ("switch", "says"),
    [
        ("serve-another-name", "the host served name"),
        ("serve-another-space", "the host served space"),
        ("serve-malformed-formref", "definitionVersion"),
    ],
)
async def test_a_read_naming_something_else_never_re_points_a_ready_cr(
    host: HostProcess,
    client: HostClient,
    caplog: pytest.LogCaptureFixture,
    switch: str,
    says: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    spy = SpyPort(client)
    cr = await ready(spy)
    before, sent = cr.state, len(spy.mutations)
    cr.change(parameters={**BUCKET_SPEC, "sizeGiB": 11})  # a change it would otherwise send
    host.set_misbehaviours([switch])
    for _ in range(LOOKS):
        outcome = await cr.reconcile(spy, REGISTRY)
        assert_kept(cr, before, outcome, says)
    assert len(spy.mutations) == sent, "nothing is sent on an answer outside the contract"
    host.set_misbehaviours([])
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert cr.state.uid == before.uid, "the same incarnation, never re-created"
    assert [type(m) for m in spy.mutations[sent:]] == [Update]
    no_traceback(caplog)


@pytest.mark.parametrize(
    ("switch", "says"),
    [
        ("misstatus-not-found", "whose contract status is 404"),
        ("oversized-errors", "more than 4 MiB"),
    ],
)
async def test_an_error_answer_outside_the_contract_never_unbinds_a_ready_cr(
    host: HostProcess,
    client: HostClient,
    caplog: pytest.LogCaptureFixture,
    switch: str,
    says: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    spy = SpyPort(client)
    cr = await ready(spy)
    before, sent = cr.state, len(spy.mutations)
    # The resource goes out of band, so the read is an error answer: honoured only when it
    # keeps the contract (a 404 resource_not_found, bounded).
    host.admin("POST", "/admin/v1/resources/delete", admin_target(cr))
    host.set_misbehaviours([switch])
    for _ in range(LOOKS):
        outcome = await cr.reconcile(spy, REGISTRY)
        assert_kept(cr, before, outcome, says)
    assert len(spy.mutations) == sent, "never unbound, so never re-created"
    host.set_misbehaviours([])
    outcome = await cr.reconcile(spy, REGISTRY)
    assert condition(outcome, ConditionType.DRIFTED) is Reason.RESOURCE_DELETED, outcome
    no_traceback(caplog)


@pytest.mark.parametrize(
    ("switch", "says"),
    [
        ("record-another-name", "with a record of"),
        ("record-malformed-formref", "definitionVersion"),
    ],
)
async def test_a_pending_operation_answered_for_something_else_keeps_its_marker(
    host: HostProcess,
    client: HostClient,
    caplog: pytest.LogCaptureFixture,
    switch: str,
    says: str,
) -> None:
    caplog.set_level(logging.DEBUG)
    spy = SpyPort(client)
    cr = await ready(spy)
    cr.change(parameters={**BUCKET_SPEC, "sizeGiB": 12})
    host.set_faults(stuckOperations=True)
    await cr.reconcile(spy, REGISTRY)
    assert cr.state.pending is not None, "the update is pending"
    pending, sent = cr.state, len(spy.mutations)
    host.set_misbehaviours([switch])
    host.set_faults(stuckOperations=False)
    for _ in range(LOOKS):
        outcome = await cr.reconcile(spy, REGISTRY)
        assert_kept(cr, pending, outcome, says)
    assert len(spy.mutations) == sent
    host.set_misbehaviours([])
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    assert cr.state.pending is None and cr.state.uid == pending.uid
    assert len(spy.mutations) == sent, "the one update, never a second"
    no_traceback(caplog)


@pytest.mark.parametrize("switch", ["record-another-name", "record-malformed-formref"])
async def test_a_mutation_answered_with_a_record_of_something_else_is_not_recorded(
    host: HostProcess, client: HostClient, caplog: pytest.LogCaptureFixture, switch: str
) -> None:
    caplog.set_level(logging.DEBUG)
    spy = SpyPort(client)
    cr = SimulatedCr(desired(BUCKET, BUCKET_SPEC))
    host.set_misbehaviours([switch])
    host.set_faults(stuckOperations=True)  # the create stays running: only its record speaks
    for _ in range(LOOKS):
        outcome = await cr.reconcile(spy, REGISTRY)
        assert condition(outcome, ConditionType.DEGRADED) is Reason.HOST_REJECTED, outcome
        assert "the host answered the Create of" in message(outcome, ConditionType.DEGRADED) or (
            "definitionVersion" in message(outcome, ConditionType.DEGRADED)
        )
        assert cr.state.pending is None and cr.state.uid is None, "nothing recorded from it"
    host.set_misbehaviours([])
    host.set_faults(stuckOperations=False)
    outcome = await cr.converge(spy, REGISTRY)
    assert condition(outcome, ConditionType.READY) is Reason.AVAILABLE
    creates = [m for m in spy.mutations if isinstance(m, Create)]
    assert len({c.key for c in creates}) == 1, "every replay carried the same key"
    listed = await client.list_operations(SPACE, cr.state.form_ref, cr.desired.name)  # type: ignore[arg-type]
    assert len([op for op in listed if op.verb == "create"]) == 1, "one create on the host"
    assert not [m for m in spy.mutations if isinstance(m, Delete)]
    no_traceback(caplog)


async def test_a_refusal_echoing_sensitive_outputs_never_reaches_status_events_or_log(
    host: HostProcess, client: HostClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    spy = SpyPort(client)
    cr = await ready(spy, POSTGRES, POSTGRES_SPEC)
    assert cr.state.form_ref is not None
    served = await client.get_resource(SPACE, cr.state.form_ref, cr.desired.name)
    secrets = [str(served.status.outputs[n]) for n in ("username", "password", "connectionString")]
    assert all(secrets)
    before = cr.state
    # An immutable field changed: the host refuses the update with validation_failed, and the
    # switch echoes the resource's sensitive outputs into the refusal's message and details.
    cr.change(parameters={**POSTGRES_SPEC, "region": "us-east-1"})
    host.set_misbehaviours(["echo-sensitive-outputs"])
    refused = await cr.reconcile(spy, REGISTRY)
    assert condition(refused, ConditionType.DEGRADED) is Reason.INVALID_SPEC, refused
    said = message(refused, ConditionType.DEGRADED)
    assert "immutable" in said and "<redacted>" in said, said
    assert cr.state.uid == before.uid
    shown = [c.message for o in cr.outcomes for c in o.conditions]
    shown += [e.message for o in cr.outcomes for e in o.events]
    for value in secrets:
        assert not [text for text in shown if value in text], "a secret in a condition or Event"
        assert value not in caplog.text, "a secret in the log"
        assert value not in repr(cr.state), "a secret in the state written to status"
    no_traceback(caplog)
