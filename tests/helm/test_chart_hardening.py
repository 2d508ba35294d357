"""The operator pod's hardening in the chart, rendered by real helm: a read-only root with a
bounded /tmp, no privilege, and the NetworkPolicy (on by default, ingress only unless the
cluster's addresses are given), which the real API server accepts. (No network plugin runs
here, so nothing enforces it: docs say so.)"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fixtures_helm import CHART, kinds, refusal, render
from fixtures_kube import KubeCluster

pytestmark = pytest.mark.kube

ON = [
    "networkPolicy.enabled=true",
    "networkPolicy.apiServer.cidrs={10.0.0.1/32,10.0.0.2/32}",
    "networkPolicy.hosts.cidrs={192.0.2.0/24}",
    "networkPolicy.hosts.ports={443,8787}",
]


def _deployment(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return next(doc for doc in docs if doc["kind"] == "Deployment")


def _policy(docs: list[dict[str, Any]]) -> dict[str, Any]:
    (policy,) = [doc for doc in docs if doc["kind"] == "NetworkPolicy"]
    return policy


def test_the_container_runs_unprivileged_on_a_read_only_root_with_a_bounded_tmp(
    helm: Any,
) -> None:
    pod = _deployment(render(helm))["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert context["runAsNonRoot"] is True and pod["securityContext"]["runAsNonRoot"] is True
    assert context["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    # Probes need no shell in the image: they are HTTP.
    assert (
        set(container["livenessProbe"]) >= {"httpGet"} and "exec" not in container["livenessProbe"]
    )
    assert "httpGet" in container["readinessProbe"] and "exec" not in container["readinessProbe"]

    # Every mount is read-only but /tmp, and /tmp is an emptyDir with a size limit.
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = [m for m in container["volumeMounts"] if not m.get("readOnly")]
    assert [m["mountPath"] for m in writable] == ["/tmp"]
    assert volumes[writable[0]["name"]]["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Mi"}

    on_disk = _deployment(render(helm, "tmpVolume.medium=", "tmpVolume.sizeLimit=64Mi"))
    tmp = next(v for v in on_disk["spec"]["template"]["spec"]["volumes"] if v["name"] == "tmp")
    assert tmp["emptyDir"] == {"sizeLimit": "64Mi"}


def test_the_network_policy_is_on_by_default_and_restricts_ingress_only(helm: Any) -> None:
    """Without the cluster's addresses (the chart cannot know them) it admits only the probe and
    metrics ports and leaves egress alone; with both CIDR lists it restricts egress too."""
    policy = _policy(render(helm))
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert "egress" not in policy["spec"]
    assert policy["spec"]["ingress"] == [
        {"ports": [{"protocol": "TCP", "port": 8081}, {"protocol": "TCP", "port": 8000}]}
    ]
    monitoring = "networkPolicy.ingressFrom[0].namespaceSelector.matchLabels.name=monitoring"
    (ingress,) = _policy(render(helm, monitoring))["spec"]["ingress"]
    assert ingress["from"] == [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}]
    assert "NetworkPolicy" not in kinds(render(helm, "networkPolicy.enabled=false"))
    assert kinds(render(helm, *ON)).count("NetworkPolicy") == 1


def test_the_network_policy_admits_only_the_probe_and_metrics_ports_and_reaches_only_its_peers(
    helm: Any,
) -> None:
    docs = render(helm, *ON, "health.port=9440", "metrics.port=9441")
    policy = _policy(docs)
    pod_labels = _deployment(docs)["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items(), "it selects the operator pod"
    assert policy["metadata"]["namespace"] == "ops"
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress", "Egress"]
    (ingress,) = spec["ingress"]
    assert ingress["ports"] == [
        {"protocol": "TCP", "port": 9440},
        {"protocol": "TCP", "port": 9441},
    ]
    assert "from" not in ingress, "any source by default, on those ports only"
    api, hosts, dns = spec["egress"]
    assert api == {
        "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}, {"ipBlock": {"cidr": "10.0.0.2/32"}}],
        "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 6443}],
    }
    assert hosts == {
        "to": [{"ipBlock": {"cidr": "192.0.2.0/24"}}],
        "ports": [{"protocol": "TCP", "port": 443}, {"protocol": "TCP", "port": 8787}],
    }
    assert dns["to"] == [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }
    ]
    assert {(p["protocol"], p["port"]) for p in dns["ports"]} == {("UDP", 53), ("TCP", 53)}

    # Without metrics only the health port; without DNS no DNS rule; peers and extra rules pass.
    narrow = _policy(
        render(
            helm, *ON, "metrics.enabled=false", "networkPolicy.dns.enabled=false",
            "networkPolicy.ingressFrom[0].namespaceSelector.matchLabels.team=monitoring",
            "networkPolicy.extraEgress[0].to[0].ipBlock.cidr=198.51.100.7/32",
        )
    )["spec"]  # fmt: skip
    assert narrow["ingress"] == [
        {
            "ports": [{"protocol": "TCP", "port": 8081}],
            "from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}],
        }
    ]
    assert len(narrow["egress"]) == 3
    assert narrow["egress"][2] == {"to": [{"ipBlock": {"cidr": "198.51.100.7/32"}}]}


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (
            ["networkPolicy.enabled=true", "networkPolicy.hosts.cidrs={192.0.2.0/24}"],
            "networkPolicy.apiServer.cidrs",
        ),
        (
            ["networkPolicy.enabled=true", "networkPolicy.apiServer.cidrs={10.0.0.1/32}"],
            "networkPolicy.hosts.cidrs",
        ),
    ],
)
def test_a_network_policy_without_its_peers_is_refused(
    helm: Any, values: list[str], named: str
) -> None:
    """On, it would cut the operator off its API server or its hosts: refused, by name."""
    said = refusal(helm, *values)
    assert named in said, said


@pytest.mark.parametrize(
    "value",
    [
        "networkPolicy.apiServer.cidrs={10.0.0.1}",
        "networkPolicy.hosts.ports={0}",
        "networkPolicy.dns.namespace=",
        "networkPolicy.egress=open",
        "tmpVolume.sizeLimit=lots",
        "tmpVolume.medium=Disk",
    ],
)
def test_the_values_schema_refuses_wrong_hardening_values(helm: Any, value: str) -> None:
    proc = helm(
        "template",
        "t",
        str(CHART),
        *(a for v in ON for a in ("--set", v)),
        "--set",
        value,
        check=False,
    )
    assert proc.returncode != 0 and "schema" in proc.stderr.lower(), proc.stderr


def test_the_api_server_accepts_the_network_policy_and_the_pod_spec(
    helm: Any, kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    """Applied for real (not a dry run): the API server validates and stores both as rendered."""
    docs = render(helm, *ON, namespace=kube_namespace)
    policy, deployment = _policy(docs), _deployment(docs)
    kube_cluster.apply(json.dumps(policy), namespace=kube_namespace)
    kube_cluster.apply(json.dumps(deployment), namespace=kube_namespace)
    stored = kube_cluster.kubectl_json(
        "get", "networkpolicy", policy["metadata"]["name"], namespace=kube_namespace
    )
    assert stored["spec"]["egress"] == policy["spec"]["egress"]
    assert stored["spec"]["ingress"] == policy["spec"]["ingress"]
    assert stored["spec"]["policyTypes"] == ["Ingress", "Egress"]
    pod = kube_cluster.kubectl_json(
        "get", "deployment", deployment["metadata"]["name"], namespace=kube_namespace
    )["spec"]["template"]["spec"]
    tmp = next(v for v in pod["volumes"] if v["name"] == "tmp")
    assert tmp["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Mi"}
    assert pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"] is True
