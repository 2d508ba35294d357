"""The Helm chart, rendered by real helm, applied to the real API server; the RBAC it grants is
proven sufficient by running the operator with its token. Its alert rules: test_alert_rules.py."""

from __future__ import annotations

import json
import os
import re
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_helm import CHART, kinds, refusal, render
from fixtures_kube import KubeCluster, drop_namespace, wait_until
from operator_process import condition_of, cr_status, is_ready, operator_process
from processes import free_port
from tenancy import granted

from takoform_operator.generate.bounds import BOUNDS_POLICY
from takoform_operator.registry_data import load_registry

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.kube


def test_chart_lints_strictly(helm: Any) -> None:
    helm("lint", "--strict", str(CHART))


#: The operator's roles, the tenancy and user ClusterRoles, and the Role of the leader Lease.
#: With nothing granted, the connection-Secret ClusterRole (the sixth) is bound nowhere.
RBAC_KINDS = ["ClusterRole"] * 6 + ["ClusterRoleBinding"] * 2 + ["Role", "RoleBinding"] * 2


def test_optional_objects_render_only_when_metrics_and_their_flag_are_on(helm: Any) -> None:
    # The NetworkPolicy is on by default (ingress only to the probe and metrics ports).
    base = sorted([*RBAC_KINDS, "Deployment", "NetworkPolicy", "Service", "ServiceAccount"])
    assert kinds(render(helm)) == base
    monitoring = ["metrics.serviceMonitor.enabled=true", "metrics.prometheusRule.enabled=true"]
    # The PrometheusRule comes with the kube-state-metrics configuration its resource alerts read
    # (a ConfigMap) and the read-only ClusterRole kube-state-metrics needs for it.
    assert kinds(render(helm, *monitoring)) == sorted(
        [*base, "PrometheusRule", "ServiceMonitor", "ConfigMap", "ClusterRole"]
    )
    off = kinds(render(helm, "metrics.enabled=false", *monitoring))
    assert off == sorted([*RBAC_KINDS, "Deployment", "NetworkPolicy", "ServiceAccount"])
    # The scraper's ClusterRole, and its binding when ServiceAccounts are named.
    reader = ["metrics.auth.reader.create=true"]
    assert kinds(render(helm, *reader)) == sorted([*base, "ClusterRole"])
    bound = kinds(render(helm, *reader, "metrics.auth.reader.serviceAccounts[0].name=prom"))
    assert bound == sorted([*base, "ClusterRole", "ClusterRoleBinding"])
    assert kinds(render(helm, *reader, "metrics.enabled=false")).count("ClusterRole") == 6
    without_user_roles = kinds(render(helm, "rbac.userRoles.create=false"))
    assert without_user_roles.count("ClusterRole") == 3
    assert "PodDisruptionBudget" in kinds(render(helm, "replicaCount=2"))
    assert "ServiceAccount" not in kinds(render(helm, "serviceAccount.create=false"))


def test_watch_namespace_narrows_rbac_to_a_role(helm: Any) -> None:
    docs = render(helm, "watchNamespace=team-a", "rbac.userRoles.create=false")
    role = next(
        doc
        for doc in docs
        if doc["kind"] == "Role"
        and doc["metadata"]["namespace"] != "ops"
        and not doc["metadata"]["name"].endswith("-leader-election")
    )
    assert role["metadata"]["namespace"] == "team-a"
    # Cluster-wide, the operator may only read the tenancy policy and namespace labels.
    # Plus the connection-Secret rights, which only a RoleBinding (in team-a) makes effective.
    cluster_roles = [
        doc
        for doc in docs
        if doc["kind"] == "ClusterRole" and not doc["metadata"]["name"].endswith("-secrets")
    ]
    assert [r["metadata"]["name"] for r in cluster_roles] == ["t-takoform-operator-tenancy"]
    assert _grants(cluster_roles[0]) == {
        ("operator.takoform.io", "takoformhosts", "get"),
        ("operator.takoform.io", "takoformhosts", "list"),
        ("operator.takoform.io", "takoformhosts", "watch"),
        ("operator.takoform.io", "takoformspacegrants", "get"),
        ("operator.takoform.io", "takoformspacegrants", "list"),
        ("operator.takoform.io", "takoformspacegrants", "watch"),
        ("operator.takoform.io", "takoformhosts/status", "get"),
        ("operator.takoform.io", "takoformhosts/status", "patch"),
        ("operator.takoform.io", "takoformspacegrants/status", "get"),
        ("operator.takoform.io", "takoformspacegrants/status", "patch"),
        *(("operator.takoform.io", "takoformbindings", verb) for verb in BINDING_VERBS),
        ("", "namespaces", "get"),
        ("", "namespaces", "list"),
        ("", "namespaces", "watch"),
        # /metrics behind authentication (metrics.auth): the scraper's token reviewed.
        ("authentication.k8s.io", "tokenreviews", "create"),
        ("authorization.k8s.io", "subjectaccessreviews", "create"),
        # The evidence of ownership, in every namespace: read only (kube.bindings).
        *(
            (line.group, line.plural, verb)
            for line in load_registry().lines()
            for verb in ("get", "list")
        ),
    }
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TAKOFORM_NAMESPACE"] == "team-a"


#: What the operator does with TakoformBindings: create is the claim, replace and delete carry a
#: resourceVersion, get/list/watch feed its cache. No deletecollection.
BINDING_VERBS = ("get", "list", "watch", "create", "update", "patch", "delete")


