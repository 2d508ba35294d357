"""What users of other charts expect of this one, rendered by real helm: name overrides that rename
every object consistently, an image pinned by digest, extra arguments, volumes and mounts,
topology spread constraints and the ServiceMonitor's relabelings. The schema refuses wrong types,
the templates refuse mounts of no volume; the real API server stores a release with all of them,
and the real promtool accepts the relabelings as a scrape job."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_helm import CHART
from fixtures_kube import REPO, KubeCluster, KubeTools
from runners import run

pytestmark = pytest.mark.kube

DIGEST = "sha256:" + "0123456789abcdef" * 4

#: Every new value at once, with a pod that mounts an extra Secret and spreads over zones.
NEW_VALUES: dict[str, Any] = {
    "image": {"tag": "9.9.9", "digest": DIGEST},
    "extraArgs": ["--selector", "shard=a"],
    "extraEnv": [{"name": "EXTRA", "value": "v"}],
    "extraVolumes": [{"name": "extra-config", "configMap": {"name": "extra", "optional": True}}],
    "extraVolumeMounts": [{"name": "extra-config", "mountPath": "/etc/extra", "readOnly": True}],
    "topologySpreadConstraints": [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
        },
        {
            "maxSkew": 2,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchLabels": {"own": "selector"}},
        },
    ],
}

RELABELINGS = [
    {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node"},
    {
        "sourceLabels": ["__address__"],
        "modulus": 4,
        "targetLabel": "__tmp_hash",
        "action": "hashmod",
    },
]
METRIC_RELABELINGS = [{"sourceLabels": ["__name__"], "regex": "go_.*", "action": "drop"}]

#: Every optional object of the chart on, so every template renders something to rename.
EVERYTHING_ON: dict[str, Any] = {
    "replicaCount": 2,
    "referenceHost": {
        "enabled": True,
        "token": "a-fixed-token-for-equal-renders",
        "grantNamespaces": ["team-x"],
    },
    "grants": [{"name": "g", "spaces": ["s"], "namespaces": {"names": ["team-y"]}}],
    "rbac": {"connectionSecretNamespaces": ["team-z"], "hostSecretNames": ["prod-token"]},
    "host": {"caBundleConfigMap": "ca"},
    "metrics": {
        "serviceMonitor": {
            "enabled": True,
            "relabelings": RELABELINGS,
            "metricRelabelings": METRIC_RELABELINGS,
        },
        "prometheusRule": {"enabled": True},
    },
    "alerts": {"kubeStateMetrics": {"serviceAccount": {"name": "ksm"}}},
    "networkPolicy": {
        "enabled": True,
        "apiServer": {"cidrs": ["10.0.0.1/32"]},
        "hosts": {"cidrs": ["192.0.2.0/24"]},
    },
}


def _helm_template(helm: Any, tmp_path: Path, values: dict[str, Any], check: bool = True) -> Any:
    path = tmp_path / f"values-{uuid.uuid4().hex[:8]}.yaml"
    path.write_text(yaml.safe_dump(values))
    return helm("template", "t", str(CHART), "--namespace", "ops", "-f", str(path), check=check)


def _text(helm: Any, tmp_path: Path, **values: Any) -> str:
    return str(_helm_template(helm, tmp_path, {**EVERYTHING_ON, **values}).stdout)


def _docs(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _deployment(docs: list[dict[str, Any]], name: str) -> dict[str, Any]:
    return next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"] == name)


def _refused(helm: Any, tmp_path: Path, values: dict[str, Any]) -> str:
    proc = _helm_template(helm, tmp_path, values, check=False)
    assert proc.returncode != 0, f"accepted: {values}"
    return str(proc.stderr)


# -- names -----------------------------------------------------------------------------------------


def test_fullname_override_renames_every_object_and_every_reference_to_it(
    helm: Any, tmp_path: Path
) -> None:
    """The render with fullnameOverride is the default render with the old base name replaced
    by the new one, and nothing else changed; the old name is nowhere left."""
    before = _text(helm, tmp_path)
    after = _text(helm, tmp_path, fullnameOverride="acme")
    assert "t-takoform-operator" in before
    assert "t-takoform-operator" not in after
    assert after == before.replace("t-takoform-operator", "acme")
    # Every object of the release carries the new name, except those named by the user: the
    # user ClusterRoles (rbac.userRoles.prefix) and the grants of `grants`.
    own = {"takoform-admin", "takoform-editor", "takoform-viewer", "g"}
    names = {(d["kind"], d["metadata"]["name"]) for d in _docs(after)}
    assert {n for _, n in names if not n.startswith("acme")} == own
    assert ("Service", "acme-metrics") in names and ("Deployment", "acme-reference-host") in names
    # The admission policies are not rendered: they ship in crds/, one per cluster.
    kinds_renamed = {k for k, n in names if n.startswith("acme")}
    assert kinds_renamed >= {
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Deployment", "NetworkPolicy",
        "PodDisruptionBudget", "PrometheusRule", "Role", "RoleBinding", "Secret", "Service",
        "ServiceAccount", "ServiceMonitor", "TakoformSpaceGrant",
    }  # fmt: skip
    assert not any(k.startswith("ValidatingAdmissionPolicy") for k, _ in names)
    docs = _docs(after)
    operator = _deployment(docs, "acme")["spec"]["template"]["spec"]
    assert operator["serviceAccountName"] == "acme"
    env = {e["name"]: e.get("value") for e in operator["containers"][0]["env"]}
    assert env["TAKOFORM_LEASE_NAME"] == "acme"
    assert env["TAKOFORM_CONNECTION_SECRET_ROLE"] == "acme-connection-secrets"
    assert env["TAKOFORM_HOST_URL"] == "http://acme-reference-host.ops.svc:8787"
    assert env["TAKOFORM_HOST_TOKEN_SECRET"] == "acme-reference-host-token"
    roles = {d["metadata"]["name"] for d in docs if d["kind"] in ("Role", "ClusterRole")}
    for binding in (d for d in docs if d["kind"].endswith("RoleBinding")):
        assert binding["roleRef"]["name"] in roles, binding["metadata"]["name"]
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert 'job="acme-metrics"' in yaml.safe_dump(rule["spec"])


def test_name_override_renames_the_objects_and_their_app_label(helm: Any, tmp_path: Path) -> None:
    docs = _docs(_text(helm, tmp_path, nameOverride="tko"))
    names = {d["metadata"]["name"] for d in docs}
    assert "t-tko" in names and "t-tko-metrics" in names and "t-tko-reference-host" in names
    assert not any("takoform-operator" in n for n in names)
    operator = _deployment(docs, "t-tko")
    selector = operator["spec"]["selector"]["matchLabels"]
    assert selector == {"app.kubernetes.io/name": "tko", "app.kubernetes.io/instance": "t"}
    pod_labels = operator["spec"]["template"]["metadata"]["labels"]
    assert pod_labels.items() >= selector.items()
    # Every selector of the operator's pods still selects them.
    service = next(d for d in docs if d["metadata"]["name"] == "t-tko-metrics")
    monitor = next(d for d in docs if d["kind"] == "ServiceMonitor")
    budget = next(d for d in docs if d["kind"] == "PodDisruptionBudget")
    policy = next(d for d in docs if d["kind"] == "NetworkPolicy")
    assert service["spec"]["selector"] == selector
    assert monitor["spec"]["selector"]["matchLabels"] == selector
    assert service["metadata"]["labels"].items() >= selector.items(), "the monitor finds it"
    assert budget["spec"]["selector"]["matchLabels"] == selector
    assert policy["spec"]["podSelector"]["matchLabels"] == selector
    # The reference host's pods keep their own app name: no selector of the operator's picks them.
    host = _deployment(docs, "t-tko-reference-host")
    assert (
        host["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"] == "takoform-host"
    )


def test_the_release_name_holding_the_chart_name_is_the_base_name(helm: Any) -> None:
    out = helm("template", "tko-takoform-operator", str(CHART)).stdout
    names = {d["metadata"]["name"] for d in yaml.safe_load_all(out) if d}
    assert (
        "tko-takoform-operator" in names and "tko-takoform-operator-takoform-operator" not in names
    )


@pytest.mark.parametrize(
    "values",
    [
        {"nameOverride": "Not_A_Label"},
        {"fullnameOverride": "x" * 64},
        {"fullnameOverride": "ends-with-"},
        {"nameOverride": 3},
    ],
)
def test_the_schema_refuses_names_kubernetes_would_refuse(
    helm: Any, tmp_path: Path, values: dict[str, Any]
) -> None:
    assert "schema" in _refused(helm, tmp_path, values).lower()


def test_name_override_may_not_take_the_reference_hosts_app_name(helm: Any, tmp_path: Path) -> None:
    assert "nameOverride" in _refused(helm, tmp_path, {"nameOverride": "takoform-host"})


def test_a_long_full_name_still_gives_a_metrics_service_name_kubernetes_accepts(
    helm: Any, tmp_path: Path
) -> None:
    long = "a" * 63
    docs = _docs(_text(helm, tmp_path, fullnameOverride=long))
    service = next(
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics")
    )
    assert len(service["metadata"]["name"]) <= 63
    rule = next(d for d in docs if d["kind"] == "PrometheusRule")
    assert f'job="{service["metadata"]["name"]}"' in yaml.safe_dump(rule["spec"], width=1000)


# -- the image -------------------------------------------------------------------------------------


def test_the_digest_wins_over_the_tag_for_the_operator_and_the_reference_host(
    helm: Any, tmp_path: Path
) -> None:
    def images(**image: str) -> set[str]:
        docs = _docs(_text(helm, tmp_path, image={"repository": "r.example/tko", **image}))
        return {
            c["image"]
            for d in docs
            if d["kind"] == "Deployment"
            for c in d["spec"]["template"]["spec"]["containers"]
        }

    assert images(tag="9.9.9", digest=DIGEST) == {f"r.example/tko@{DIGEST}"}
    assert images(digest=DIGEST) == {f"r.example/tko@{DIGEST}"}
    assert images(tag="9.9.9") == {"r.example/tko:9.9.9"}
    assert images() == {"r.example/tko:0.1.0"}, "the chart's appVersion"


@pytest.mark.parametrize(
    "digest",
    ["0123456789abcdef", "sha256:xyz", f"@{DIGEST}", "sha256:" + "0" * 63, 256],
)
def test_the_schema_refuses_what_is_no_digest(helm: Any, tmp_path: Path, digest: Any) -> None:
    assert "schema" in _refused(helm, tmp_path, {"image": {"digest": digest}}).lower()


# -- the pod -------------------------------------------------------------------------------------


def test_extra_args_volumes_mounts_and_spread_reach_the_operator_pod(
    helm: Any, tmp_path: Path
) -> None:
    docs = _docs(_text(helm, tmp_path, **NEW_VALUES))
    pod = _deployment(docs, "t-takoform-operator")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["run", "--selector", "shard=a"]
    assert {"name": "EXTRA", "value": "v"} in container["env"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert set(volumes) == {"tmp", "host-ca", "extra-config"}
    assert volumes["extra-config"]["configMap"] == {"name": "extra", "optional": True}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["extra-config"] == NEW_VALUES["extraVolumeMounts"][0]
    assert mounts["tmp"]["mountPath"] == "/tmp", "the chart's own mounts stay"
    zone, host = pod["topologySpreadConstraints"]
    assert zone == {
        **NEW_VALUES["topologySpreadConstraints"][0],
        "labelSelector": {"matchLabels": pod_selector(docs)},
    }
    assert host == NEW_VALUES["topologySpreadConstraints"][1], "a labelSelector of one's own stays"
    # None of them leaks into the reference host's pod.
    reference = _deployment(docs, "t-takoform-operator-reference-host")["spec"]["template"]["spec"]
    assert "topologySpreadConstraints" not in reference
    assert "extra-config" not in {v["name"] for v in reference["volumes"]}
    # Without them, the pod is as before.
    plain = _deployment(_docs(_text(helm, tmp_path)), "t-takoform-operator")["spec"]["template"][
        "spec"
    ]
    assert plain["containers"][0]["args"] == ["run"]
    assert "topologySpreadConstraints" not in plain
    assert {v["name"] for v in plain["volumes"]} == {"tmp", "host-ca"}


def pod_selector(docs: list[dict[str, Any]]) -> dict[str, str]:
    return dict(_deployment(docs, "t-takoform-operator")["spec"]["selector"]["matchLabels"])


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (
            {"extraVolumeMounts": [{"name": "nowhere", "mountPath": "/x"}]},
            '"nowhere" names no volume',
        ),
        (
            {"extraVolumes": [{"name": "tmp", "emptyDir": {}}]},
            'extraVolumes: a volume named "tmp" already exists',
        ),
        (
            {"extraVolumes": [{"name": "a", "emptyDir": {}}, {"name": "a", "emptyDir": {}}]},
            'extraVolumes: a volume named "a" already exists',
        ),
        (
            {
                "extraVolumes": [{"name": "a", "emptyDir": {}}],
                "extraVolumeMounts": [{"name": "a", "mountPath": "/tmp"}],
            },
            'mountPath "/tmp" is already mounted',
        ),
        (
            {
                "host": {"caBundleConfigMap": ""},
                "extraVolumeMounts": [{"name": "host-ca", "mountPath": "/ca"}],
            },
            '"host-ca" names no volume',
        ),
    ],
)
def test_volume_values_that_cannot_work_together_are_refused(
    helm: Any, tmp_path: Path, values: dict[str, Any], named: str
) -> None:
    stderr = _refused(helm, tmp_path, {**EVERYTHING_ON, **values})
    assert named in stderr, stderr


def test_a_mount_of_the_chart_s_own_ca_volume_is_accepted_under_another_path(
    helm: Any, tmp_path: Path
) -> None:
    mount = {"name": "host-ca", "mountPath": "/etc/ssl/extra-ca", "readOnly": True}
    docs = _docs(_text(helm, tmp_path, extraVolumeMounts=[mount]))
    container = _deployment(docs, "t-takoform-operator")["spec"]["template"]["spec"]["containers"][
        0
    ]
    assert mount in container["volumeMounts"]


@pytest.mark.parametrize(
    "values",
    [
        {"extraArgs": "--selector=a"},
        {"extraArgs": [3]},
        {"extraVolumes": {"name": "a"}},
        {"extraVolumes": [{"emptyDir": {}}]},
        {"extraVolumes": [{"name": "Upper_Case", "emptyDir": {}}]},
        {"extraVolumeMounts": [{"name": "a"}]},
        {"extraVolumeMounts": [{"name": "a", "mountPath": "relative"}]},
        {"topologySpreadConstraints": {"maxSkew": 1}},
        {"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "k"}]},
        {
            "topologySpreadConstraints": [
                {"maxSkew": "1", "topologyKey": "k", "whenUnsatisfiable": "ScheduleAnyway"}
            ]
        },
        {
            "topologySpreadConstraints": [
                {"maxSkew": 1, "topologyKey": "k", "whenUnsatisfiable": "Never"}
            ]
        },
        {"metrics": {"serviceMonitor": {"relabelings": {"action": "drop"}}}},
        {"metrics": {"serviceMonitor": {"relabelings": [{"action": "delete"}]}}},
        {"metrics": {"serviceMonitor": {"relabelings": [{"source_labels": ["a"]}]}}},
        {"metrics": {"serviceMonitor": {"metricRelabelings": [{"sourceLabels": "__name__"}]}}},
        {"metrics": {"serviceMonitor": {"metricRelabelings": [{"modulus": "4"}]}}},
    ],
)
def test_the_schema_refuses_wrong_types_of_the_new_values(
    helm: Any, tmp_path: Path, values: dict[str, Any]
) -> None:
    assert "schema" in _refused(helm, tmp_path, values).lower()


# -- the ServiceMonitor ----------------------------------------------------------------------------


def test_relabelings_reach_the_service_monitor_and_promtool_accepts_them(
    helm: Any, kube_tools: KubeTools, tmp_path: Path
) -> None:
    docs = _docs(_text(helm, tmp_path))
    (endpoint,) = next(d for d in docs if d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert endpoint["relabelings"] == RELABELINGS
    assert endpoint["metricRelabelings"] == METRIC_RELABELINGS
    assert endpoint["honorLabels"] is True

    # As the prometheus-operator writes them into the scrape job: snake_case, lower-case action.
    def job_form(config: dict[str, Any]) -> dict[str, Any]:
        out = {re.sub(r"([A-Z])", lambda m: "_" + m[1].lower(), k): v for k, v in config.items()}
        if "action" in out:
            out["action"] = out["action"].lower()
        return out

    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "scrape_configs": [
                    {
                        "job_name": "t-takoform-operator-metrics",
                        "honor_labels": True,
                        "static_configs": [{"targets": ["127.0.0.1:8000"]}],
                        "relabel_configs": [job_form(r) for r in endpoint["relabelings"]],
                        "metric_relabel_configs": [
                            job_form(r) for r in endpoint["metricRelabelings"]
                        ],
                    }
                ]
            }
        )
    )
    assert kube_tools.promtool
    run([kube_tools.promtool, "check", "config", config])
    # Without them, the endpoint is as before.
    plain = _docs(_text(helm, tmp_path, metrics={"serviceMonitor": {"enabled": True}}))
    (endpoint,) = next(d for d in plain if d["kind"] == "ServiceMonitor")["spec"]["endpoints"]
    assert "relabelings" not in endpoint and "metricRelabelings" not in endpoint


def test_promtool_refuses_a_relabeling_prometheus_could_not_run(
    kube_tools: KubeTools, tmp_path: Path
) -> None:
    """The check above can fail: a regex that does not compile is refused."""
    config = tmp_path / "prometheus.yml"
    job = {
        "job_name": "j",
        "static_configs": [{"targets": ["127.0.0.1:8000"]}],
        "metric_relabel_configs": [
            {"source_labels": ["__name__"], "regex": "go_(", "action": "drop"}
        ],
    }
    config.write_text(yaml.safe_dump({"scrape_configs": [job]}))
    assert kube_tools.promtool
    assert run([kube_tools.promtool, "check", "config", config], check=False).returncode != 0


# -- on the real API server ------------------------------------------------------------------------


def test_the_api_server_stores_a_release_with_every_new_value(
    helm: Any, kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str, tmp_path: Path
) -> None:
    """A real `helm install` (no ServiceMonitor: no Prometheus Operator CRDs here): the API
    server validates and stores every object under the new name, the pod spec as rendered."""
    name = f"c{uuid.uuid4().hex[:10]}"
    values = {
        **NEW_VALUES,
        "fullnameOverride": name,
        "watchNamespace": kube_namespace,
        "rbac": {"userRoles": {"create": False}},
        "replicaCount": 2,
        "referenceHost": {"enabled": True},
        "networkPolicy": EVERYTHING_ON["networkPolicy"],
        "commonLabels": {"team": "platform"},
        "revisionHistoryLimit": 3,
        "extraEnvFrom": [{"secretRef": {"name": "proxy-env", "optional": True}}],
        "podDisruptionBudget": {"maxUnavailable": "50%"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    }
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    kubeconfig = f"--kubeconfig={kube_cluster.kubeconfig}"
    helm("install", "conv", str(CHART), kubeconfig, "--namespace", kube_namespace, "-f", str(path))
    try:
        stored = kube_cluster.kubectl_json("get", "deployment", name, namespace=kube_namespace)
        assert stored["spec"]["revisionHistoryLimit"] == 3
        pod = stored["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["envFrom"] == values["extraEnvFrom"]
        assert pod["tolerations"] == values["tolerations"]
        budget = kube_cluster.kubectl_json("get", "pdb", name, namespace=kube_namespace)
        assert budget["spec"]["maxUnavailable"] == "50%"
        assert container["image"] == f"ghcr.io/takoform/takoform-operator@{DIGEST}"
        assert container["args"] == ["run", "--selector", "shard=a"]
        extra = next(v for v in pod["volumes"] if v["name"] == "extra-config")
        assert extra["configMap"]["name"] == "extra"
        mount = next(m for m in container["volumeMounts"] if m["name"] == "extra-config")
        assert mount == {"name": "extra-config", "mountPath": "/etc/extra", "readOnly": True}
        zone, host = pod["topologySpreadConstraints"]
        assert zone["labelSelector"]["matchLabels"] == stored["spec"]["selector"]["matchLabels"]
        assert host["labelSelector"] == {"matchLabels": {"own": "selector"}}
        manifest = helm("get", "manifest", "conv", kubeconfig, "--namespace", kube_namespace).stdout
        released = [d for d in yaml.safe_load_all(manifest) if d]
        assert released and all(d["metadata"]["name"].startswith(name) for d in released)
        kinds = {d["kind"] for d in released}
        assert {"PodDisruptionBudget", "NetworkPolicy", "ClusterRole", "Secret"} <= kinds
        for doc in released:
            namespace = doc["metadata"].get("namespace")
            got = kube_cluster.kubectl_json(
                "get", doc["kind"], doc["metadata"]["name"], namespace=namespace
            )  # fmt: skip
            assert got["metadata"]["labels"]["team"] == "platform", doc["kind"]
    finally:
        helm("uninstall", "conv", kubeconfig, "--namespace", kube_namespace, check=False)


def test_the_defaults_are_what_the_release_workflow_publishes(helm: Any, tmp_path: Path) -> None:
    """The chart's default image, and the README's try-it, name the registry paths
    .github/workflows/release.yml pushes to (ghcr.io of the repository's owner, the owner the
    chart's runbook links name): an install with no image values pulls the released image."""
    workflow = (REPO / ".github/workflows/release.yml").read_text()
    registry = yaml.safe_load(workflow)["env"]["REGISTRY"]
    assert registry == "ghcr.io/${{ github.repository_owner }}"
    helpers = (CHART / "templates/_helpers.tpl").read_text()
    (owner,) = re.findall(r"https://github\.com/([^/]+)/takoform-operator/blob/", helpers)
    published = registry.replace("${{ github.repository_owner }}", owner)
    assert '"docker://${REGISTRY}/takoform-operator:${dest}"' in workflow
    assert 'for dest in "${tag}" "${VERSION}"' in workflow, "the appVersion is a pushed tag"
    assert 'helm push "build/dist/takoform-operator-${VERSION}.tgz" "oci://${REGISTRY}/charts"' in (
        workflow
    )
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    operator = _deployment(_docs(_text(helm, tmp_path)), "t-takoform-operator")
    (container,) = operator["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{published}/takoform-operator:{chart['appVersion']}"
    readme = (REPO / "README.md").read_text()
    try_it = f"helm install takoform oci://{published}/charts/takoform-operator"
    assert f"{try_it} --version {chart['version']}" in readme
