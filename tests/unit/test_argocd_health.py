"""The chart's Argo CD health check (charts/takoform-operator/files/argocd-health.lua), run by a
real Lua 5.1 interpreter, and its Flux healthCheckExprs, run by Flux's own CEL status reader
(tests/support/flux.py), on CR bodies whose status the operator's own code wrote: the core's
outcomes for a lifecycle (create pending, Ready, uid mismatch, invalid spec, resource deleted)
turned into the status by kube.crs.status_patch and merged as the API server does, so the
conditions carry what real CRs carry (cleared conditions stay listed as False)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import builders
import pytest
from argocd import HEALTH_LUA, health, lua_literal
from builders import REGISTRY, SPEC, desired
from core_steps import decided
from flux import flux_status

from takoform_operator.core.actions import Create
from takoform_operator.core.decide import Decision, Observation
from takoform_operator.core.host_answer import accepted
from takoform_operator.core.outcome import Outcome
from takoform_operator.core.state import (
    Desired,
    OperationView,
    OpState,
    ResourceView,
    State,
    state_from_status,
)
from takoform_operator.kube.crs import merged_status, status_patch


def reconcile(want: Desired, state: State, seen: Observation) -> Decision:
    """One reconcile as the service runs it: the target claimed, planned, decided."""
    return decided(want, state, seen, REGISTRY)


class Cr:
    """One CR as the API server holds it: spec, metadata and the status the operator wrote."""

    def __init__(self) -> None:
        self.status: dict[str, Any] = {}
        self.generation = 1
        self.annotations: dict[str, str] = {}

    def write(self, outcome: Outcome) -> None:
        patch = status_patch(
            outcome,
            self.status,
            now="2026-11-30T12:00:00Z",
            cr_generation=self.generation,
        )
        self.status = merged_status(self.status, json.loads(json.dumps(patch)))

    def body(self) -> dict[str, Any]:
        return {
            "apiVersion": "storage.takoform.io/v1",
            "kind": "Bucket",
            "metadata": {
                "name": "logs",
                "namespace": "apps",
                "uid": "cr-1",
                "generation": self.generation,
                "annotations": self.annotations,
            },
            "spec": {"space": "team-a", "parameters": SPEC},
            "status": self.status,
        }


def served(create: Create, uid: str, spec: dict[str, Any] | None = None) -> ResourceView:
    return builders.served(
        form_ref=create.target.form_ref,
        uid=uid,
        spec=dict(create.spec) if spec is None else spec,
        creation_key=create.key,
    )


def flux(body: dict[str, Any]) -> str:
    (verdict,) = flux_status([body])
    return verdict.status


def test_a_lifecycle_as_argo_cd_and_flux_see_it() -> None:
    cr, want = Cr(), desired()
    assert health(cr.body()) == ("Progressing", "waiting for the operator to report a status")

    # Create accepted by the host, operation running.
    decision = reconcile(want, State(), Observation())
    assert isinstance(decision.action, Create)
    create = decision.action
    running = OperationView(OpState.RUNNING, resource_uid="u-1", idempotency_key=create.key)
    cr.write(accepted(decision, "op-1", running, want))
    status, message = health(cr.body())
    assert status == "Progressing" and "Reconciling CreatePending" in message
    assert flux(cr.body()) == "InProgress"

    # The operation settled: Ready.
    done = OperationView(OpState.SUCCEEDED, resource_uid="u-1", idempotency_key=create.key)
    state = state_from_status(cr.status)
    decision = reconcile(want, state, Observation(done, served(create, "u-1")))
    cr.write(decision.outcome)
    assert health(cr.body()) == ("Healthy", "Ready Available: host resource is up to date")
    assert flux(cr.body()) == "Current"

    # Paused: Suspended, whatever the conditions say.
    cr.annotations["takoform.io/paused"] = "true"
    assert health(cr.body())[0] == "Suspended"
    cr.annotations["takoform.io/paused"] = "false"
    assert health(cr.body())[0] == "Healthy"

    # A spec edit the operator has not observed yet.
    cr.generation = 2
    assert health(cr.body()) == (
        "Progressing",
        "waiting for the operator to observe generation 2",
    )
    assert flux(cr.body()) == "InProgress"
    cr.generation = 1

    # Deleted and recreated out of band: Blocked UidMismatch, with the remedies.
    state = state_from_status(cr.status)
    decision = reconcile(want, state, Observation(resource=served(create, "u-2")))
    cr.write(decision.outcome)
    status, message = health(cr.body())
    assert status == "Degraded"
    assert message.startswith("Blocked UidMismatch: ") and "Remed" in message and "u-2" in message
    assert flux(cr.body()) == "Failed", "Flux fails at once, not at its timeout"

    # Accepted explicitly: Ready again, Blocked stays listed as False.
    state = state_from_status(cr.status)
    decision = reconcile(
        replace(want, accept_uid="u-2"), state, Observation(resource=served(create, "u-2"))
    )
    cr.write(decision.outcome)
    assert any(c["type"] == "Blocked" and c["status"] == "False" for c in cr.status["conditions"])
    assert health(cr.body())[0] == "Healthy"
    assert flux(cr.body()) == "Current"

    # A spec the definition refuses: Degraded InvalidSpec.
    state = state_from_status(cr.status)
    cr.generation = 3
    bad = replace(want, cr_generation=3, parameters={"region": "eu-west-1", "sizeGiB": "ten"})
    decision = reconcile(bad, state, Observation(resource=served(create, "u-2")))
    cr.write(decision.outcome)
    status, message = health(cr.body())
    assert status == "Degraded" and message.startswith("Degraded InvalidSpec")
    assert flux(cr.body()) == "InProgress"

    # Gone from the host: Drifted, being repaired.
    state = state_from_status(cr.status)
    decision = reconcile(replace(want, cr_generation=3), state, Observation(resource=None))
    cr.write(decision.outcome)
    status, message = health(cr.body())
    assert status == "Progressing" and message.startswith("Drifted ResourceDeleted")
    assert flux(cr.body()) == "InProgress"


@pytest.mark.parametrize(
    ("conditions", "spec", "expected"),
    [
        # An observe-only CR reports drift and never repairs it: it waits for a human.
        (
            [("Ready", "False", "SpecDrift"), ("Drifted", "True", "SpecDrift")],
            {"managementPolicy": "Observe"},
            ("Suspended", "observed only, not repaired: Drifted SpecDrift: m"),
        ),
        # The same drift under Full is being repaired.
        (
            [("Ready", "False", "SpecDrift"), ("Drifted", "True", "SpecDrift")],
            {"managementPolicy": "Full"},
            ("Progressing", "Drifted SpecDrift: m"),
        ),
        # The pause annotation removed, the operator's next look still to come.
        ([("Reconciling", "False", "Paused")], {}, ("Progressing", "waiting for Ready")),
        # A host outage keeps the last known Ready and says Degraded.
        (
            [("Ready", "True", "Available"), ("Degraded", "True", "HostUnavailable")],
            {},
            ("Degraded", "Degraded HostUnavailable: m"),
        ),
        ([("Ready", "False", "Imported")], {}, ("Progressing", "Ready Imported: m")),
    ],
)
def test_conditions_the_core_is_gaining(
    conditions: list[tuple[str, str, str]], spec: dict[str, Any], expected: tuple[str, str]
) -> None:
    body = {
        "metadata": {"generation": 1},
        "spec": spec,
        "status": {
            "observedGeneration": 1,
            "conditions": [
                {"type": t, "status": s, "reason": r, "message": "m"} for t, s, r in conditions
            ],
        },
    }
    assert health(body) == expected


def test_the_lua_literals_carry_any_text_exactly() -> None:
    text = 'quote " backslash \\ newline \n é ✓ "1" {"a":"2"}'
    body = {"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": [
        {"type": "Blocked", "status": "True", "reason": "R", "message": text}
    ]}}  # fmt: skip
    assert health(body) == ("Degraded", f"Blocked R: {text}")
    assert lua_literal(None) == "nil" and lua_literal([1, True]) == "{1, true}"
    assert lua_literal('"1') == '"\\0341"', "an escape never swallows the digit after it"
    assert HEALTH_LUA.is_file()