@pytest.mark.parametrize(
    "values",
    [(), ("watchNamespace=team-a",)],
    ids=["all namespaces", "one namespace"],
)
def test_the_operator_writes_bindings_through_a_cluster_role_in_either_mode(
    helm: Any, values: tuple[str, ...]
) -> None:
    """TakoformBindings are cluster-scoped: a Role in the watched namespace could not grant them,
    so the operator gets them from a ClusterRole bound to its ServiceAccount also when it
    watches one namespace; nowhere does it get deletecollection."""
    docs = render(helm, *values)
    granting = [
        doc
        for doc in docs
        if doc["kind"] in ("Role", "ClusterRole")
        and any(resource == "takoformbindings" for _, resource, _ in _grants(doc))
    ]
    names = {doc["metadata"]["name"]: doc for doc in granting}
    assert set(names) == {"t-takoform-operator-tenancy", "takoform-admin"}
    operator = names["t-takoform-operator-tenancy"]
    assert operator["kind"] == "ClusterRole"
    verbs = {
        v for g, r, v in _grants(operator) if (g, r) == ("operator.takoform.io", "takoformbindings")
    }
    assert verbs == set(BINDING_VERBS)
    (binding,) = [
        doc
        for doc in docs
        if doc["kind"] == "ClusterRoleBinding"
        and doc["roleRef"]["name"] == operator["metadata"]["name"]
    ]
    assert binding["roleRef"]["kind"] == "ClusterRole"
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "t-takoform-operator", "namespace": "ops"}
    ]


def _grants(role: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_rbac_covers_exactly_the_shipped_crds(helm: Any) -> None:
    docs = render(helm)
    role = next(
        doc
        for doc in docs
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == "t-takoform-operator"
    )
    granted = {(group, resource) for group, resource, _ in _grants(role)}
    editor = {
        (g, r)
        for g, r, _ in _grants(next(d for d in docs if d["metadata"]["name"] == "takoform-editor"))
    }
    for crd in _shipped_crds(REPO / "crds"):
        group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
        if group == "operator.takoform.io":
            # The policy (and the bindings the operator writes through its tenancy ClusterRole):
            # not in this role, never for namespace users.
            assert (group, plural) not in granted and (group, plural) not in editor
            continue
        assert (group, plural) in granted and (group, f"{plural}/status") in granted
        assert (group, plural) in editor
    assert all(verb != "delete" for rule in role["rules"] for verb in rule["verbs"])


def _shipped_crds(directory: Path) -> list[dict[str, Any]]:
    """The CRDs of a crds/ folder (beside them: the bindings' admission policy)."""
    documents = [
        d for p in sorted(directory.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())
    ]
    return [d for d in documents if d["kind"] == "CustomResourceDefinition"]


CONNECTION_SECRET_RULE = {
    "apiGroups": [""],
    "resources": ["secrets"],
    "verbs": ["get", "create", "patch"],
}


@pytest.mark.parametrize(
    ("values", "served"),
    [
        ((), []),
        (("watchNamespace=team-a",), ["team-a"]),
        (
            (
                "grants[0].name=g",
                "grants[0].spaces={a}",
                "grants[0].namespaces.names={team-b,team-a}",
                "rbac.connectionSecretNamespaces={team-c,team-a}",
            ),
            ["team-a", "team-b", "team-c"],
        ),
    ],
    ids=["all namespaces, nothing granted", "one namespace", "the namespaces granted"],
)
def test_secret_rights_are_host_tokens_by_name_and_connection_secrets_where_served(
    helm: Any, values: tuple[str, ...], served: list[str]
) -> None:
    docs = render(helm, "rbac.hostSecretNames={prod-token}", *values)
    secret_rules = sorted(
        (
            (doc["kind"], doc["metadata"]["name"], doc["metadata"].get("namespace"), rule)
            for doc in docs
            if doc["kind"] in ("Role", "ClusterRole")
            for rule in doc["rules"]
            if "secrets" in rule["resources"]
        ),
        key=lambda row: str(row),
    )
    # Host tokens: `get` by name in the operator's namespace. Connection Secrets: a ClusterRole
    # that grants nothing by itself (get/create/patch; no list, watch or delete), bound by a
    # RoleBinding only in the namespaces served: never cluster-wide, so kube-system and every
    # namespace not granted stay out of reach.
    host_tokens = (
        "Role",
        "t-takoform-operator-host-secrets",
        "ops",
        {
            "apiGroups": [""],
            "resources": ["secrets"],
            "verbs": ["get"],
            "resourceNames": ["prod-token", "takoform-host-token"],
        },
    )
    connection = ("ClusterRole", "t-takoform-operator-connection-secrets", None)
    expected = sorted([host_tokens, (*connection, CONNECTION_SECRET_RULE)], key=str)
    assert secret_rules == expected
    bindings = [doc for doc in docs if doc["kind"] in ("RoleBinding", "ClusterRoleBinding")]
    to_connection = [b for b in bindings if b["roleRef"]["name"] == connection[1]]
    assert all(b["kind"] == "RoleBinding" for b in to_connection)
    assert sorted(b["metadata"]["namespace"] for b in to_connection) == served
    for binding in to_connection:
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": "t-takoform-operator", "namespace": "ops"}
        ]
    # The operator is told the role's name and its own, for the remedy it prints.
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    env = {
        e["name"]: e.get("value")
        for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TAKOFORM_CONNECTION_SECRET_ROLE"] == connection[1]
    assert env["TAKOFORM_SERVICE_ACCOUNT"] == "ops:t-takoform-operator"


@pytest.mark.parametrize(
    ("values", "names"),
    [
        ((), ["takoform-host-token"]),
        (("host.tokenSecret.name=prod-token",), ["prod-token"]),
        (
            ("host.tokenSecret.name=prod-token", "rbac.hostSecretNames={a-token,b-client}"),
            ["a-token", "b-client", "prod-token"],
        ),
        (("referenceHost.enabled=true",), ["t-takoform-operator-reference-host-token"]),
    ],
    ids=["default", "host.tokenSecret", "and hostSecretNames", "the reference host's"],
)
def test_the_operator_reads_only_the_secrets_the_values_name(
    helm: Any, values: tuple[str, ...], names: list[str]
) -> None:
    """Never every Secret of its namespace: by default only the implicit host's token."""
    docs = render(helm, *values)
    role = next(d for d in docs if d["metadata"]["name"] == "t-takoform-operator-host-secrets")
    assert role["kind"] == "Role" and role["metadata"]["namespace"] == "ops"
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": names}
    ]


