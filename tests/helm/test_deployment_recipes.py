"""docs/deployment.md's recipes, rendered as written. kube-prometheus-stack: its Prometheus selects
the chart's ServiceMonitor and PrometheusRule (the `release:` label of its default selectors),
the chart binds its kube-state-metrics, and the operator's release is the kind recipe's. The kind
recipe's port-forward names the reference host's Service and port the chart renders, and the
token Secret the plugin finds is the one opted in for that Service's URL."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from fixtures_helm import CHART
from fixtures_kube import REPO
from recipes import helm_commands, option, set_values, sh_blocks
from runners import Helm

from takoform_operator.core.tenancy import credential_entries
from takoform_operator.generate import monitoring
from takoform_operator.settings import Settings

pytestmark = pytest.mark.kube


def test_the_recipe_labels_what_kube_prometheus_stack_selects(helm: Helm) -> None:
    (kind_install,) = helm_commands("## Try it in any cluster (kind)")
    stack, operator = helm_commands("### With kube-prometheus-stack")
    stack_release, stack_namespace = stack[3], option(stack, "-n", "--namespace")
    assert stack_release == monitoring.RELEASE
    assert option(stack, "-f", "--values") == monitoring.VALUES_PATH
    # One operator: the kind recipe's release, upgraded in place.
    assert operator[3] == kind_install[2] == "takoform"
    assert option(operator, "-n") == option(kind_install, "-n")
    assert operator[4] == "charts/takoform-operator"

    sets = operator[operator.index("--set") :]  # the values, after the release's options
    assert set(sets[::2]) == {"--set"}
    rendered = helm("template", operator[3], str(CHART), "-n", option(operator, "-n"), *sets)
    docs: list[dict[str, Any]] = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    by_kind = {doc["kind"]: doc for doc in docs}
    for kind in ("ServiceMonitor", "PrometheusRule"):
        assert by_kind[kind]["metadata"]["labels"]["release"] == stack_release, kind
    binding = next(
        doc
        for doc in docs
        if doc["kind"] == "ClusterRoleBinding"
        and doc["metadata"]["name"].endswith("-state-metrics")
    )
    assert binding["subjects"] == [
        {
            "kind": "ServiceAccount",
            "name": f"{stack_release}-kube-state-metrics",
            "namespace": stack_namespace,
        }
    ]


def test_the_shipped_values_carry_the_configuration_the_chart_renders(helm: Helm) -> None:
    values = yaml.safe_load((REPO / monitoring.VALUES_PATH).read_text())
    rendered = helm(
        "template", "t", str(CHART), "--set", "metrics.prometheusRule.enabled=true",
        "--show-only", "templates/kube-state-metrics.yaml",
    )  # fmt: skip
    config_map = next(doc for doc in yaml.safe_load_all(rendered.stdout) if doc)
    config = yaml.safe_load(config_map["data"]["custom-resource-state.yaml"])
    stack_ksm = values["kube-state-metrics"]
    assert stack_ksm["customResourceState"] == {"enabled": True, "config": config}
    form_crds = [
        p for p in (CHART / "crds").glob("*.takoform.io.yaml") if ".operator." not in p.name
    ]
    exported = {resource["commonLabels"]["resource"] for resource in config["spec"]["resources"]}
    assert exported == {crd.name.removesuffix(".yaml") for crd in form_crds}
    assert stack_ksm["prometheus"]["monitor"]["honorLabels"] is True


def test_the_kind_recipe_port_forwards_to_the_reference_host_the_chart_renders(helm: Helm) -> None:
    (install,) = helm_commands("## Try it in any cluster (kind)")
    # Its values, but the image tag (a command substitution; the image does not matter here).
    sets = [arg for value in set_values(install) for arg in ("--set", value)]
    namespace = option(install, "-n")
    rendered = helm("template", install[2], str(CHART), "-n", namespace, *sets)
    docs = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    forward = sh_blocks("## Try it in any cluster (kind)")[1]
    service, port = re.findall(rf"-n {namespace} port-forward svc/(\S+) (\d+)", forward)[0]
    assert f"kubectl takoform trace bucket/logs --host-url http://127.0.0.1:{port}" in forward
    (rendered_service,) = [
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == service
    ]
    assert [p["port"] for p in rendered_service["spec"]["ports"]] == [int(port)]
    # The plugin's lookup of the implicit host: the one Secret opted in for `default`, at the
    # URL of the Service forwarded, holding the token under the key the operator reads.
    (implicit,) = [
        (d, url)
        for d in docs
        if d["kind"] == "Secret"
        for host, url in credential_entries(d["metadata"].get("annotations"))
        if host == "default"
    ]
    secret, url = implicit
    assert url == f"http://{service}.{namespace}.svc:{port}"
    assert Settings().host_token_secret_key in secret["data"]
