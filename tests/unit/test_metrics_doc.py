"""The metrics table of docs/operator.md is what the operator registers: every takoform_* series
with its labels, none missing, none left over."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client.metrics import MetricWrapperBase

from takoform_operator.metrics import Metrics

DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"
ROW = re.compile(r"^\| `(takoform_[a-z_]+)` \|\s*([^|]*?)\s*\|", re.M)


def documented() -> dict[str, tuple[str, ...]]:
    section = DOC.read_text(encoding="utf-8").split("## Metrics", 1)[1].split("\n## ", 1)[0]
    return {
        name: tuple(label.strip() for label in labels.split(",") if label.strip())
        for name, labels in ROW.findall(section)
    }


def registered() -> dict[str, tuple[str, ...]]:
    """Each metric of Metrics as /metrics names it (a counter gains `_total`)."""
    found = {}
    for value in vars(Metrics()).values():
        if isinstance(value, MetricWrapperBase):
            name = value._name + ("_total" if value._type == "counter" else "")
            found[name] = tuple(value._labelnames)
    return found


def test_the_metrics_table_is_what_the_operator_registers() -> None:
    assert documented() == registered()
