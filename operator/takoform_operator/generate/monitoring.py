"""The chart's kube-prometheus-stack values for the generator: the CustomResourceStateMetrics
configuration with which kube-state-metrics exports every Form CR's conditions and pending
operation as `takoform_cr_*` series, the ones the chart's resource alerts read. The chart renders
the same configuration (its kube-state-metrics ConfigMap) from this file."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from takoform_spec.identity import FormLine

VALUES_PATH = "charts/takoform-operator/files/kube-prometheus-stack-values.yaml"
#: The release name of kube-prometheus-stack in docs/deployment.md: its Prometheus selects the
#: ServiceMonitors and PrometheusRules labelled `release: <this>`.
RELEASE = "kube-prometheus-stack"

_CONDITION_LABELS = {"type": ["type"], "status": ["status"], "reason": ["reason"]}


def _condition_gauge(name: str, help_text: str, value: str) -> dict[str, Any]:
    path = ["status", "conditions"]
    gauge = {"path": path, "labelsFromPath": _CONDITION_LABELS, "valueFrom": [value]}
    return {"name": name, "help": help_text, "each": {"type": "Gauge", "gauge": gauge}}


def resource_state_config(lines: Iterable[FormLine]) -> dict[str, Any]:
    """kube-state-metrics' configuration: one resource per Form line, in CRD file order."""
    resources = [
        {
            "groupVersionKind": {"group": line.group, "version": line.version, "kind": line.kind},
            "metricNamePrefix": "takoform_cr",
            "commonLabels": {"resource": f"{line.plural}.{line.group}"},
            "labelsFromPath": {
                "namespace": ["metadata", "namespace"],
                "name": ["metadata", "name"],
                "host": ["status", "host"],
            },
            "metrics": [
                _condition_gauge(
                    "status_condition",
                    "1 while the condition of the Takoform CR has status True, else 0.",
                    "status",
                ),
                _condition_gauge(
                    "status_condition_last_transition_time_seconds",
                    "When the condition of the Takoform CR last changed status (its"
                    " lastTransitionTime), Unix seconds.",
                    "lastTransitionTime",
                ),
                {
                    "name": "pending_operation_info",
                    "help": "The host operation the Takoform CR waits for"
                    " (status.pendingOperationId; empty operation_id: none).",
                    "each": {
                        "type": "Info",
                        "info": {
                            "path": ["status"],
                            "labelsFromPath": {
                                "operation_id": ["pendingOperationId"],
                                "verb": ["pendingOperationVerb"],
                            },
                        },
                    },
                },
            ],
        }
        for line in sorted(lines, key=lambda line: f"{line.plural}.{line.group}")
    ]
    return {"kind": "CustomResourceStateMetrics", "spec": {"resources": resources}}


def render_values(lines: Iterable[FormLine], note: str) -> str:
    values = {
        "kube-state-metrics": {
            "customResourceState": {"enabled": True, "config": resource_state_config(lines)},
            # The series keep the CR's namespace label, not the scrape target's: the alerts need it.
            "prometheus": {"monitor": {"honorLabels": True}},
        }
    }
    return (
        f"# {note}.\n"
        "# Regenerate with `make generate`.\n"
        "#\n"
        "# kube-prometheus-stack values: its kube-state-metrics exports the Takoform CRs'\n"
        "# conditions, which the chart's resource alerts read (docs/deployment.md, Alerts):\n"
        "#\n"
        f"#   helm upgrade --install {RELEASE} prometheus-community/kube-prometheus-stack \\\n"
        f"#     --namespace monitoring --create-namespace -f {VALUES_PATH}\n"
        f"{yaml.safe_dump(values, sort_keys=False, width=200)}"
    )
