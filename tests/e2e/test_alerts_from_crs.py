"""The resource alerts from the CRs, not from the leader's memory: a real kube-state-metrics
(built from its Go module by hack/tools.sh) with the chart's CustomResourceStateMetrics and only
the chart's RBAC for it, a real Prometheus with the chart's rules, a real API server. No operator
runs at all: what fires, fires from the CRs' status, as it would while the operator is down or
failing over.

The chart is rendered with the values of docs/deployment.md's kube-prometheus-stack recipe, and
kube-state-metrics runs with the configuration of the stack's values file the recipe passes
(files/kube-prometheus-stack-values.yaml, scraped as its ServiceMonitor says): every rule loads,
and a Bucket Blocked ten minutes before any of them started fires at once, saying so; restarting
kube-state-metrics (its series gone, then back) does not start its clock over; a Degraded one a
minute old does not fire; a pending operation fires per operation id; the remedy (Blocked False)
resolves the alert."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_helm import render
from fixtures_kube import REPO, KubeCluster, KubeTools, wait_until
from monitoring import (
    Process,
    alerts,
    ksm_grant,
    kube_state_metrics_binary,
    running_kube_state_metrics,
    running_prometheus,
    samples,
)
from processes import free_port
from recipes import helm_commands, option, set_values
from waiting import wait_for

pytestmark = pytest.mark.kube

RELEASE = "alerts"


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def _bucket(kube: KubeCluster, namespace: str, name: str, status: dict[str, Any]) -> None:
    body = {
        "apiVersion": "storage.takoform.io/v1",
        "kind": "Bucket",
        "metadata": {"name": name},
        "spec": {"space": "team-a", "parameters": {"region": "eu-west-1", "sizeGiB": 1}},
    }
    kube.apply(json.dumps(body), namespace=namespace)
    _status(kube, namespace, name, status)


def _status(kube: KubeCluster, namespace: str, name: str, status: dict[str, Any]) -> None:
    kube.kubectl(
        "patch", "buckets.storage.takoform.io", name, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}), namespace=namespace,
    )  # fmt: skip


def _condition(kind: str, true: bool, reason: str, since: datetime) -> dict[str, Any]:
    return {
        "type": kind,
        "status": "True" if true else "False",
        "reason": reason,
        "message": f"{kind} for the test",
        "lastTransitionTime": _stamp(since),
    }


def test_blocked_alert_fires_from_the_cr_and_keeps_its_clock(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    kube_namespace: str,
    kube_tools: KubeTools,
    helm: Any,
    tmp_path: Path,
) -> None:
    kube, namespace = kube_cluster, kube_namespace
    assert kube_tools.prometheus, "prometheus missing: run `make tools`"
    # docs/deployment.md's kube-prometheus-stack recipe: the operator's values as it sets them
    # (the stack's ServiceAccount for kube-state-metrics aside: this one has a namespace of its
    # own), and the stack's values file for kube-state-metrics and its scrape.
    stack, operator = helm_commands("### With kube-prometheus-stack")
    docs = render(
        helm,
        *set_values(operator),
        "alerts.kubeStateMetrics.serviceAccount.name=ksm",
        f"alerts.kubeStateMetrics.serviceAccount.namespace={namespace}",
        "alerts.stuckOperationFor=2s",
        namespace=namespace,
    )
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == stack[3], "what the stack's Prometheus selects"
    rules = tmp_path / "rules.yaml"
    rules.write_text(json.dumps(rule["spec"]))
    kubeconfig = ksm_grant(kube, namespace, docs)
    stack_ksm = yaml.safe_load((REPO / option(stack, "-f")).read_text())["kube-state-metrics"]
    config = tmp_path / "custom-resource-state.yaml"
    config.write_text(yaml.safe_dump(stack_ksm["customResourceState"]["config"]))

    now = datetime.now(UTC).replace(microsecond=0)
    blocked_since = now - timedelta(minutes=10)
    _bucket(
        kube,
        namespace,
        "blocked",
        {
            "host": "default",
            "conditions": [
                _condition("Blocked", True, "UidMismatch", blocked_since),
                _condition("Ready", False, "UidMismatch", blocked_since),
            ],
        },
    )
    _bucket(
        kube,
        namespace,
        "degraded",
        {
            "host": "edge",
            "conditions": [
                _condition("Degraded", True, "HostUnavailable", now - timedelta(minutes=1))
            ],
        },
    )
    _bucket(kube, namespace, "pending", {
        "host": "default", "pendingOperationId": "op-1", "pendingOperationVerb": "Create",
        "conditions": [_condition("Reconciling", True, "OperationPending", now)],
    })  # fmt: skip

    ksm, ksm_port = kube_state_metrics_binary(), free_port()
    prometheus_config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(rules)],
        "scrape_configs": [{
            "job_name": "kube-state-metrics",
            # As the stack's ServiceMonitor scrapes it: the series' namespace is the CR's.
            "honor_labels": stack_ksm["prometheus"]["monitor"]["honorLabels"],
            "static_configs": [{"targets": [f"127.0.0.1:{ksm_port}"]}],
        }],
    }  # fmt: skip
    with running_prometheus(kube_tools.prometheus, tmp_path / "prom", prometheus_config) as p:
        _assert_loaded(p, rule["spec"])
        blocked = firing(p, "TakoformResourceBlocked", namespace)
        with running_kube_state_metrics(ksm, kubeconfig, config, tmp_path, ksm_port) as exporter:
            _assert_exported(exporter, namespace, blocked_since)
            t0 = time.monotonic()
            (first,) = wait_for(blocked, "TakoformResourceBlocked firing", timeout=60)
            print(f"Blocked firing {time.monotonic() - t0:.1f}s after kube-state-metrics started, "
                  f"activeAt {first['activeAt']}, Blocked since {_stamp(blocked_since)}: "
                  f"{first['annotations']['summary']}")  # fmt: skip
            assert first["labels"]["name"] == "blocked" and first["labels"]["severity"] == "warning"
            assert float(first["value"]) >= 600, "the age is the condition's, not Prometheus'"
            assert first["annotations"]["summary"].startswith(
                f"Bucket {namespace}/blocked has been Blocked for 10m"
            ), first["annotations"]
            assert (
                "kubectl get buckets.storage.takoform.io -n"
                in (first["annotations"]["description"])
            )
            stuck = wait_for(
                firing(p, "TakoformOperationStuck", namespace), "Stuck firing", timeout=60
            )
            assert [(a["labels"]["name"], a["labels"]["operation_id"]) for a in stuck] == [
                ("pending", "op-1")
            ]
            young = (
                firing(p, "TakoformResourceDegraded", namespace, "pending")()
                + firing(p, "TakoformResourceDegraded", namespace)()
            )
            assert young == [], "Degraded for a minute is younger than degradedFor (30m)"
        # kube-state-metrics is gone: its series go stale, the alert resolves with them...
        wait_until(lambda: blocked() == [], "the alert resolved while it is down", 60)
        with running_kube_state_metrics(ksm, kubeconfig, config, tmp_path, ksm_port):
            # ...and fires again as soon as it is back, as old as the CR says, not new.
            (again,) = wait_for(blocked, "Blocked firing after the restart", timeout=60)
            print(f"after the restart: activeAt {again['activeAt']}: "
                  f"{again['annotations']['summary']}")  # fmt: skip
            assert float(again["value"]) > float(first["value"]), "its clock did not start over"

            # The remedy: Blocked turns False; the alert resolves.
            _status(kube, namespace, "blocked", {
                "conditions": [_condition("Blocked", False, "UidMismatch", datetime.now(UTC))],
            })  # fmt: skip
            wait_until(lambda: blocked() == [], "the Blocked alert resolved by the remedy", 60)


def firing(
    prometheus: Process, name: str, namespace: str, state: str = "firing"
) -> Callable[[], list[dict[str, Any]]]:
    """A probe: the alerts `name` in `state` for the CRs of `namespace`."""

    def probe() -> list[dict[str, Any]]:
        return [a for a in alerts(prometheus, name, state) if a["labels"]["namespace"] == namespace]

    return probe


def _assert_loaded(prometheus: Process, spec: dict[str, Any]) -> None:
    """Prometheus serves every rule of the PrometheusRule, none with an error."""
    groups = (prometheus.get("/api/v1/rules") or {})["data"]["groups"]
    loaded = {(g["name"], r["name"]) for g in groups for r in g["rules"]}
    wanted = {
        (g["name"], r.get("alert") or r["record"]) for g in spec["groups"] for r in g["rules"]
    }
    assert loaded == wanted
    assert "TakoformResourceBlocked" in {name for _, name in loaded}, loaded
    assert [r for g in groups for r in g["rules"] if r["health"] == "err"] == []


def _assert_exported(exporter: Process, namespace: str, blocked_since: datetime) -> None:
    """What kube-state-metrics exports is what the rules read (tests/helm/test_alert_rules.py):
    names, labels, and the lastTransitionTime as the value."""
    since = "takoform_cr_status_condition_last_transition_time_seconds"

    def exported() -> list[str]:
        text = exporter.get("/metrics") or ""
        lines = samples(text, since) + samples(text, "takoform_cr_pending_operation_info")
        return [line for line in lines if f'namespace="{namespace}"' in line]

    # blocked: Blocked and Ready; degraded: Degraded; pending: Reconciling and its operation.
    try:
        lines = wait_for(lambda: len(exported()) >= 5 and exported(), "the CRs series", timeout=60)
    except AssertionError:
        print((exporter.get("/metrics") or "")[-5000:])
        raise
    blocked_line = next(
        line for line in lines if 'name="blocked"' in line and 'type="Blocked"' in line
    )
    labels = dict(re.findall(r'(\w+)="([^"]*)"', blocked_line))
    assert labels == {
        "customresource_group": "storage.takoform.io",
        "customresource_kind": "Bucket",
        "customresource_version": "v1",
        "resource": "buckets.storage.takoform.io",
        "namespace": namespace,
        "name": "blocked",
        "host": "default",
        "type": "Blocked",
        "status": "True",
        "reason": "UidMismatch",
    }, blocked_line
    assert float(blocked_line.rsplit(" ", 1)[1]) == blocked_since.timestamp()
    pending = [line for line in lines if line.startswith("takoform_cr_pending_operation_info")]
    assert any('name="pending"' in p and 'operation_id="op-1"' in p for p in pending), pending
