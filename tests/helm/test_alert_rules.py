"""The chart's alert rules, rendered by real helm, checked and unit-tested by promtool.

The resource alerts (Blocked, Degraded, OperationStuck) read the takoform_cr_* series that
kube-state-metrics exports from the CRs with the chart's CustomResourceStateMetrics (the names
and labels here are the ones tests/e2e/test_alerts_from_crs.py sees a real kube-state-metrics
export); the operator alerts (HostErrors, OperatorDown) read the operator's own /metrics, as the
ServiceMonitor's scrape job labels them (namespace and job of the release's metrics Service)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_helm import render, rule_file
from fixtures_kube import KubeTools
from runners import run

REPO = Path(__file__).resolve().parents[2]
# alerts.runbookBaseUrl's default: the runbooks of the chart's own version.
RUNBOOKS = "https://github.com/takoform/takoform-operator/blob/v0.1.0/docs/runbooks.md"
# The series of release "t" in namespace "ops" (fixtures_helm.render), as its ServiceMonitor's
# scrape job labels them.
JOB = 'namespace="ops",job="t-takoform-operator-metrics"'
BUCKET = (
    'namespace="demo",name="logs",customresource_group="storage.takoform.io",'
    'customresource_kind="Bucket",customresource_version="v1",'
    'resource="buckets.storage.takoform.io",host="default"'
)
SINCE = "takoform_cr_status_condition_last_transition_time_seconds"
CR_LABELS = {
    "namespace": "demo",
    "name": "logs",
    "customresource_kind": "Bucket",
    "resource": "buckets.storage.takoform.io",
    "host": "default",
}
pytestmark = pytest.mark.kube


def blocked_alert(age: str, name: str = "logs", reason: str = "UidMismatch") -> dict[str, Any]:
    return {
        "exp_labels": {**CR_LABELS, "name": name, "severity": "warning", "reason": reason},
        "exp_annotations": {
            "runbook_url": RUNBOOKS + "#takoformresourceblocked",
            "summary": f"Bucket demo/{name} has been Blocked for {age} ({reason})",
            "description": (
                "The operator will not mutate this resource until a human chooses a remedy. "
                f"Read them with: kubectl get buckets.storage.takoform.io -n demo {name} -o "
                "jsonpath='{.status.conditions[?(@.type==\"Blocked\")].message}'"
            ),
        },
    }


def stuck_alert(operation: str, verb: str) -> dict[str, Any]:
    return {
        "exp_labels": {**CR_LABELS, "severity": "warning", "operation_id": operation,
                       "verb": verb},
        "exp_annotations": {
            "runbook_url": RUNBOOKS + "#takoformoperationstuck",
            "summary": f"Bucket demo/logs has had host operation {operation} ({verb}) pending "
                       "for long",
            "description": (
                "A host operation was accepted and has not settled. Its id is in "
                "status.pendingOperationId (kubectl get buckets.storage.takoform.io -n "
                "demo logs); the operator keeps consulting it and never orphans it."
            ),
        },
    }  # fmt: skip


def down_alert(**labels: str) -> dict[str, Any]:
    return {
        "exp_labels": {"severity": "critical", "release": "t", **labels},
        "exp_annotations": {
            "runbook_url": RUNBOOKS + "#takoformoperatordown",
            "summary": "No replica of takoform-operator release t is scraped while leading",
            "description": (
                "Either no operator pod of the release is scraped at all (down, "
                "crash-looping, not scheduled, or the scrape fails) or none holds the "
                "leader Lease. Nothing reconciles the release's Takoform resources "
                "meanwhile; their Blocked and Degraded alerts keep firing from the CRs."
            ),
        },
    }


def promtool_test(kube_tools: KubeTools, tmp_path: Path, rules: Path, *tests: Any) -> None:
    assert kube_tools.promtool
    path = tmp_path / "alerts_test.yaml"
    path.write_text(
        yaml.safe_dump(
            {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": list(tests)},
            sort_keys=False,
        )
    )
    run([kube_tools.promtool, "test", "rules", path])


def rules_of(helm: Any, tmp_path: Path, *values: str) -> dict[str, dict[str, Any]]:
    groups = yaml.safe_load(rule_file(helm, tmp_path, *values).read_text())["groups"]
    return {rule["alert"]: rule for group in groups for rule in group["rules"]}


def test_alert_rules_pass_promtool(helm: Any, kube_tools: KubeTools, tmp_path: Path) -> None:
    assert kube_tools.promtool
    for values in ([], ["watchNamespace=team-a", "alerts.operatorDownBy={cluster,region}"]):
        rules = rule_file(helm, tmp_path, *values)
        check = run([kube_tools.promtool, "check", "rules", rules])
        assert "6 rules found" in check.stdout


def test_blocked_fires_on_the_crs_own_clock(
    helm: Any, kube_tools: KubeTools, tmp_path: Path
) -> None:
    """The age of the CR's Blocked condition (its lastTransitionTime), not a `for:` clock in
    Prometheus: a CR Blocked since before Prometheus first saw it fires at once, a scrape gap
    (kube-state-metrics restarting) does not start the clock over, and a CR Blocked for less
    than blockedFor does not fire. The summary says for how long; the command names the fully
    qualified resource."""
    rules = rule_file(helm, tmp_path)
    young = BUCKET.replace('name="logs"', 'name="young"')
    fixed = BUCKET.replace('name="logs"', 'name="fixed"')
    promtool_test(kube_tools, tmp_path, rules, {
        "interval": "1m",
        "input_series": [
            # Blocked 10 minutes before the first sample; gone (stale) from 4m to 6m.
            {"series": f'{SINCE}{{{BUCKET},type="Blocked",status="True",reason="UidMismatch"}}',
             "values": "-600x3 stale _x2 -600x10"},
            # Blocked since 2m: younger than blockedFor (5m) until 7m.
            {"series": f'{SINCE}{{{young},type="Blocked",status="True",reason="NameTaken"}}',
             "values": "120x10"},
            # A Blocked condition that is False (the remedy worked) never fires.
            {"series": f'{SINCE}{{{fixed},type="Blocked",status="False",reason="UidMismatch"}}',
             "values": "-6000x10"},
        ],
        "alert_rule_test": [
            {"eval_time": "2m", "alertname": "TakoformResourceBlocked",
             "exp_alerts": [blocked_alert("12m 0s")]},
            {"eval_time": "5m", "alertname": "TakoformResourceBlocked", "exp_alerts": []},
            # Back after the gap: firing at once, 20 minutes Blocked, not a new clock.
            {"eval_time": "10m", "alertname": "TakoformResourceBlocked", "exp_alerts": [
                blocked_alert("20m 0s"), blocked_alert("8m 0s", "young", "NameTaken"),
            ]},
        ],
    })  # fmt: skip


def test_severity_of_the_resource_alerts_is_a_value(
    helm: Any, kube_tools: KubeTools, tmp_path: Path
) -> None:
    rules = rules_of(
        helm,
        tmp_path,
        "alerts.severity.blocked=critical",
        "alerts.severity.degraded=info",
        "alerts.severity.operationStuck=critical",
    )
    severity = {name: rule["labels"]["severity"] for name, rule in rules.items()}
    assert severity == {
        "TakoformResourceBlocked": "critical",
        "TakoformResourceDegraded": "info",
        "TakoformOperationStuck": "critical",
        "TakoformHostErrors": "warning",
        "TakoformOperatorDown": "critical",
        "TakoformShardCrsUnclaimed": "critical",
    }
    defaults = {name: rule["labels"]["severity"] for name, rule in rules_of(helm, tmp_path).items()}
    assert {defaults[n] for n in ("TakoformResourceBlocked", "TakoformResourceDegraded")} == {
        "warning"
    }, "any namespace user can make their own CR Blocked: it pages nobody by default"


def test_the_old_severity_value_is_refused_with_its_new_name(helm: Any) -> None:
    proc = helm(
        "template", "t", str(REPO / "charts" / "takoform-operator"),
        "--set", "alerts.blockedSeverity=critical", check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "alerts.severity.blocked" in proc.stderr, proc.stderr


def test_degraded_fires_after_degraded_for_and_stuck_per_operation(
    helm: Any, kube_tools: KubeTools, tmp_path: Path
) -> None:
    """Degraded for degradedFor (1h30m: durations as Prometheus writes them); one host
    operation pending for stuckOperationFor, each operation id on its own clock."""
    rules = rule_file(helm, tmp_path, "alerts.degradedFor=1h30m", "alerts.stuckOperationFor=20m")
    pending = "takoform_cr_pending_operation_info"
    promtool_test(kube_tools, tmp_path, rules, {
        "interval": "1m",
        "input_series": [
            {"series": f'{SINCE}{{{BUCKET},type="Degraded",status="True",'
                       'reason="HostUnavailable"}',
             "values": "0x100"},
            # op-1 for 25 minutes, then op-2 (the operator moved on: a new operation).
            {"series": f'{pending}{{{BUCKET},operation_id="op-1",verb="Create"}}',
             "values": "1x25 _x30"},
            {"series": f'{pending}{{{BUCKET},operation_id="op-2",verb="Update"}}',
             "values": "_x26 1x30"},
            # An empty operation_id is no operation (kube-state-metrics exports none then).
            {"series": f'{pending}{{{BUCKET.replace("logs", "idle")},operation_id="",verb=""}}',
             "values": "1x60"},
        ],
        "alert_rule_test": [
            {"eval_time": "89m", "alertname": "TakoformResourceDegraded", "exp_alerts": []},
            {"eval_time": "90m", "alertname": "TakoformResourceDegraded", "exp_alerts": [{
                "exp_labels": {**CR_LABELS, "severity": "warning", "reason": "HostUnavailable"},
                "exp_annotations": {
                    "runbook_url": RUNBOOKS + "#takoformresourcedegraded",
                    "summary": "Bucket demo/logs has been Degraded for 1h 30m 0s "
                               "(HostUnavailable)",
                    "description": (
                        "The resource keeps failing to converge (host unavailable or refusing). "
                        "Its Degraded condition says why: kubectl get buckets.storage.takoform.io"
                        " -n demo logs -o jsonpath='{.status.conditions[?(@.type==\"Degraded\")]"
                        ".message}'"
                    ),
                },
            }]},
            {"eval_time": "19m", "alertname": "TakoformOperationStuck", "exp_alerts": []},
            {"eval_time": "21m", "alertname": "TakoformOperationStuck",
             "exp_alerts": [stuck_alert("op-1", "Create")]},
            # op-2 started at 26m: not stuck yet at 40m, stuck at 47m.
            {"eval_time": "40m", "alertname": "TakoformOperationStuck", "exp_alerts": []},
            {"eval_time": "47m", "alertname": "TakoformOperationStuck",
             "exp_alerts": [stuck_alert("op-2", "Update")]},
        ],
    })  # fmt: skip


def test_host_errors_name_the_host(helm: Any, kube_tools: KubeTools, tmp_path: Path) -> None:
    rules = rule_file(helm, tmp_path)
    errors = "takoform_host_errors_total"
    promtool_test(kube_tools, tmp_path, rules, {
        "interval": "1m",
        "input_series": [
            {"series": f'{errors}{{{JOB},kind="Bucket",reason="HostUnavailable",host="edge"}}',
             "values": "0+5x20"},
            {"series": f'{errors}{{{JOB},kind="Bucket",reason="HostUnavailable",host="core"}}',
             "values": "3x20"},
        ],
        "alert_rule_test": [
            {"eval_time": "18m", "alertname": "TakoformHostErrors", "exp_alerts": [{
                "exp_labels": {"severity": "warning", "namespace": "ops",
                               "job": "t-takoform-operator-metrics", "kind": "Bucket",
                               "reason": "HostUnavailable", "host": "edge"},
                "exp_annotations": {
                    "runbook_url": RUNBOOKS + "#takoformhosterrors",
                    "summary": "takoform-operator sees host errors (HostUnavailable) on host edge "
                               "for Bucket",
                    "description": (
                        "Reconciles end on host errors (unavailable or refused) against the "
                        "TakoformHost edge. Check that host (kubectl get "
                        "takoformhosts.operator.takoform.io edge) and the Degraded conditions of "
                        "the affected resources."
                    ),
                },
            }]},
        ],
    })  # fmt: skip


def test_operator_down_fires_per_release_and_per_cluster(
    helm: Any, kube_tools: KubeTools, tmp_path: Path
) -> None:
    """Release t in cluster a leads throughout; in cluster b its leader fails over at 10m
    (shorter than operatorDownFor: nothing) and is gone from 20m: b fires while a is up.
    Another release (another job) leading hides nothing. A release never seen leading fires
    without cluster labels (absent)."""
    rules = rule_file(helm, tmp_path, "alerts.operatorDownFor=5m")
    a, b = f'{JOB},cluster="a"', f'{JOB},cluster="b"'
    other = 'namespace="ops",job="shard-2-takoform-operator-metrics",cluster="b"'
    promtool_test(kube_tools, tmp_path, rules, {
        "interval": "1m",
        "input_series": [
            {"series": f'takoform_leader{{{a},pod="a-0"}}', "values": "1x40"},
            {"series": f'takoform_leader{{{b},pod="b-0"}}', "values": "1x10 _x30"},
            {"series": f'takoform_leader{{{b},pod="b-1"}}', "values": "_x12 1x8 _x20"},
            {"series": f'takoform_leader{{{other},pod="s-0"}}', "values": "1x40"},
        ],
        "alert_rule_test": [
            {"eval_time": "15m", "alertname": "TakoformOperatorDown", "exp_alerts": []},
            {"eval_time": "35m", "alertname": "TakoformOperatorDown", "exp_alerts": [
                down_alert(namespace="ops", job="t-takoform-operator-metrics", cluster="b"),
            ]},
        ],
    }, {
        "interval": "1m",
        "input_series": [
            {"series": f'takoform_leader{{{other},pod="s-0"}}', "values": "1x20"},
        ],
        "alert_rule_test": [
            {"eval_time": "10m", "alertname": "TakoformOperatorDown",
             "exp_alerts": [down_alert()]},
        ],
    })  # fmt: skip


def test_shard_crs_unclaimed_fires_only_when_it_lasts(
    helm: Any, kube_tools: KubeTools, tmp_path: Path
) -> None:
    """A handover leaves CRs unclaimed for a round or two: nothing. A release whose replica
    sees unclaimed CRs for shardUnclaimedFor fires, once per release, with the largest count;
    another release's unclaimed CRs are its own alert."""
    rules = rule_file(helm, tmp_path, "alerts.shardUnclaimedFor=5m")
    unclaimed = "takoform_shard_unclaimed_crs"
    other = 'namespace="ops",job="shard-2-takoform-operator-metrics"'
    promtool_test(kube_tools, tmp_path, rules, {
        "interval": "1m",
        "input_series": [
            {"series": f'{unclaimed}{{{JOB},pod="a"}}', "values": "0 4 0 0 0 0 0 0 3x12"},
            {"series": f'{unclaimed}{{{JOB},pod="b"}}', "values": "0 2 0 0 0 0 0 0 7x12"},
            {"series": f'{unclaimed}{{{other},pod="c"}}', "values": "0x20"},
        ],
        "alert_rule_test": [
            {"eval_time": "6m", "alertname": "TakoformShardCrsUnclaimed", "exp_alerts": []},
            {"eval_time": "12m", "alertname": "TakoformShardCrsUnclaimed", "exp_alerts": []},
            {"eval_time": "14m", "alertname": "TakoformShardCrsUnclaimed", "exp_alerts": [{
                "exp_labels": {"severity": "critical", "release": "t", "namespace": "ops",
                               "job": "t-takoform-operator-metrics"},
                "exp_annotations": {
                    "runbook_url": RUNBOOKS + "#takoformshardcrsunclaimed",
                    "summary": "7 CRs of sharded takoform-operator release t are reconciled by "
                               "no replica",
                    "description": (
                        "A replica of the release has seen, for 5m, CRs that no live replica "
                        "may reconcile: none claims them, or two do (a handover that does not "
                        "finish). Nothing reconciles those CRs meanwhile. Compare the views "
                        "the replicas publish in their Leases (kubectl get lease -n <namespace> "
                        "-l takoform.io/shard-ring -o yaml, annotation takoform.io/shard-view)."
                    ),
                },
            }]},
        ],
    })  # fmt: skip


