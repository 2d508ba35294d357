"""Ready reflects the host resource's own readiness (core.decide, docs/operator.md "Ready"):
its Degraded and Ready conditions and its observedGeneration; an outage keeps the last known
conditions (core.conditions.merge_conditions with keep_unnamed)."""

from __future__ import annotations

import pytest
from builders import BUCKET_REF, REGISTRY, bound, desired, served

from takoform_operator.core.backoff import next_delay
from takoform_operator.core.conditions import ConditionType, Reason, merge_conditions, transitions
from takoform_operator.core.decide import Observation, decide
from takoform_operator.core.outcome import refused, unavailable
from takoform_operator.core.plan import Plan, plan
from takoform_operator.core.state import HostCondition, ResourceView
from takoform_operator.host_client.models import Resource
from takoform_operator.settings import Settings

REF = BUCKET_REF
DESIRED = desired(namespace="apps", cr_name="logs")
STATE = bound(DESIRED, uid="h-1", generation="2", revision="5")


def _resource(*conditions: HostCondition, observed: str | None = "2") -> ResourceView:
    return served(
        uid="h-1", generation="2", revision="6", observed_generation=observed, conditions=conditions
    )


def _decide(resource: ResourceView) -> dict[ConditionType, Reason]:
    planned = plan(DESIRED, STATE, REGISTRY)
    assert isinstance(planned, Plan)
    decision = decide(DESIRED, STATE, planned, Observation(None, resource), REGISTRY)
    assert decision.action is None, "the host's own trouble is never repaired by an update"
    return decision.outcome.asserted()


READY = HostCondition("Ready", "True", "Available", "Bucket logs is available", "Provisioned")


@pytest.mark.parametrize(
    ("conditions", "observed", "expected", "why"),
    [
        ((READY,), "2", {ConditionType.READY: Reason.AVAILABLE}, "the host says Ready"),
        ((), None, {ConditionType.READY: Reason.AVAILABLE}, "a host that reports nothing"),
        (
            (READY, HostCondition("Degraded", "True", "Failed", "disk full", "DiskFull")),
            "2",
            {ConditionType.DEGRADED: Reason.HOST_DEGRADED},
            "its own Degraded wins over its Ready",
        ),
        (
            (HostCondition("Ready", "False", "Provisioning", "warming up", "Warming"),),
            "2",
            {ConditionType.RECONCILING: Reason.HOST_NOT_READY},
            "not Ready on the host",
        ),
        (
            (READY,),
            "1",
            {ConditionType.RECONCILING: Reason.HOST_RECONCILING},
            "its status reflects an older generation than the one we wrote",
        ),
        (
            (READY, HostCondition("Degraded", "False", "Available")),
            "2",
            {ConditionType.READY: Reason.AVAILABLE},
            "Degraded False is healthy",
        ),
    ],
)
def test_ready_reflects_the_host_resources_own_account(
    conditions: tuple[HostCondition, ...],
    observed: str | None,
    expected: dict[ConditionType, Reason],
    why: str,
) -> None:
    asserted = _decide(_resource(*conditions, observed=observed))
    # Every not-ready outcome also sets Ready False with the same reason.
    ready = asserted.pop(ConditionType.READY, None)
    if ConditionType.READY not in expected:
        assert ready is None, why
    else:
        asserted[ConditionType.READY] = ready  # type: ignore[assignment]
    assert asserted == expected, why


def test_the_hosts_reason_is_carried_in_the_message() -> None:
    degraded = HostCondition("Degraded", "True", "Failed", "volume is full", "DiskFull")
    planned = plan(DESIRED, STATE, REGISTRY)
    assert isinstance(planned, Plan)
    outcome = decide(
        DESIRED, STATE, planned, Observation(None, _resource(READY, degraded)), REGISTRY
    ).outcome
    ready = next(c for c in outcome.conditions if c.type is ConditionType.READY)
    assert not ready.status
    assert ready.message == "host reports Degraded: DiskFull: volume is full"


def test_the_host_documents_conditions_are_parsed() -> None:
    doc = {
        "formRef": REF.to_json(),
        "metadata": {"space": "s", "name": "n", "uid": "u", "generation": "3", "revision": "9"},
        "spec": {},
        "status": {
            "observedGeneration": "2",
            "conditions": [
                {"type": "Degraded", "status": "True", "reason": "Failed", "hostReason": "X"}
            ],
        },
    }
    view = Resource.model_validate(doc).view()
    assert view.observed_generation == "2"
    assert view.condition("Degraded") == HostCondition("Degraded", "True", "Failed", "", "X")
    assert view.condition("Ready") is None


# -- an outage keeps the last known conditions ---------------------------------------------


def _merged(previous: list[dict[str, object]] | None, now: str) -> list[dict[str, object]]:
    outcome = unavailable(STATE, "host unavailable while reading: connection refused", None)
    return merge_conditions(
        previous, outcome.conditions, now=now, observed_generation=1, keep_unnamed=True
    )


def test_an_outage_keeps_ready_and_sets_degraded_once() -> None:
    ready = merge_conditions(
        None,
        [c for c in _ready_conditions()],
        now="t0",
        observed_generation=1,
    )
    first = _merged(ready, "t1")
    by_type = {c["type"]: c for c in first}
    assert by_type["Ready"] == next(c for c in ready if c["type"] == "Ready"), "kept as it was"
    assert (by_type["Degraded"]["status"], by_type["Degraded"]["reason"]) == (
        "True",
        "HostUnavailable",
    )
    assert [c["type"] for c in transitions(ready, first)] == ["Degraded"]
    second = _merged(first, "t2")
    assert transitions(first, second) == [], "a repeated outage look is no new transition"


def _ready_conditions() -> list:  # type: ignore[type-arg]
    planned = plan(DESIRED, STATE, REGISTRY)
    assert isinstance(planned, Plan)
    return list(
        decide(
            DESIRED, STATE, planned, Observation(None, _resource(READY)), REGISTRY
        ).outcome.conditions
    )


def test_a_settled_cr_is_re_read_at_the_configured_ready_poll_even_above_a_minute() -> None:
    # Ready and Blocked CRs are re-read every TAKOFORM_POLL_READY_SECONDS, whatever its value
    # (docs/operator.md, docs/scaling.md); a value above a minute once had no effect.
    slow = Settings(poll_ready_seconds=600.0)
    planned = plan(DESIRED, STATE, REGISTRY)
    assert isinstance(planned, Plan)
    ready = decide(DESIRED, STATE, planned, Observation(None, _resource(READY)), REGISTRY).outcome
    assert ready.asserted() == {ConditionType.READY: Reason.AVAILABLE}
    blocked = refused(DESIRED, STATE, Reason.SPACE_NOT_GRANTED, "no grant")
    assert next_delay(ready, slow) == 600.0
    assert next_delay(blocked, slow) == 600.0
