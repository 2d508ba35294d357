"""The values schema against real helm: the chart works as the dependency of an umbrella chart
(helm passes it `global`), each convention other charts offer is accepted and does what it says in
the rendered objects, and typos inside the Kubernetes types it takes (resources, tolerations,
security contexts) or an empty grant are refused with helm's error naming them. The Kubernetes
definitions the schema keeps are compared with the real API server's OpenAPI."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_helm import CHART
from fixtures_kube import KubeCluster

pytestmark = pytest.mark.kube

SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def _template(helm: Any, tmp_path: Path, values: dict[str, Any], check: bool = True) -> Any:
    path = tmp_path / f"values-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(values))
    return helm("template", "t", str(CHART), "--namespace", "ops", "-f", str(path), check=check)


def _docs(helm: Any, tmp_path: Path, values: dict[str, Any]) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(_template(helm, tmp_path, values).stdout) if d]


def _one(docs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind]
    return doc


# -- as a subchart ---------------------------------------------------------------------------------


def _umbrella(helm: Any, tmp_path: Path) -> Path:
    """An umbrella chart depending on this one through a file:// repository, built by helm."""
    umbrella = tmp_path / "umbrella"
    umbrella.mkdir()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    (umbrella / "Chart.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v2",
                "name": "platform",
                "version": "1.0.0",
                "dependencies": [
                    {
                        "name": chart["name"],
                        "version": chart["version"],
                        "repository": f"file://{CHART}",
                    }
                ],
            }
        )
    )
    helm("dependency", "build", str(umbrella))
    assert (umbrella / "charts" / f"{chart['name']}-{chart['version']}.tgz").is_file()
    return umbrella


def test_an_umbrella_chart_templates_with_empty_values_and_with_global_set(
    helm: Any, tmp_path: Path
) -> None:
    umbrella = _umbrella(helm, tmp_path)
    out = helm("template", "p", str(umbrella), "--namespace", "ops").stdout
    assert "kind: Deployment" in out
    values = tmp_path / "umbrella-values.yaml"
    values.write_text(
        yaml.safe_dump(
            {
                "global": {"imageRegistry": "registry.example", "imagePullSecrets": ["pull"]},
                "takoform-operator": {"commonLabels": {"team": "platform"}},
            }
        )
    )
    docs = [
        d
        for d in yaml.safe_load_all(
            helm("template", "p", str(umbrella), "--namespace", "ops", "-f", str(values)).stdout
        )
        if d
    ]
    assert docs and all(d["metadata"]["labels"]["team"] == "platform" for d in docs)


# -- each convention, accepted and rendered --------------------------------------------------------

