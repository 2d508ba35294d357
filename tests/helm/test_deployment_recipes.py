"""docs/deployment.md's recipes, rendered as written. kube-prometheus-stack: its Prometheus selects
the chart's ServiceMonitor and PrometheusRule (the `release:` label of its default selectors),
the chart binds its kube-state-metrics, and the operator's release is the kind recipe's. The kind
recipe's port-forward names the reference host's Service, port and token Secret the chart
renders."""

from __future__ import annotations

import re
import shlex
from typing import Any

import pytest
import yaml
from fixtures_helm import CHART
from fixtures_kube import REPO
from runners import Helm

from takoform_operator.generate import monitoring

pytestmark = pytest.mark.kube

DOC = (REPO / "docs/deployment.md").read_text()


def sh_blocks(heading: str) -> list[str]:
    """The sh blocks of the section under `heading`, continuation lines joined."""
    section = DOC[DOC.index(heading) :].split("\n## ", 1)[0]
    return [block.replace("\\\n", " ") for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def helm_commands(heading: str) -> list[list[str]]:
    """The `helm install` and `helm upgrade` commands of the first sh block under `heading`."""
    commands = [shlex.split(line) for line in sh_blocks(heading)[0].splitlines()]
    return [c for c in commands if c[:1] == ["helm"] and c[1] in ("install", "upgrade")]


def option(command: list[str], *names: str) -> str:
    return next(command[i + 1] for i, arg in enumerate(command) if arg in names)


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
    sets = [
        arg
        for i, value in enumerate(install)
        if install[i - 1] == "--set" and "$(" not in value
        for arg in ("--set", value)
    ]
    namespace = option(install, "-n")
    rendered = helm("template", install[2], str(CHART), "-n", namespace, *sets)
    docs = [doc for doc in yaml.safe_load_all(rendered.stdout) if doc]
    forward = sh_blocks("## Try it in any cluster (kind)")[1]
    service, port = re.findall(rf"-n {namespace} port-forward svc/(\S+) (\d+)", forward)[0]
    secret, key = re.findall(
        rf"-n {namespace} get secret +(\S+) -o jsonpath='{{.data.(\w+)}}'", forward
    )[0]
    assert f"TAKOFORM_HOST_URL=http://127.0.0.1:{port}" in forward
    (rendered_service,) = [
        d for d in docs if d["kind"] == "Service" and d["metadata"]["name"] == service
    ]
    assert [p["port"] for p in rendered_service["spec"]["ports"]] == [int(port)]
    (rendered_secret,) = [
        d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == secret
    ]
    assert key in rendered_secret["data"]
