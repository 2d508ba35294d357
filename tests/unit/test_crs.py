"""A CR body to the core's Desired, and an outcome to the status merge-patch."""

from __future__ import annotations

import json
from typing import Any

import pytest
from builders import BUCKET_REF, cr_body
from prometheus_client import CollectorRegistry

from takoform_operator.core.conditions import Condition, ConditionType, Reason
from takoform_operator.core.outcome import NextLook, Outcome, put_off, unavailable
from takoform_operator.core.state import DeletionPolicy, Pending, Requested, State, Verb
from takoform_operator.kube.crs import (
    InvalidCustomResource,
    desired_for_deletion,
    desired_from_cr,
    merged_status,
    status_change,
    status_patch,
)
from takoform_operator.metrics import Metrics
from takoform_operator.registry_data import load_registry


def _body(**spec: Any) -> dict[str, Any]:
    """A Bucket CR at generation 3 in space "Team A" that accepts uid u-new."""
    return cr_body(
        uid="cr-uid-1",
        generation=3,
        annotations={"takoform.io/accept-uid": "u-new"},
        **{"space": "Team A", "parameters": {"sizeGiB": 1}, **spec},
    )


def test_desired_from_a_cr() -> None:
    digest = "sha256:" + "d" * 64
    desired = desired_from_cr(_body(formRef={"definitionVersion": "1.0.0", "schemaDigest": digest}))
    assert desired.cr_uid == "cr-uid-1" and desired.cr_generation == 3
    assert str(desired.line) == "storage.takoform.io/v1 Bucket"
    assert desired.space == "Team A", "a SpaceID is opaque: spaces and case are kept"
    assert desired.name == "logs"
    assert desired.pin == ("1.0.0", digest)
    assert (desired.namespace, desired.cr_name) == ("demo", "logs")
    assert desired.deletion_policy is DeletionPolicy.DELETE
    assert desired.accept_uid == "u-new"
    assert not desired.deleting


def test_resource_name_overrides_the_cr_name() -> None:
    assert desired_from_cr(_body(resourceName="logs-eu")).name == "logs-eu"


@pytest.mark.parametrize(
    "spec",
    [
        {"space": "a/b"},
        {"space": ""},
        {"resourceName": "Not_A_Name"},
        {"deletionPolicy": "Keep"},
        {"formRef": {"definitionVersion": "1.0", "schemaDigest": "sha256:" + "0" * 64}},
        {"formRef": {"definitionVersion": "1.0.0", "schemaDigest": "sha256:ABC"}},
        {"formRef": {"definitionVersion": "1.0.0"}},
        {"formRef": "1.0.0"},
    ],
    ids=[
        "space with slash",
        "empty space",
        "bad resource name",
        "unknown policy",
        "two-part definitionVersion",
        "short digest",
        "pin without digest",
        "pin not an object",
    ],
)
def test_an_impossible_cr_is_reported(spec: dict[str, Any]) -> None:
    with pytest.raises(InvalidCustomResource):
        desired_from_cr(_body(**spec))


def test_status_patch_clears_with_nulls_and_carries_conditions() -> None:
    outcome = Outcome(
        State(uid="u", pending=None, attempt=1),
        (Condition(ConditionType.READY, True, Reason.AVAILABLE, "ok"),),
        NextLook.POLL,
    )
    patch = status_patch(outcome, None, now="T", cr_generation=3)
    assert patch["pendingOperationId"] is None and patch["attempt"] == 1
    assert patch["observedGeneration"] == 3
    assert patch["conditions"][0]["type"] == "Ready"
    assert patch["conditions"][0]["observedGeneration"] == 3


def test_an_outage_does_not_claim_the_generation_it_could_not_apply() -> None:
    # An Update whose answer was lost (or a host that could not be read) keeps Ready as last
    # known; claiming the new generation beside it would tell kstatus, Flux, Argo CD and the
    # restart spread (core.backoff.settled) that the new spec is applied.
    previous = merged_status(
        None,
        status_patch(
            Outcome(State(uid="u"), (Condition(ConditionType.READY, True, Reason.AVAILABLE),),
                    NextLook.POLL),
            None, now="T0", cr_generation=2,
        ),
    )  # fmt: skip
    lost = unavailable(State(uid="u"), "Update answer lost (503); it will be replayed", None)
    patch = status_patch(lost, previous, now="T1", cr_generation=3)
    after = merged_status(previous, json.loads(json.dumps(patch)))
    assert after["observedGeneration"] == 2, "the status still reflects generation 2 only"
    by_type = {c["type"]: c for c in after["conditions"]}
    assert (by_type["Ready"]["status"], by_type["Ready"]["observedGeneration"]) == ("True", 2)
    assert (by_type["Degraded"]["reason"], by_type["Degraded"]["observedGeneration"]) == (
        "HostUnavailable",
        3,
    )


def test_a_look_put_off_by_the_budget_writes_nothing() -> None:
    status = {
        "uid": "u",
        "attempt": 0,
        "observedGeneration": 2,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "Available", "message": "",
             "observedGeneration": 2, "lastTransitionTime": "T0"},
        ],
    }  # fmt: skip
    assert status_change(status, None, put_off(State(uid="u"), 1.0), now="T1", generation=3) is None


