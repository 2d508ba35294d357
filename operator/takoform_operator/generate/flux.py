"""The chart's Flux health checks for the generator: one `healthCheckExprs` entry per Form line
(a Kustomization's `spec.healthCheckExprs`, Flux 2.5 or later), evaluated by Flux's own CEL
status reader in the tests (hack/go/fluxhealth, tests/support/flux.py).

Flux evaluates `inProgress`, then `failed`, then `current`, the first true one wins, none true
is InProgress; a `status.observedGeneration` other than `metadata.generation` is InProgress
before any of them. So: Blocked (a human must choose) is Failed at once, Ready for the current
spec is Current, everything else (pending, drifted, degraded and retried, deleting) waits.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from takoform_spec.identity import FormLine

EXPRS_PATH = "charts/takoform-operator/files/flux-health-check-exprs.yaml"

#: `status.?conditions.orValue([])`: a status without conditions reads as none, not an error.
FAILED = "status.?conditions.orValue([]).exists(c, c.type == 'Blocked' && c.status == 'True')"
CURRENT = (
    "status.?conditions.orValue([]).exists(c, c.type == 'Ready' && c.status == 'True')"
    " && !has(metadata.deletionTimestamp)"
)


def health_check_exprs(lines: Iterable[FormLine]) -> list[dict[str, Any]]:
    return [
        {"apiVersion": line.api_version, "kind": line.kind, "failed": FAILED, "current": CURRENT}
        for line in sorted(lines)
    ]


def render_exprs(lines: Iterable[FormLine], note: str) -> str:
    """A merge patch of a Flux Kustomization: `spec.healthCheckExprs` for every Form line."""
    body = yaml.safe_dump(
        {"spec": {"healthCheckExprs": health_check_exprs(lines)}}, sort_keys=False, width=200
    )
    return (
        f"# {note}.\n"
        "# Regenerate with `make generate`.\n"
        "#\n"
        "# Flux (2.5 or later) health checks for every Takoform Form line: Blocked is Failed,\n"
        "# Ready for the current spec is Current, anything else InProgress (docs/deployment.md,\n"
        "# GitOps). Merge it into a Kustomization that waits for its objects (`wait: true` or\n"
        "# `healthChecks`); a merge patch replaces the whole list, so add entries of your own to\n"
        "# this file first:\n"
        "#\n"
        "#   kubectl patch kustomization NAME --namespace flux-system --type merge \\\n"
        f"#     --patch-file {EXPRS_PATH}\n"
        f"{body}"
    )
