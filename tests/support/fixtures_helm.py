"""Real helm for the tests: the ``helm`` fixture (runners.Helm), chart rendering, alert rules."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_kube import KubeTools
from runners import Helm

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "takoform-operator"


@pytest.fixture
def helm(kube_tools: KubeTools, tmp_path: Path) -> Helm:
    """The pinned helm, isolated from the real $HOME: ``helm("template", ...)``."""
    assert kube_tools.helm, "helm not built: run `make tools`"
    return Helm(kube_tools.helm, tmp_path / "helm-home")


def render(helm: Any, *values: str, namespace: str = "ops") -> list[dict[str, Any]]:
    sets = [arg for value in values for arg in ("--set", value)]
    out = helm("template", "t", str(CHART), "--namespace", namespace, *sets).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def refusal(helm: Any, *values: str) -> str:
    """What helm says when it refuses to render the chart with `values` (it must refuse)."""
    sets = [arg for value in values for arg in ("--set", value)]
    proc = helm("template", "t", str(CHART), *sets, check=False)
    assert proc.returncode != 0, f"rendered with {values}"
    return str(proc.stderr)


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(doc["kind"] for doc in docs)


def rule_file(helm: Any, tmp_path: Path, *values: str) -> Path:
    docs = render(helm, "metrics.prometheusRule.enabled=true", *values)
    rule = next(doc for doc in docs if doc["kind"] == "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    return path
