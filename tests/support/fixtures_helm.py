"""Real helm for the tests: an isolated helm runner, chart rendering, the chart's alert rules."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_kube import KubeTools

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "takoform-operator"


@pytest.fixture
def helm(kube_tools: KubeTools, tmp_path: Path) -> Any:
    assert kube_tools.helm, "helm not built: run `make tools`"
    home = tmp_path / "helm-home"  # keep helm's config and cache out of the real $HOME
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }

    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [str(kube_tools.helm), *args], capture_output=True, text=True, env=env, timeout=120
        )
        if check:
            assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stderr}{proc.stdout}"
        return proc

    return run


def render(helm: Any, *values: str, namespace: str = "ops") -> list[dict[str, Any]]:
    sets = [arg for value in values for arg in ("--set", value)]
    out = helm("template", "t", str(CHART), "--namespace", namespace, *sets).stdout
    return [doc for doc in yaml.safe_load_all(out) if doc]


def kinds(docs: list[dict[str, Any]]) -> list[str]:
    return sorted(doc["kind"] for doc in docs)


def rule_file(helm: Any, tmp_path: Path, *values: str) -> Path:
    docs = render(helm, "metrics.prometheusRule.enabled=true", *values)
    rule = next(doc for doc in docs if doc["kind"] == "PrometheusRule")
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rule["spec"], sort_keys=False))
    return path