def test_watch_namespace_scopes_the_resource_alerts(
    helm: Any, kube_tools: KubeTools, tmp_path: Path
) -> None:
    """A release that watches one namespace alerts on that namespace's CRs only."""
    rules = rule_file(helm, tmp_path, "watchNamespace=demo")
    elsewhere = BUCKET.replace('namespace="demo"', 'namespace="prod"')
    promtool_test(kube_tools, tmp_path, rules, {
        "interval": "1m",
        "input_series": [
            {"series": f'{SINCE}{{{BUCKET},type="Blocked",status="True",reason="UidMismatch"}}',
             "values": "-600x3"},
            {"series": f'{SINCE}{{{elsewhere},type="Blocked",status="True",reason="UidMismatch"}}',
             "values": "-600x3"},
        ],
        "alert_rule_test": [
            {"eval_time": "1m", "alertname": "TakoformResourceBlocked",
             "exp_alerts": [blocked_alert("11m 0s")]},
        ],
    })  # fmt: skip


def test_resource_alerts_can_be_left_to_another_release(helm: Any, tmp_path: Path) -> None:
    """With several releases (shards) in one cluster, one ships the resource alerts."""
    assert set(rules_of(helm, tmp_path, "alerts.resourceAlerts=false")) == {
        "TakoformHostErrors",
        "TakoformOperatorDown",
        "TakoformShardCrsUnclaimed",
    }
    docs = render(helm, "metrics.prometheusRule.enabled=true", "alerts.resourceAlerts=false")
    assert not [d for d in docs if d["kind"] == "ConfigMap"]