@pytest.mark.parametrize(
    ("before", "now"),
    [
        ({"endpoint": "a", "replica": "r"}, {"endpoint": "b"}),
        ({"conn": {"host": "h", "port": 1}}, {"conn": {"host": "h"}}),
        ({"endpoint": "a"}, {}),
    ],
)
def test_outputs_are_replaced_whole_not_merged(before: dict[str, Any], now: dict[str, Any]) -> None:
    # A key the host stopped reporting, or the outputs of a vanished incarnation, must not stay.
    previous = {"uid": "u", "outputs": before}
    ref = next(iter(load_registry().default_creates.values()))
    outcome = Outcome(State(form_ref=ref, uid="u", outputs=now), (), NextLook.POLL)
    patch = status_patch(outcome, previous, now="T", cr_generation=3)
    assert merged_status(previous, json.loads(json.dumps(patch)))["outputs"] == now


def test_metrics_series_of_a_resource_go_away_with_it() -> None:
    metrics = Metrics(CollectorRegistry())
    body = _body()
    blocked = Outcome(
        State(pending=Pending("op", Verb.CREATE)),
        (Condition(ConditionType.BLOCKED, True, Reason.UID_MISMATCH, "x"),),
        NextLook.POLL,
    )
    metrics.reconciled(body, blocked, 0.1)
    labels = {"namespace": "demo", "name": "logs", "kind": "Bucket"}
    assert (
        metrics.registry.get_sample_value(
            "takoform_resource_blocked", {**labels, "reason": "UidMismatch"}
        )
        == 1.0
    )
    assert metrics.registry.get_sample_value("takoform_resource_pending_operation", labels) == 1.0
    metrics.forget(body)
    assert (
        metrics.registry.get_sample_value(
            "takoform_resource_blocked", {**labels, "reason": "UidMismatch"}
        )
        is None
    )
    assert metrics.registry.get_sample_value("takoform_resource_pending_operation", labels) is None


def test_the_pending_series_exists_only_while_an_operation_is_pending() -> None:
    # A series per settled resource would be thousands of zeros for Prometheus to store, and
    # memory in the operator; the alert asks for == 1 only.
    metrics = Metrics(CollectorRegistry())
    labels = {"namespace": "demo", "name": "logs", "kind": "Bucket"}
    pending = Outcome(State(pending=Pending("op", Verb.CREATE)), (), NextLook.PENDING)
    settled = Outcome(
        State(uid="u"),
        (Condition(ConditionType.READY, True, Reason.AVAILABLE, "ok"),),
        NextLook.POLL,
    )
    metrics.reconciled(_body(), settled, 0.1)
    assert metrics.registry.get_sample_value("takoform_resource_pending_operation", labels) is None
    metrics.reconciled(_body(), pending, 0.1)
    assert metrics.registry.get_sample_value("takoform_resource_pending_operation", labels) == 1.0
    metrics.reconciled(_body(), settled, 0.1)
    assert metrics.registry.get_sample_value("takoform_resource_pending_operation", labels) is None


def test_host_errors_are_counted_by_host() -> None:
    """TakoformHostErrors names the host in trouble: the recorded one once claimed, before that
    the spec's hostRef, the implicit host `default` without one."""
    metrics = Metrics(CollectorRegistry())
    down = Condition(ConditionType.DEGRADED, True, Reason.HOST_UNAVAILABLE, "down")
    claimed = State(form_ref=BUCKET_REF, space="Team A", name="logs", host="edge")
    for body, state in (
        (_body(hostRef="edge"), State()),
        (_body(hostRef="other"), claimed),
        (_body(), State()),
    ):
        metrics.reconciled(body, Outcome(state, (down,), NextLook.BACKOFF), 0.1)
    counts = {
        host: metrics.registry.get_sample_value(
            "takoform_host_errors_total",
            {"kind": "Bucket", "reason": "HostUnavailable", "host": host},
        )
        for host in ("edge", "other", "default")
    }
    assert counts == {"edge": 2.0, "other": None, "default": 1.0}


def test_a_deletion_reads_the_recorded_identity_when_the_spec_no_longer_parses() -> None:
    """A CR that claimed its target and then got a malformed pin must still finish deleting:
    deletion goes to what was recorded and needs nothing else from the spec."""
    broken = _body(
        deletionPolicy="Orphan",
        resourceName="logs-eu",
        formRef={"definitionVersion": "1.0", "schemaDigest": "sha256:" + "0" * 64},
    )
    with pytest.raises(InvalidCustomResource):
        desired_from_cr(broken)
    recorded = Requested(space="Team A", name="logs", pin=None, import_id=None)
    desired = desired_for_deletion(broken, recorded)
    assert (desired.space, desired.name, desired.pin) == ("Team A", "logs", None)
    assert desired.deletion_policy is DeletionPolicy.ORPHAN


def test_a_deletion_with_an_unusable_policy_is_still_reported() -> None:
    broken = _body(deletionPolicy="Keep")
    recorded = Requested(space="Team A", name="logs")
    with pytest.raises(InvalidCustomResource, match="deletionPolicy"):
        desired_for_deletion(broken, recorded)
