"""Flux's own health evaluation of Takoform CRs: hack/go/fluxhealth (built by hack/tools.sh from
github.com/fluxcd/pkg/runtime) reads CR bodies as kustomize-controller reads the objects it
waits for, judges those a `healthCheckExprs` entry names with Flux's CEL status reader and every
other one with kstatus, and prints the kstatus status of each."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import runners
import yaml

REPO = Path(__file__).resolve().parents[2]
WRAPPER = REPO / "hack" / "go" / "fluxhealth"
EXPRS_FILE = REPO / "charts" / "takoform-operator" / "files" / "flux-health-check-exprs.yaml"


@dataclass(frozen=True)
class Verdict:
    status: str  # Current, InProgress, Failed, Terminating, Unknown, ...
    message: str
    error: str


def _versions() -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in (REPO / "hack" / "versions.env").read_text().splitlines()
        if "=" in line and not line.lstrip().startswith("#")
    )
    return {key.strip(): value.strip() for key, value in pairs}


def build_version() -> str:
    """The version hack/tools.sh caches the build under: the module's, then a key of the
    program's own files (an edit of main.go is a new build)."""
    key = hashlib.sha256(
        b"".join((WRAPPER / name).read_bytes() for name in ("main.go", "go.mod", "go.sum"))
    ).hexdigest()[:12]
    return f"{_versions()['FLUX_RUNTIME_VERSION']}-{key}"


def binary() -> Path:
    """The fluxhealth that hack/tools.sh built for this checkout (same cache key)."""
    explicit = os.environ.get("TAKOFORM_FLUXHEALTH_BIN")
    if explicit:
        directory = Path(explicit)
    else:
        cache = Path(
            os.environ.get("TAKOFORM_TOOLS_CACHE") or Path.home() / ".cache" / "takoform-operator"
        )
        directory = cache / "bin" / f"fluxhealth-{build_version()}"
    found = directory / "fluxhealth"
    if not os.access(found, os.X_OK):
        pytest.fail(f"{found} is missing: run `make tools` (hack/tools.sh)", pytrace=False)
    return found


def shipped_exprs() -> list[dict[str, Any]]:
    """The chart's healthCheckExprs, as a Kustomization would hold them."""
    exprs: list[dict[str, Any]] = yaml.safe_load(EXPRS_FILE.read_text(encoding="utf-8"))["spec"][
        "healthCheckExprs"
    ]
    return exprs


def flux_status(
    bodies: Sequence[dict[str, Any]], exprs: Sequence[dict[str, Any]] | None = None
) -> list[Verdict]:
    """How Flux judges each CR body: with `exprs` (default: the chart's) in the Kustomization's
    `spec.healthCheckExprs`; with `exprs=[]`, kstatus alone (a Kustomization without them)."""
    document = {
        "healthCheckExprs": shipped_exprs() if exprs is None else list(exprs),
        "objects": list(bodies),
    }
    run = runners.run([binary()], input=json.dumps(document), timeout=60)
    answers = json.loads(run.stdout)
    assert len(answers) == len(bodies)
    return [Verdict(a["status"], a.get("message", ""), a.get("error", "")) for a in answers]