EVERYTHING = {
    "replicaCount": 2,
    "referenceHost": {"enabled": True, "token": "a-fixed-token-for-equal-renders"},
    "grants": [{"name": "g", "spaces": ["s"], "namespaces": {"names": ["team-y"]}}],
    "metrics": {"serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}},
    "alerts": {"kubeStateMetrics": {"serviceAccount": {"name": "ksm"}}},
    "networkPolicy": {
        "enabled": True,
        "apiServer": {"cidrs": ["10.0.0.1/32"]},
        "hosts": {"cidrs": ["192.0.2.0/24"]},
    },
}


def test_common_labels_are_on_every_object_and_the_pods(helm: Any, tmp_path: Path) -> None:
    labels = {"team": "platform", "example.com/cost-centre": "c42"}
    docs = _docs(helm, tmp_path, {**EVERYTHING, "commonLabels": labels})
    assert len({d["kind"] for d in docs}) >= 12
    for doc in docs:
        assert labels.items() <= doc["metadata"]["labels"].items(), doc["metadata"]["name"]
    for deployment in (d for d in docs if d["kind"] == "Deployment"):
        pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert labels.items() <= pod_labels.items()
        # The selector stays what it was: a label added later cannot orphan the pods.
        assert not labels.keys() & deployment["spec"]["selector"]["matchLabels"].keys()


def test_a_pod_label_wins_over_a_common_label_of_the_same_key(helm: Any, tmp_path: Path) -> None:
    out = _template(
        helm, tmp_path, {"commonLabels": {"team": "common"}, "podLabels": {"team": "pod"}}
    ).stdout
    deployment = _one([d for d in yaml.safe_load_all(out) if d], "Deployment")
    assert deployment["metadata"]["labels"]["team"] == "common"
    assert deployment["spec"]["template"]["metadata"]["labels"]["team"] == "pod"
    assert out.count("team: pod") == 1 and out.count("team: common") == out.count("\nkind: ")


@pytest.mark.parametrize(
    ("pdb", "spec"),
    [
        ({}, {"minAvailable": 1}),
        ({"minAvailable": "50%"}, {"minAvailable": "50%"}),
        ({"minAvailable": 2}, {"minAvailable": 2}),
        ({"maxUnavailable": 1}, {"maxUnavailable": 1}),
        ({"maxUnavailable": "25%"}, {"maxUnavailable": "25%"}),
    ],
)
def test_the_disruption_budget_takes_min_available_or_max_unavailable(
    helm: Any, tmp_path: Path, pdb: dict[str, Any], spec: dict[str, Any]
) -> None:
    budget = _one(
        _docs(helm, tmp_path, {"replicaCount": 3, "podDisruptionBudget": pdb}),
        "PodDisruptionBudget",
    )
    assert {k: v for k, v in budget["spec"].items() if k != "selector"} == spec


def test_the_service_monitor_takes_a_scrape_timeout_and_a_namespace(
    helm: Any, tmp_path: Path
) -> None:
    monitor = {"enabled": True, "interval": "1m30s", "scrapeTimeout": "45s"}
    docs = _docs(helm, tmp_path, {"metrics": {"serviceMonitor": monitor}})
    (endpoint,) = _one(docs, "ServiceMonitor")["spec"]["endpoints"]
    assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("1m30s", "45s")
    # Same namespace: no namespaceSelector (the ServiceMonitor's own namespace is the default).
    assert "namespaceSelector" not in _one(docs, "ServiceMonitor")["spec"]
    elsewhere = _one(
        _docs(helm, tmp_path, {"metrics": {"serviceMonitor": {**monitor, "namespace": "mon"}}}),
        "ServiceMonitor",
    )
    assert elsewhere["metadata"]["namespace"] == "mon"
    assert elsewhere["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    service = _one(docs, "Service")
    assert service["metadata"]["namespace"] == "ops"
    assert elsewhere["spec"]["selector"]["matchLabels"].items() <= (
        service["metadata"]["labels"].items()
    )


def test_a_duration_of_several_units_is_an_interval_and_an_alert_delay(
    helm: Any, tmp_path: Path
) -> None:
    values = {
        "metrics": {"serviceMonitor": {"enabled": True, "interval": "1m30s"}},
        "alerts": {"blockedFor": "1h30m", "hostErrorsFor": "2m30s"},
    }
    docs = _docs(
        helm,
        tmp_path,
        {**values, "metrics": {**values["metrics"], "prometheusRule": {"enabled": True}}},
    )
    assert _one(docs, "ServiceMonitor")["spec"]["endpoints"][0]["interval"] == "1m30s"
    rules = {
        r["alert"]: r
        for g in _one(docs, "PrometheusRule")["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert "5400" in rules["TakoformResourceBlocked"]["expr"]
    assert rules["TakoformHostErrors"]["for"] == "2m30s"


def test_extra_env_from_and_the_revision_history_reach_the_deployment(
    helm: Any, tmp_path: Path
) -> None:
    env_from = [
        {"secretRef": {"name": "proxy-env"}},
        {"configMapRef": {"name": "tuning", "optional": True}, "prefix": "TUNING_"},
    ]
    deployment = _one(
        _docs(helm, tmp_path, {"extraEnvFrom": env_from, "revisionHistoryLimit": 3}), "Deployment"
    )
    assert deployment["spec"]["revisionHistoryLimit"] == 3
    assert deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"] == env_from
    default = _one(_docs(helm, tmp_path, {}), "Deployment")
    assert default["spec"]["revisionHistoryLimit"] == 10
    assert "envFrom" not in default["spec"]["template"]["spec"]["containers"][0]


def test_the_kubernetes_types_accept_what_kubernetes_accepts(helm: Any, tmp_path: Path) -> None:
    values = {
        "resources": {
            "requests": {"cpu": "250m", "memory": "1.5Gi", "ephemeral-storage": 1e9},
            "limits": {"memory": "2Gi", "hugepages-2Mi": "64Mi", "example.com/fpga": 1},
        },
        "tolerations": [
            {"key": "dedicated", "operator": "Equal", "value": "ops", "effect": "NoSchedule"},
            {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
        ],
        "podSecurityContext": {
            "runAsNonRoot": True,
            "runAsUser": 65532,
            "fsGroup": 65532,
            "fsGroupChangePolicy": "OnRootMismatch",
            "supplementalGroups": [1000],
            "seccompProfile": {"type": "Localhost", "localhostProfile": "profiles/op.json"},
            "sysctls": [{"name": "net.ipv4.ip_local_port_range", "value": "1024 65535"}],
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
            "appArmorProfile": {"type": "RuntimeDefault"},
            "seLinuxOptions": {"level": "s0:c123,c456"},
        },
    }
    pod = _one(_docs(helm, tmp_path, values), "Deployment")["spec"]["template"]["spec"]
    assert pod["tolerations"] == values["tolerations"]
    # Merged into the chart's defaults, as helm merges maps.
    assert values["podSecurityContext"].items() <= pod["securityContext"].items()
    assert values["securityContext"].items() <= pod["containers"][0]["securityContext"].items()
    assert pod["containers"][0]["resources"]["limits"]["example.com/fpga"] == 1


# -- typos, refused --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "error"),
    [
        ({"resources": {"requets": {"cpu": "1"}}}, "additional properties 'requets'"),
        ({"resources": {"limits": {"memroy": "1Gi"}}}, "additional properties 'memroy'"),
        ({"resources": {"limits": {"memory": "1 GB"}}}, "/resources/limits/memory"),
        ({"referenceHost": {"resources": {"limit": {}}}}, "additional properties 'limit'"),
        ({"tolerations": [{"key": "a", "opertor": "Exists"}]}, "additional properties 'opertor'"),
        ({"tolerations": [{"operator": "exists"}]}, "/tolerations/0/operator"),
        ({"tolerations": [{"effect": "NoSchedul"}]}, "/tolerations/0/effect"),
        ({"tolerations": {"key": "a"}}, "/tolerations"),
        ({"podSecurityContext": {"runAsNonroot": True}}, "additional properties 'runAsNonroot'"),
        ({"podSecurityContext": {"runAsUser": "65532"}}, "/podSecurityContext/runAsUser"),
        (
            {"podSecurityContext": {"seccompProfile": {"type": "runtimedefault"}}},
            "/podSecurityContext/seccompProfile/type",
        ),
        ({"securityContext": {"capabilities": {"dorp": ["ALL"]}}}, "additional properties 'dorp'"),
        (
            {"securityContext": {"readOnlyRootFileSystem": True}},
            "additional properties 'readOnlyRootFileSystem'",
        ),
        (
            {"grants": [{"name": "g", "spaces": ["s"], "namespaces": {}}]},
            "/grants/0/namespaces",
        ),
        (
            {"grants": [{"name": "g", "spaces": ["s"], "namespaces": {"names": []}}]},
            "/grants/0/namespaces/names",
        ),
        (
            {"grants": [{"name": "g", "spaces": ["s"], "namespaces": {"selector": {}}}]},
            "/grants/0/namespaces/selector",
        ),
        (
            {
                "grants": [
                    {"name": "g", "spaces": ["s"], "namespaces": {"selector": {"matchLabel": {}}}}
                ]
            },
            "additional properties 'matchLabel'",
        ),
        ({"commonLabels": {"helm.sh/chart": "mine"}}, "/commonLabels/helm.sh~1chart"),
        ({"commonLabels": {"not a key": "v"}}, "additional properties 'not a key'"),
        ({"commonLabels": {"team": 3}}, "/commonLabels/team"),
        ({"podDisruptionBudget": {"minAvailable": "half"}}, "/podDisruptionBudget/minAvailable"),
        ({"metrics": {"serviceMonitor": {"scrapeTimeout": "10"}}}, "scrapeTimeout"),
        ({"metrics": {"serviceMonitor": {"interval": "1.5m"}}}, "/metrics/serviceMonitor/interval"),
        (
            {"metrics": {"serviceMonitor": {"namespace": "Mon"}}},
            "/metrics/serviceMonitor/namespace",
        ),
        ({"extraEnvFrom": [{"secretref": {"name": "a"}}]}, "additional properties 'secretref'"),
        ({"extraEnvFrom": [{"secretRef": {}}]}, "/extraEnvFrom/0"),
        ({"revisionHistoryLimit": -1}, "/revisionHistoryLimit"),
    ],
)
def test_the_schema_refuses_a_typo_and_names_it(
    helm: Any, tmp_path: Path, values: dict[str, Any], error: str
) -> None:
    run = _template(helm, tmp_path, values, check=False)
    assert run.returncode != 0, f"accepted: {values}"
    assert "values don't meet the specifications of the schema" in run.stderr, run.stderr
    assert error in run.stderr, run.stderr


@pytest.mark.parametrize(
    ("values", "error"),
    [
        (
            {"replicaCount": 2, "podDisruptionBudget": {"minAvailable": 1, "maxUnavailable": 1}},
            "podDisruptionBudget: set minAvailable or maxUnavailable, not both",
        ),
        (
            {"metrics": {"serviceMonitor": {"enabled": True, "scrapeTimeout": "1m"}}},
            "scrapeTimeout (1m) must not exceed its interval (30s)",
        ),
    ],
)
def test_the_templates_refuse_what_the_schema_cannot_compare(
    helm: Any, tmp_path: Path, values: dict[str, Any], error: str
) -> None:
    run = _template(helm, tmp_path, values, check=False)
    assert run.returncode != 0 and error in run.stderr, run.stderr


# -- the kept Kubernetes definitions, against the API server's own -------------------------------

#: Each definition of the schema and the OpenAPI schema(s) of the type it describes.
KUBERNETES_TYPES = {
    "resourceRequirements": ["io.k8s.api.core.v1.ResourceRequirements"],
    "toleration": ["io.k8s.api.core.v1.Toleration"],
    "podSecurityContext": ["io.k8s.api.core.v1.PodSecurityContext"],
    "securityContext": ["io.k8s.api.core.v1.SecurityContext"],
    "capabilities": ["io.k8s.api.core.v1.Capabilities"],
    "profile": ["io.k8s.api.core.v1.SeccompProfile", "io.k8s.api.core.v1.AppArmorProfile"],
    "seLinuxOptions": ["io.k8s.api.core.v1.SELinuxOptions"],
    "windowsOptions": ["io.k8s.api.core.v1.WindowsSecurityContextOptions"],
    "envFromSource": ["io.k8s.api.core.v1.EnvFromSource"],
    "labelSelector": ["io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"],
}


def test_the_schema_s_kubernetes_definitions_are_the_api_server_s_types(
    kube_cluster: KubeCluster,
) -> None:
    """Every field the API server's type has, and no other; the enums it declares, and where
    the schema narrows one, a subset of it. A Kubernetes upgrade that adds a field fails here
    rather than in a user's install."""
    served = json.loads(kube_cluster.kubectl("get", "--raw", "/openapi/v3/api/v1").stdout)
    components = served["components"]["schemas"]
    definitions = SCHEMA["definitions"]
    for name, types in KUBERNETES_TYPES.items():
        ours = definitions[name]
        assert ours["additionalProperties"] is False, name
        for type_name in types:
            theirs = components[type_name]
            assert set(ours["properties"]) == set(theirs["properties"]), (name, type_name)
            assert set(ours.get("required", [])) == set(theirs.get("required", [])), name
            for field, spec in theirs["properties"].items():
                enum = spec.get("enum") or (spec.get("allOf") or [{}])[0].get("enum")
                mine = ours["properties"][field].get("enum")
                if enum and mine:
                    assert set(mine) - {""} <= set(enum), (name, field, enum)