def test_the_host_is_https_unless_insecure_is_said_and_its_token_is_read_by_name(
    helm: Any,
) -> None:
    refused = helm("template", "t", str(CHART), "--set", "host.url=http://h:8787", check=False)
    assert refused.returncode != 0
    assert "host.url must be https; a plain http host needs host.insecure: true" in refused.stderr
    docs = render(helm, "host.url=http://h:8787", "host.insecure=true")
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
    assert env["TAKOFORM_HOST_INSECURE"] == "true"
    assert env["TAKOFORM_HOST_TOKEN_SECRET"] == "takoform-host-token"
    assert env["TAKOFORM_HOST_TOKEN_SECRET_KEY"] == "token"
    # Not mounted: a mounted Secret would bypass the opt-in the operator checks.
    assert "TAKOFORM_HOST_TOKEN_FILE" not in env
    assert all("secret" not in volume for volume in pod.get("volumes") or [])
    default = render(helm)
    env = {
        e["name"]: e.get("value")
        for doc in default
        if doc["kind"] == "Deployment"
        for e in doc["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TAKOFORM_HOST_INSECURE"] == "false"


def test_user_roles_aggregate_into_edit_and_view_and_only_admins_manage_the_policy(
    helm: Any,
) -> None:
    docs = {doc["metadata"]["name"]: doc for doc in render(helm) if doc["kind"] == "ClusterRole"}
    labels = docs["takoform-editor"]["metadata"]["labels"]
    assert labels["rbac.authorization.k8s.io/aggregate-to-edit"] == "true"
    assert (
        docs["takoform-viewer"]["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"]
        == "true"
    )
    assert {verb for _, _, verb in _grants(docs["takoform-viewer"])} == {"get", "list", "watch"}
    policy = {
        ("operator.takoform.io", "takoformhosts"),
        ("operator.takoform.io", "takoformspacegrants"),
        ("operator.takoform.io", "takoformbindings"),
    }
    admin = _grants(docs["takoform-admin"])
    full = {"get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"}
    for group, resource in policy:
        assert {v for g, r, v in admin if (g, r) == (group, resource)} == full, resource
    for name in ("takoform-editor", "takoform-viewer"):
        assert not policy & {(g, r) for g, r, _ in _grants(docs[name])}
        assert all(r != "secrets" for _, r, _ in _grants(docs[name]))
        # No rule names the bindings, nor reaches them by a wildcard or the policy's group:
        # which CR owns which host resource is not for namespace users to read or change.
        for rule in docs[name]["rules"]:
            assert "takoformbindings" not in rule["resources"] and "*" not in rule["resources"]
            assert "operator.takoform.io" not in rule["apiGroups"] and "*" not in rule["apiGroups"]


def test_labels_follow_the_conventions(helm: Any) -> None:
    for doc in render(helm):
        labels = doc["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "takoform-operator"
        assert labels["app.kubernetes.io/managed-by"] == "Helm"
    deployment = next(doc for doc in render(helm) if doc["kind"] == "Deployment")
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert set(selector) == {"app.kubernetes.io/name", "app.kubernetes.io/instance"}


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("host.url=not-a-url", "the host URL must be http(s)"),
        ("logFormat=xml", "json or text"),
        ("alerts.blockedFor=soon", "durations are Prometheus durations"),
        ("metrics.port=70000", "ports stop at 65535"),
        ("imagePullPolicy=Always", "an unknown top-level value is a typo, not a setting"),
        ("backoff.capSeconds=0", "the back-off cap is a positive number of seconds"),
    ],
)
def test_values_schema_rejects_wrong_values(helm: Any, value: str, why: str) -> None:
    said = refusal(helm, value)
    assert "schema" in said.lower(), (why, said)


@pytest.mark.parametrize(
    ("values", "named"),
    [
        (["leaderElection.renewDeadlineSeconds=15"], "leaderElection.renewDeadlineSeconds"),
        (["leaderElection.retrySeconds=10"], "leaderElection.retrySeconds"),
        (["metrics.port=8081", "health.port=8081"], "metrics.port and health.port"),
        (["backoff.baseSeconds=10", "backoff.capSeconds=5"], "backoff.capSeconds"),
    ],
)
def test_values_that_cannot_work_together_are_refused(
    helm: Any, values: list[str], named: str
) -> None:
    said = refusal(helm, *values)
    assert named in said, said


def test_two_replicas_need_leader_election(helm: Any) -> None:
    said = refusal(helm, "replicaCount=2", "leaderElection.enabled=false")
    assert "leaderElection" in said, said
    deployment = next(doc for doc in render(helm, "replicaCount=2") if doc["kind"] == "Deployment")
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    local = render(helm, "replicaCount=2", "hostNetwork=true")
    deployment = next(doc for doc in local if doc["kind"] == "Deployment")
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 0, "maxUnavailable": 1}


@pytest.mark.parametrize("values", [(), ("leaderElection.enabled=false",)])
def test_every_replica_knows_its_pod_name_for_its_events(helm: Any, values: tuple[str]) -> None:
    """The pod's name signs its Events (reportingInstance), elected or not."""
    env = {e["name"]: e for e in _operator_env(render(helm, *values))}
    assert env["TAKOFORM_POD_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.name"}}