def test_every_alert_has_an_absolute_runbook_link_to_its_section(helm: Any, tmp_path: Path) -> None:
    runbooks = (REPO / "docs" / "runbooks.md").read_text()
    for name, rule in rules_of(helm, tmp_path).items():
        assert rule["annotations"]["runbook_url"] == f"{RUNBOOKS}#{name.lower()}"
        assert f"\n## {name}\n" in runbooks
    mine = "https://wiki.example.com/takoform/runbooks"
    for name, rule in rules_of(helm, tmp_path, f"alerts.runbookBaseUrl={mine}").items():
        assert rule["annotations"]["runbook_url"] == f"{mine}#{name.lower()}"


@pytest.mark.parametrize(
    ("value", "accepted"),
    [
        ("alerts.blockedFor=1h30m", True),
        ("alerts.blockedFor=1d", True),
        ("alerts.degradedFor=2w", True),
        ("alerts.blockedFor=1500ms", True),
        ("alerts.blockedFor=soon", False),
        ("alerts.blockedFor=5", False),
        ("alerts.runbookBaseUrl=docs/runbooks.md", False),  # a dead link in Alertmanager
        ("alerts.operatorDownBy={cluster-name}", False),  # not a Prometheus label name
    ],
)
def test_values_schema_of_the_alerts(helm: Any, value: str, accepted: bool) -> None:
    proc = helm(
        "template", "t", str(REPO / "charts" / "takoform-operator"),
        "--set", "metrics.prometheusRule.enabled=true", "--set", value, check=False,
    )  # fmt: skip
    assert (proc.returncode == 0) == accepted, proc.stderr
    if not accepted:
        assert "schema" in proc.stderr.lower(), proc.stderr


def test_durations_become_the_seconds_the_rules_compare(helm: Any, tmp_path: Path) -> None:
    rules = rules_of(helm, tmp_path, "alerts.blockedFor=1h30m", "alerts.degradedFor=1d")
    assert rules["TakoformResourceBlocked"]["expr"].endswith(">= 5400")
    assert rules["TakoformResourceDegraded"]["expr"].endswith(">= 86400")
