"""The chart's two ready GitOps snippets, both generated from the Form catalog: the argocd-cm
merge patch (one key per Form line, each the shipped Lua exactly) and the Flux
`healthCheckExprs` (one entry per Form line), judged by Flux's own CEL status reader
(hack/go/fluxhealth) on CR bodies: Blocked is Failed, Ready for the current spec is Current,
everything else InProgress. kstatus alone, without the snippet, reads a Blocked CR as Failed
too, from the Stalled condition written beside Blocked."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from argocd import HEALTH_LUA, health
from flux import EXPRS_FILE, flux_status, shipped_exprs

from takoform_operator.generate.argocd import CM_PATCH_PATH, health_key
from takoform_operator.generate.flux import CURRENT, FAILED
from takoform_operator.registry_data import load_registry

REPO = HEALTH_LUA.parents[3]
LINES = sorted(load_registry().lines())


def test_the_argocd_cm_patch_holds_the_shipped_lua_under_every_line() -> None:
    patch = yaml.safe_load((REPO / CM_PATCH_PATH).read_text(encoding="utf-8"))
    assert set(patch) == {"data"}, "a merge patch of the ConfigMap's data only"
    assert list(patch["data"]) == [health_key(line) for line in LINES]
    assert len(patch["data"]) == len(LINES) >= 12
    lua = HEALTH_LUA.read_text(encoding="utf-8")
    for key, script in patch["data"].items():
        assert script == lua, f"{key} is not the shipped script byte for byte"


def test_the_flux_exprs_name_every_line_once() -> None:
    exprs = shipped_exprs()
    assert [(e["apiVersion"], e["kind"]) for e in exprs] == [
        (line.api_version, line.kind) for line in LINES
    ]
    assert all(e["failed"] == FAILED and e["current"] == CURRENT for e in exprs)
    assert "healthCheckExprs" in EXPRS_FILE.read_text(encoding="utf-8")


def _cr(line_index: int, status: dict[str, Any] | None, **metadata: Any) -> dict[str, Any]:
    line = LINES[line_index]
    body: dict[str, Any] = {
        "apiVersion": line.api_version,
        "kind": line.kind,
        "metadata": {"name": "x", "namespace": "apps", "generation": 2, **metadata},
        "spec": {"space": "team-a"},
    }
    if status is not None:
        body["status"] = status
    return body


def _status(*conditions: tuple[str, str], observed: int = 2) -> dict[str, Any]:
    return {
        "observedGeneration": observed,
        "conditions": [
            {"type": t, "status": s, "reason": "R", "message": "m"} for t, s in conditions
        ],
    }


BLOCKED = _status(("Ready", "False"), ("Blocked", "True"), ("Stalled", "True"))
READY = _status(("Ready", "True"), ("Blocked", "False"), ("Stalled", "False"))


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (_cr(0, BLOCKED), "Failed"),
        (_cr(0, READY), "Current"),
        (_cr(0, _status(("Ready", "False"), ("Reconciling", "True"))), "InProgress"),
        (_cr(0, _status(("Ready", "False"), ("Degraded", "True"))), "InProgress"),
        (_cr(0, _status(("Ready", "True"), ("Degraded", "True"))), "Current"),
        # A spec the operator has not observed yet: Flux's built-in generation check.
        (_cr(0, _status(("Ready", "True"), observed=1)), "InProgress"),
        (_cr(0, _status(("Blocked", "True"), observed=1)), "InProgress"),
        # Written, but no conditions yet.
        (_cr(0, {"observedGeneration": 2}), "InProgress"),
        # Being deleted: never Current; Blocked stays Failed.
        (_cr(0, READY, deletionTimestamp="2026-11-30T12:00:00Z"), "InProgress"),
        (_cr(0, BLOCKED, deletionTimestamp="2026-11-30T12:00:00Z"), "Failed"),
        # The last Form line too (every line has its entry).
        (_cr(-1, BLOCKED), "Failed"),
        (_cr(-1, READY), "Current"),
    ],
)
def test_flux_judges_the_conditions(body: dict[str, Any], expected: str) -> None:
    (verdict,) = flux_status([body])
    assert (verdict.status, verdict.error) == (expected, "")


def test_without_the_exprs_kstatus_fails_a_blocked_cr_from_its_stalled_condition() -> None:
    """kstatus alone (no healthCheckExprs, cli-utils, older Flux): Stalled makes a Blocked CR
    Failed, so nothing waits out its timeout on it; without Stalled it would be InProgress."""
    blocked, ready = flux_status([_cr(0, BLOCKED), _cr(0, READY)], exprs=[])
    assert blocked.status == "Failed" and ready.status == "Current"
    without = _status(("Ready", "False"), ("Blocked", "True"))
    (unstalled,) = flux_status([_cr(0, without)], exprs=[])
    assert unstalled.status == "InProgress"
    (with_exprs,) = flux_status([_cr(0, BLOCKED)])
    assert with_exprs.status == "Failed"


def test_no_status_at_all_is_unknown_and_never_current_or_failed() -> None:
    """Before the operator's first status write a CR has no `status` at all; CEL cannot test
    for a missing top-level field, so Flux records the evaluation error as Unknown, which its
    wait treats like InProgress (not terminal: it keeps waiting). Argo CD: Progressing. kstatus
    alone (no exprs) calls it Current before the operator has even seen it."""
    body = _cr(0, None)
    (verdict,) = flux_status([body])
    assert verdict.status == "Unknown" and "no such attribute" in verdict.error
    assert health(body)[0] == "Progressing"
    (alone,) = flux_status([body], exprs=[])
    assert alone.status == "Current", "kstatus alone: nothing says otherwise"


def test_a_refused_expression_is_a_clear_error() -> None:
    bad = [{"apiVersion": "storage.takoform.io/v1", "kind": "Bucket", "current": "status.("}]
    with pytest.raises(AssertionError, match="healthCheckExprs refused"):
        flux_status([_cr(0, READY)], exprs=bad)


def test_the_deployment_doc_shows_the_shipped_entry() -> None:
    doc = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
    section = doc[doc.index("## GitOps") :]
    block = section[section.index("```yaml\n") + 8 :]
    shown = yaml.safe_load(block[: block.index("```")])["spec"]["healthCheckExprs"]
    bucket = [e for e in shipped_exprs() if e["kind"] == "Bucket"]
    assert shown == bucket, "docs/deployment.md shows the generated Bucket entry as shipped"
    assert "flux-health-check-exprs.yaml" in section and "argocd-cm-patch.yaml" in section