def test_sharding_makes_every_replica_an_active_shard(helm: Any) -> None:
    """sharding.enabled: N replicas are N shards (leader election off, whatever its value),
    with the Lease timings and the pod's name; the Role may list and write the shard Leases."""
    docs = render(helm, "replicaCount=3", "sharding.enabled=true", "sharding.key=namespace")
    env = {e["name"]: e.get("value") for e in _operator_env(docs)}
    assert env["TAKOFORM_SHARDING"] == "hash" and env["TAKOFORM_SHARD_KEY"] == "namespace"
    assert env["TAKOFORM_LEADER_ELECTION"] == "false"
    assert env["TAKOFORM_LEASE_SECONDS"] == "15" and "TAKOFORM_POD_NAME" in env
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    assert deployment["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    roles = {doc["metadata"]["name"]: doc for doc in docs if doc["kind"] == "Role"}
    assert "t-takoform-operator-leader-election" not in roles
    rules = roles["t-takoform-operator-shards"]["rules"]
    assert rules == [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                      "verbs": ["create", "get", "list", "update", "delete"]}]  # fmt: skip
    plain = {e["name"]: e.get("value") for e in _operator_env(render(helm))}
    assert "TAKOFORM_SHARDING" not in plain and plain["TAKOFORM_LEADER_ELECTION"] == "true"
    # Two replicas without leader election are fine when they are shards.
    render(helm, "replicaCount=2", "leaderElection.enabled=false", "sharding.enabled=true")
    proc = helm("template", "t", str(CHART), "--set", "sharding.key=uid", check=False)
    assert proc.returncode != 0 and "schema" in proc.stderr.lower(), proc.stderr
    proc = helm(
        "template", "t", str(CHART), "--set", "sharding.enabled=true",
        "--set", "leaderElection.enabled=false", "--set", "leaderElection.retrySeconds=10",
        check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "leaderElection.retrySeconds" in proc.stderr, proc.stderr


def _pod_spec(docs: list[Any]) -> dict[str, Any]:
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    return dict(deployment["spec"]["template"]["spec"])


def test_replicas_spread_over_nodes_and_a_users_affinity_wins(helm: Any) -> None:
    assert "affinity" not in _pod_spec(render(helm)), "one replica: nothing to spread"
    preferred = _pod_spec(render(helm, "replicaCount=2"))["affinity"]["podAntiAffinity"]
    (weighted,) = preferred["preferredDuringSchedulingIgnoredDuringExecution"]
    term = weighted["podAffinityTerm"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "takoform-operator",
        "app.kubernetes.io/instance": "t",
    }
    required = _pod_spec(render(helm, "replicaCount=2", "replicaAntiAffinity=required"))
    (hard,) = required["affinity"]["podAntiAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert hard == term
    assert "affinity" not in _pod_spec(render(helm, "replicaCount=2", "replicaAntiAffinity=none"))
    own = _pod_spec(render(helm, "replicaCount=2", "affinity.nodeAffinity.x=y"))["affinity"]
    assert own == {"nodeAffinity": {"x": "y"}}
    refused = helm("template", "t", str(CHART), "--set", "replicaAntiAffinity=always", check=False)
    assert refused.returncode != 0 and "schema" in refused.stderr.lower()


def test_bind_address_defaults_to_the_pods_ip_with_host_network(helm: Any) -> None:
    def bind(*values: str) -> dict[str, Any]:
        env = _pod_spec(render(helm, *values))["containers"][0]["env"]
        return dict(next(e for e in env if e["name"] == "TAKOFORM_BIND_ADDRESS"))

    # The node's address, not every interface of the node.
    assert bind("hostNetwork=true")["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert bind()["value"] == "0.0.0.0", "its own network namespace: every address of the pod"
    assert bind("hostNetwork=true", "bindAddress=127.0.0.1")["value"] == "127.0.0.1"
    probe = _pod_spec(render(helm, "hostNetwork=true"))["containers"][0]["readinessProbe"]
    assert "host" not in probe["httpGet"], "the kubelet probes the pod's IP, where it listens"


def test_pod_values_reach_the_pod(helm: Any) -> None:
    docs = render(
        helm,
        "podAnnotations.a=one", "podLabels.team=x", "priorityClassName=high", "logFormat=text",
        "logLevel=DEBUG", "hostNetwork=true", "extraEnv[0].name=EXTRA", "extraEnv[0].value=v",
        "serviceAccount.name=ops", "serviceAccount.annotations.k=v",
        "backoff.baseSeconds=2", "backoff.capSeconds=120",
    )  # fmt: skip
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    pod = deployment["spec"]["template"]
    assert pod["metadata"]["annotations"] == {"a": "one"}
    assert pod["metadata"]["labels"]["team"] == "x"
    spec = pod["spec"]
    assert spec["priorityClassName"] == "high" and spec["hostNetwork"] is True
    assert spec["serviceAccountName"] == "ops"
    container = spec["containers"][0]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["TAKOFORM_LOG_FORMAT"] == "text" and env["TAKOFORM_LOG_LEVEL"] == "DEBUG"
    assert env["EXTRA"] == "v" and "TAKOFORM_HOST_TOKEN" not in env
    assert (env["TAKOFORM_BACKOFF_BASE_SECONDS"], env["TAKOFORM_BACKOFF_CAP_SECONDS"]) == (
        "2",
        "120",
    )
    assert env["TAKOFORM_HOST_TOKEN_SECRET"] == "takoform-host-token"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    account = next(doc for doc in docs if doc["kind"] == "ServiceAccount")
    assert account["metadata"] == {**account["metadata"], "name": "ops", "annotations": {"k": "v"}}
    bindings = [doc for doc in docs if doc["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    assert all(b["subjects"][0]["name"] == "ops" for b in bindings)


def test_shard_selector_reaches_the_process_and_names_its_own_lease(helm: Any) -> None:
    plain = render(helm)
    env = {e["name"]: e.get("value") for e in _operator_env(plain)}
    assert "TAKOFORM_SHARD_SELECTOR" not in env
    sharded = render(helm, "shardSelector=takoform.io/shard in (a)", "leaderElection.enabled=true")
    env = {e["name"]: e.get("value") for e in _operator_env(sharded)}
    assert env["TAKOFORM_SHARD_SELECTOR"] == "takoform.io/shard in (a)"
    # Each shard is its own release, hence its own Lease: two shards never wait on one leader.
    assert env["TAKOFORM_LEASE_NAME"] == next(
        doc["metadata"]["name"] for doc in sharded if doc["kind"] == "Deployment"
    )


def test_reconcile_slots_default_to_the_operators_own_and_reach_the_process(helm: Any) -> None:
    from takoform_operator.settings import Settings

    code = Settings(host_token="t")
    env = {e["name"]: e.get("value") for e in _operator_env(render(helm))}
    assert env["TAKOFORM_MAX_CONCURRENT_RECONCILES"] == str(code.max_concurrent_reconciles)
    assert env["TAKOFORM_RECONCILE_SCHEDULING"] == code.reconcile_scheduling
    assert "TAKOFORM_MAX_RECONCILES_PER_HOST" not in env, "the code's default: 3/4 of the slots"
    assert code.max_reconciles_per_host is None
    set_ = ("reconciles.concurrency=32", "reconciles.perHost=8", "reconciles.scheduling=fifo")
    env = {e["name"]: e.get("value") for e in _operator_env(render(helm, *set_))}
    assert env["TAKOFORM_MAX_CONCURRENT_RECONCILES"] == "32"
    assert env["TAKOFORM_MAX_RECONCILES_PER_HOST"] == "8"
    assert env["TAKOFORM_RECONCILE_SCHEDULING"] == "fifo"
    for wrong in ("reconciles.perHost=0", "reconciles.scheduling=lifo"):
        refused = helm("template", "t", str(CHART), "--set", wrong, check=False)
        assert refused.returncode != 0 and "schema" in refused.stderr.lower(), wrong


def _operator_env(docs: list[Any]) -> list[Any]:
    deployment = next(doc for doc in docs if doc["kind"] == "Deployment")
    return list(deployment["spec"]["template"]["spec"]["containers"][0]["env"])


def test_service_monitor_keeps_the_crs_namespace_label(helm: Any) -> None:
    docs = render(helm, "metrics.serviceMonitor.enabled=true")
    monitor = next(doc for doc in docs if doc["kind"] == "ServiceMonitor")
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True


def test_chart_crds_are_the_generated_ones() -> None:
    for path in sorted((REPO / "crds").glob("*.yaml")):
        assert (CHART / "crds" / path.name).read_text() == path.read_text()
    assert (CHART / "crds" / "takoformbindings.operator.takoform.io.yaml").is_file()


def test_crds_upgrade_applies_every_chart_crd(
    kube_cluster: KubeCluster, kube_crds: list[Any]
) -> None:
    """`make crds-upgrade` (hack/crds.sh) applies every file of the chart's crds/, the policy
    CRDs and the TakoformBinding too, and waits until each is Established; the admission
    policies beside them (the bindings' protection, the Forms' bounds) are applied as well."""
    env = {
        **os.environ,
        "KUBECONFIG": str(kube_cluster.kubeconfig),
        "KUBECTL": str(kube_cluster.kubectl_bin),
    }
    applied = subprocess.run(
        [str(REPO / "hack" / "crds.sh")], capture_output=True, text=True, env=env, timeout=120
    )
    assert applied.returncode == 0, applied.stderr + applied.stdout
    for policy in ("takoformbinding-protection.operator.takoform.io", BOUNDS_POLICY):
        for kind in ("validatingadmissionpolicy", "validatingadmissionpolicybinding"):
            assert f"{kind}.admissionregistration.k8s.io/{policy} serverside-applied" in (
                applied.stdout
            ), (kind, policy)
    for crd in _shipped_crds(CHART / "crds"):
        name = crd["metadata"]["name"]
        assert f"customresourcedefinition.apiextensions.k8s.io/{name} serverside-applied" in (
            applied.stdout
        ), name
        assert f"customresourcedefinition.apiextensions.k8s.io/{name} condition met" in (
            applied.stdout
        ), name


# -- on the real API server ------------------------------------------------------------------------


@pytest.fixture
def installed(
    helm: Any, kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str
) -> Iterator[str]:
    kubeconfig = f"--kubeconfig={kube_cluster.kubeconfig}"
    # Deny by default: the chart creates the grant its example (a Zone in team-a) needs.
    grant = {
        "name": f"{kube_namespace}-team-a",
        "spaces": ["team-a"],
        "namespaces": {"names": [kube_namespace]},
    }
    helm(
        "install", "tko", str(CHART), kubeconfig, "--namespace", kube_namespace,
        "--set", f"watchNamespace={kube_namespace}",
        "--set-json", "grants=" + json.dumps([grant]),
        # The scraper's ClusterRole, bound to a ServiceAccount `scraper` of the namespace.
        "--set", "metrics.auth.reader.create=true",
        "--set", "metrics.auth.reader.serviceAccounts[0].name=scraper",
    )  # fmt: skip
    yield kube_namespace
    helm("uninstall", "tko", kubeconfig, "--namespace", kube_namespace, check=False)


#: A Certificate CR: a Form with sensitive outputs, so its operator writes a connection Secret.
CERTIFICATE = {
    "apiVersion": "pki.takoform.io/v1",
    "kind": "Certificate",
    "metadata": {"name": "api"},
    "spec": {
        "space": "team-a",
        "parameters": {"commonName": "api.example.com", "issuer": "internal-ca"},
    },
}


def test_chart_installs_and_its_rbac_is_enough_to_run_the_operator(
    installed: str, kube_cluster: KubeCluster, host_factory: Any, tmp_path: Path
) -> None:
    """No kubelet runs the Deployment here, so the operator runs as a local process that
    authenticates as the chart's ServiceAccount: what the chart grants is all it gets."""
    namespace = installed
    deployment = kube_cluster.kubectl_json(
        "get", "deployment", "tko-takoform-operator", namespace=namespace
    )
    assert deployment["spec"]["template"]["spec"]["serviceAccountName"] == "tko-takoform-operator"
    token = kube_cluster.kubectl(
        "create", "token", "tko-takoform-operator", namespace=namespace
    ).stdout
    kubeconfig = kube_cluster.token_kubeconfig(token.strip())
    host = host_factory(commit_delay=0.05)
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a")
    log = tmp_path / "operator.log"
    zone = {
        "apiVersion": "dns.takoform.io/v1",
        "kind": "Zone",
        "metadata": {"name": "example-org"},
        "spec": {"space": "team-a", "parameters": {"domain": "example.org"}},
    }

    def ready() -> bool:
        found = kube_cluster.kubectl_json("get", "zone", "example-org", namespace=namespace)
        conditions = (found.get("status") or {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)

    # The ServiceAccount cannot list Secrets, nor read any outside its namespace; it reads the
    # implicit host's token Secret by name (any other of this namespace only because it is also
    # the watched one, where connection Secrets are written).
    sa = f"--as=system:serviceaccount:{namespace}:tko-takoform-operator"
    for args in (["list", "secrets", "-n", namespace], ["get", "secrets", "-A"]):
        assert kube_cluster.kubectl("auth", "can-i", *args, sa, check=False).stdout.strip() == "no"
    assert (
        kube_cluster.kubectl(
            "auth", "can-i", "get", "secret/takoform-host-token", "-n", namespace, sa
        ).stdout.strip()
        == "yes"
    )

    # It writes TakoformBindings cluster-wide although it watches one namespace (they are
    # cluster-scoped), never by collection; a namespace user with `edit` cannot even list them.
    def can(*args: str) -> str:
        return str(kube_cluster.kubectl("auth", "can-i", *args, check=False).stdout.strip())

    for verb in ("create", "update", "delete", "watch"):
        assert can(verb, "takoformbindings.operator.takoform.io", sa) == "yes", verb
    assert can("deletecollection", "takoformbindings.operator.takoform.io", sa) == "no"
    user = f"{namespace}-editor"
    kube_cluster.kubectl(
        "create", "rolebinding", user, "--clusterrole=edit", f"--user={user}", namespace=namespace
    )
    wait_until(
        lambda: (
            can("create", "buckets.storage.takoform.io", "-n", namespace, f"--as={user}") == "yes"
        ),
        "edit to aggregate takoform-editor",
        timeout=30,
    )
    for verb in ("list", "get", "update", "delete"):
        assert can(verb, "takoformbindings.operator.takoform.io", f"--as={user}") == "no", verb
    # The grant the Zone needs comes from the chart's `grants` value (see `installed`).
    grant = kube_cluster.kubectl_json("get", "takoformspacegrant", f"{namespace}-team-a")
    assert grant["spec"]["hostRef"] == "default"
    with operator_process(kubeconfig, host, namespace, log, METRICS_PORT="0"):
        kube_cluster.apply(json.dumps(zone), namespace=namespace)
        try:
            wait_until(ready, "the Zone Ready under the chart's RBAC", timeout=60)
        except BaseException:
            print(log.read_text(errors="replace")[-4000:])
            raise
        kube_cluster.kubectl("delete", "zone", "example-org", "--timeout=60s", namespace=namespace)

        # The grant's status, written under the same rights: its selector is not too broad.
        def grant_checked() -> bool:
            found = kube_cluster.kubectl_json("get", "takoformspacegrant", f"{namespace}-team-a")
            too_broad = condition_of(found.get("status") or {}, "SelectorTooBroad")
            return too_broad.get("status") == "False"

        wait_until(grant_checked, "the grant's status under the chart's RBAC", timeout=60)
        # A Form with sensitive outputs: its connection Secret is written under the same rights.
        kube_cluster.apply(json.dumps(CERTIFICATE), namespace=namespace)

        def connection_secret() -> bool:
            found = kube_cluster.kubectl(
                "get", "secret", "api-connection", "-o", "json", namespace=namespace, check=False
            )
            return found.returncode == 0 and "privateKey" in json.loads(found.stdout)["data"]

        wait_until(connection_secret, "the Certificate's connection Secret", timeout=60)
        kube_cluster.kubectl("delete", "certificate", "api", "--timeout=60s", namespace=namespace)
        assert "Forbidden" not in log.read_text(errors="replace")


def _scrape(url: str, token: str | None) -> tuple[int, str, str]:
    """GET /metrics with `token` as a bearer token: (status, body, WWW-Authenticate)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status, r.read().decode(), ""
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode(), refused.headers.get("WWW-Authenticate", "")


def _token_reviews(kube: KubeCluster) -> int:
    """TokenReviews the API server has answered (its apiserver_request_total)."""
    text = kube.kubectl("get", "--raw", "/metrics").stdout
    counted = re.findall(
        r'^apiserver_request_total\{[^}]*resource="tokenreviews"[^}]*\} (\d+)', text, re.M
    )
    return sum(int(n) for n in counted)


def test_metrics_need_a_token_allowed_them_and_the_chart_grants_the_reviews(
    installed: str, kube_cluster: KubeCluster, host_factory: Any, tmp_path: Path
) -> None:
    """The operator as the chart's ServiceAccount, /metrics behind the reviews (the chart's
    default): no token or an unknown one 401, a ServiceAccount without the right 403, the one
    the chart's metrics-reader ClusterRole is bound to 200. A verdict is kept: scraping again
    sends no TokenReview."""
    namespace = installed
    env = {
        e["name"]: e.get("value")
        for e in kube_cluster.kubectl_json(
            "get", "deployment", "tko-takoform-operator", namespace=namespace
        )["spec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["TAKOFORM_METRICS_AUTH"] == "kubernetes"
    for account in ("scraper", "nobody"):
        kube_cluster.kubectl("create", "serviceaccount", account, namespace=namespace)

    def token(account: str) -> str:
        return str(kube_cluster.kubectl("create", "token", account, namespace=namespace).stdout)

    operator = kube_cluster.token_kubeconfig(token("tko-takoform-operator").strip())
    port = free_port()
    url = f"http://127.0.0.1:{port}/metrics"
    log = tmp_path / "operator.log"
    with operator_process(
        operator, host_factory(), namespace, log,
        METRICS_PORT=str(port), METRICS_AUTH="kubernetes", BIND_ADDRESS="127.0.0.1",
    ):  # fmt: skip
        try:

            def answers() -> bool:
                try:
                    return _scrape(url, None)[0] == 401
                except OSError:  # not listening yet
                    return False

            wait_until(answers, "/metrics answering 401", 30)
            status, body, challenge = _scrape(url, None)
            assert challenge.startswith("Bearer") and "bearer token" in body
            assert _scrape(url, "not-a-token")[0] == 401
            status, body, _ = _scrape(url, token("nobody").strip())
            assert (status, body) == (
                403,
                "Forbidden: the token's user may not get the non-resource URL /metrics\n",
            )
            scraper = token("scraper").strip()
            status, body, _ = _scrape(url, scraper)
            assert status == 200 and "takoform_build_info" in body, body
            reviewed = _token_reviews(kube_cluster)
            for _ in range(10):
                assert _scrape(url, scraper)[0] == 200
            assert _token_reviews(kube_cluster) == reviewed, "a kept verdict is not reviewed again"
        except BaseException:
            print(log.read_text(errors="replace")[-4000:])
            raise
    text = log.read_text(errors="replace")
    assert "Forbidden" not in text, text[-3000:]
    assert "cannot review" not in text, "the chart's RBAC lets the operator ask for the reviews"


def test_a_cluster_wide_install_reaches_secrets_only_in_the_namespaces_it_serves(
    helm: Any, kube_cluster: KubeCluster, kube_crds: list[Any], host_factory: Any, tmp_path: Path
) -> None:
    """Cluster-wide, with one namespace granted through the chart: the operator's ServiceAccount
    may read and write Secrets there, and nowhere else (kube-system included), by `auth can-i`
    and by real requests with its own token. A CR in a namespace granted without the
    RoleBinding gets a condition with the remedy; the remedy, run as printed, lets it through."""
    suffix = os.urandom(3).hex()
    ops, served, unserved = (f"{p}-{suffix}" for p in ("ops", "served", "unserved"))
    for namespace in (ops, served, unserved):
        kube_cluster.kubectl("create", "namespace", namespace)
    kubeconfig = f"--kubeconfig={kube_cluster.kubeconfig}"
    grant = {"name": f"{served}-team-a", "spaces": ["team-a"], "namespaces": {"names": [served]}}
    release = "tkw"
    account = f"system:serviceaccount:{ops}:{release}-takoform-operator"
    try:
        helm(
            "install", release, str(CHART), kubeconfig, "--namespace", ops,
            "--set", "rbac.userRoles.create=false",
            "--set-json", "grants=" + json.dumps([grant]),
        )  # fmt: skip
        for namespace in (served, unserved, "kube-system"):
            kube_cluster.apply(
                json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": "probe", "namespace": namespace},
                        "stringData": {"k": "v"},
                    }
                )
            )

        def can(verb: str, namespace: str) -> str:
            args = ("auth", "can-i", verb, "secrets", "-n", namespace, f"--as={account}")
            return str(kube_cluster.kubectl(*args, check=False).stdout.strip())

        for verb in ("get", "create", "patch"):
            assert can(verb, served) == "yes", verb
            assert can(verb, unserved) == "no", verb
            assert can(verb, "kube-system") == "no", verb
        for verb in ("list", "watch", "delete"):
            assert can(verb, served) == "no", verb
        assert (
            kube_cluster.kubectl(
                "auth", "can-i", "get", "secrets", "-A", f"--as={account}", check=False
            ).stdout.strip()
            == "no"
        )
        # Real requests with the ServiceAccount's own token: refused where it does not serve.
        token = kube_cluster.kubectl(
            "create", "token", f"{release}-takoform-operator", namespace=ops
        ).stdout.strip()
        got = kube_cluster.kubectl(
            "get", "secret", "probe", "-o", "json", namespace=served, token=token
        )
        assert json.loads(got.stdout)["metadata"]["name"] == "probe"
        for namespace in (unserved, "kube-system"):
            refused = kube_cluster.kubectl(
                "get", "secret", "probe", namespace=namespace, token=token, check=False
            )
            assert refused.returncode != 0 and "forbidden" in refused.stderr.lower(), namespace

        # The operator itself, as that ServiceAccount, cluster-wide: a Certificate (sensitive
        # outputs) in a namespace granted the space but without the RoleBinding.
        host = host_factory(commit_delay=0.05)
        with host.api() as api:
            api.put("/v1alpha3/spaces/team-a").raise_for_status()
        log = tmp_path / "operator.log"
        role = f"{release}-takoform-operator-connection-secrets"
        with (
            granted(kube_cluster, unserved, ["team-a"]),
            operator_process(
                kube_cluster.token_kubeconfig(token),
                host,
                None,
                log,
                METRICS_PORT="0",
                OPERATOR_NAMESPACE=ops,
                POLL_READY_SECONDS="2",
                CONNECTION_SECRET_ROLE=role,
                SERVICE_ACCOUNT=f"{ops}:{release}-takoform-operator",
            ),
        ):
            kube_cluster.apply(json.dumps(CERTIFICATE), namespace=unserved)

            def degraded() -> dict[str, Any]:
                status = cr_status(kube_cluster, unserved, "api", "certificate")
                return condition_of(status, "Degraded")

            try:
                wait_until(
                    lambda: degraded().get("reason") == "ConnectionSecretForbidden",
                    "the Certificate Degraded ConnectionSecretForbidden",
                    timeout=60,
                )
            except BaseException:
                print(log.read_text(errors="replace")[-4000:])
                raise
            status = cr_status(kube_cluster, unserved, "api", "certificate")
            ready = condition_of(status, "Ready")
            assert ready["status"] == "False" and ready["reason"] == "ConnectionSecretForbidden"
            command = next(
                r["command"] for r in status["remedies"] if "rolebinding" in r["command"]
            )
            assert command == (
                f"kubectl -n {unserved} create rolebinding {role} --clusterrole={role} "
                f"--serviceaccount={ops}:{release}-takoform-operator"
            )
            assert "privateKey" not in json.dumps(status)
            # The remedy as printed, by an admin: the Secret is written, the CR becomes Ready.
            kube_cluster.kubectl(*command.split()[1:])
            wait_until(
                lambda: is_ready(kube_cluster, unserved, "api", "certificate"),
                "the Certificate Ready once its Secret may be written",
                timeout=60,
            )
            secret = kube_cluster.kubectl_json(
                "get", "secret", "api-connection", namespace=unserved
            )
            assert "privateKey" in secret["data"]
            kube_cluster.kubectl(
                "delete", "certificate", "api", "--timeout=60s", namespace=unserved
            )
        text = log.read_text(errors="replace")
        assert "Traceback" not in text
    finally:
        helm("uninstall", release, kubeconfig, "--namespace", ops, check=False)
        for namespace in (ops, served, unserved):
            drop_namespace(kube_cluster, namespace)
        kube_cluster.kubectl("delete", "secret", "probe", "-n", "kube-system", check=False)


def _documented_values() -> list[str]:
    """Dotted paths of values.yaml entries that carry a `# --` doc comment."""
    paths, stack, documented = [], [], False
    for line in (CHART / "values.yaml").read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("# --"):
            documented = True
            continue
        key = re.match(r"^(\s*)([A-Za-z]+):", line)
        if not key or stripped.startswith("#"):
            continue
        depth = len(key[1]) // 2
        stack = [*stack[:depth], key[2]]
        if documented:
            paths.append(".".join(stack))
        documented = False
    return paths


def test_every_value_is_documented_where_defined_and_in_the_readme() -> None:
    documented = _documented_values()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())

    def leaves(node: Any, prefix: str = "") -> list[str]:
        if (
            isinstance(node, dict)
            and node
            and prefix not in ("resources", "podSecurityContext", "securityContext")
        ):
            return [p for k, v in node.items() for p in leaves(v, f"{prefix}.{k}".lstrip("."))]
        return [prefix]

    undocumented = [
        leaf
        for leaf in leaves(defaults)
        if not any(leaf == d or leaf.startswith(d + ".") for d in documented)
    ]
    assert undocumented == [], "values without a `# --` comment"
    readme = (CHART / "README.md").read_text()
    missing = [path for path in documented if f"`{path}`" not in readme]
    assert missing == [], "values missing from the chart README"


#: Settings the chart sets to another value than the code's default, and why. Every other
#: TAKOFORM_* value the chart renders by default is the code's own default.
CHART_DIFFERS = {
    "TAKOFORM_HOST_URL": "the chart names its host's Service; the code defaults to loopback",
    "TAKOFORM_HOST_TOKEN_SECRET": "in a pod the token is a Secret (the code has no default)",
    "TAKOFORM_CONNECTION_SECRET_ROLE": "the release's ClusterRole, named by the chart",
    "TAKOFORM_SERVICE_ACCOUNT": "the release's ServiceAccount, named by the chart",
    "TAKOFORM_HEALTH_PORT": "the kubelet probes a pod; a process started by hand needs none",
    "TAKOFORM_LOG_FORMAT": "log collectors read JSON lines",
    "TAKOFORM_LEADER_ELECTION": "replicas need it; a process started by hand runs alone",
    "TAKOFORM_LEASE_NAME": "one Lease per release",
}


def test_the_charts_settings_are_the_codes_defaults_unless_it_says_why(helm: Any) -> None:
    from takoform_operator.settings import Settings

    fields = Settings.model_fields
    env = {e["name"]: e["value"] for e in _operator_env(render(helm)) if "value" in e}
    checked = 0
    for name, value in env.items():
        field = name.removeprefix("TAKOFORM_").lower()
        if field not in fields or name in CHART_DIFFERS:
            continue
        default = fields[field].default
        code = str(default).lower() if isinstance(default, bool) else str(default)
        chart = value.lower() if isinstance(default, bool) else value
        if isinstance(default, float):
            chart = str(float(value))
        assert chart == code, f"{name}: the chart sets {value!r}, the code defaults to {code!r}"
        checked += 1
    assert checked >= 10, env
    stale = set(CHART_DIFFERS) - set(env)
    assert not stale, f"listed as differing but not set by the chart: {stale}"
    same = {n for n in CHART_DIFFERS if n in env and _code_default(n) == env[n]}
    assert not same, f"listed as differing but equal to the code's default: {same}"


def _code_default(name: str) -> str | None:
    from takoform_operator.settings import Settings

    field = Settings.model_fields.get(name.removeprefix("TAKOFORM_").lower())
    if field is None or field.default is None:
        return None
    return str(field.default).lower() if isinstance(field.default, bool) else str(field.default)


def test_a_host_request_budget_is_set_only_when_asked_for(helm: Any) -> None:
    from takoform_operator.settings import Settings

    names = {"TAKOFORM_HOST_REQUESTS_PER_SECOND", "TAKOFORM_HOST_REQUEST_BURST"}
    assert not names & {e["name"] for e in _operator_env(render(helm))}
    docs = render(helm, "host.requestsPerSecond=20", "host.requestBurst=40")
    env = {e["name"]: e["value"] for e in _operator_env(docs) if e["name"] in names}
    assert env == {"TAKOFORM_HOST_REQUESTS_PER_SECOND": "20", "TAKOFORM_HOST_REQUEST_BURST": "40"}
    settings = Settings(**{k.removeprefix("TAKOFORM_").lower(): v for k, v in env.items()})
    assert (settings.host_requests_per_second, settings.host_request_burst) == (20.0, 40.0)
