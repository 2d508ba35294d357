"""The chart's reference host (values referenceHost) and its install notes, rendered by real helm;
the notes are read from a real `helm install` on the real API server, and the grant they print
is run as printed (bash, kubectl) against it. tests/node/test_try_it.py runs it all on a node."""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import uuid
from typing import Any

import pytest
from fixtures_helm import CHART, kinds, render
from fixtures_kube import KubeCluster

from takoform_operator.core.tenancy import credential_refusal, grant_from_body, remedy

pytestmark = pytest.mark.kube

ON = "referenceHost.enabled=true"
HOST = "t-takoform-operator-reference-host"
SECRET = f"{HOST}-token"


def _by_kind(docs: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    (found,) = [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    return found


def _operator(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return _by_kind(docs, "Deployment", "t-takoform-operator")


def _env(deployment: dict[str, Any]) -> dict[str, Any]:
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {e["name"]: e.get("value") for e in container["env"]}


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_off_by_default_and_on_it_adds_the_host_its_service_and_its_token(helm: Any) -> None:
    default = kinds(render(helm))
    assert "Secret" not in default
    assert kinds(render(helm, "referenceHost.grantNamespaces={demo}")) == default
    docs = render(helm, ON)
    assert kinds(docs) == sorted([*default, "Deployment", "Secret", "Service"])
    with_grant = render(helm, ON, "referenceHost.grantNamespaces={demo,default}")
    grant = _by_kind(with_grant, "TakoformSpaceGrant")
    assert grant["metadata"]["name"] == HOST
    assert grant["spec"] == {
        "hostRef": "default",
        "spaces": ["team-a"],
        "namespaces": {"names": ["demo", "default"]},
    }
    # The operator program reads the grant as the operator does.
    read = grant_from_body(grant)
    assert read.allows("default", "team-a", "demo", {})
    assert not read.allows("default", "team-a", "elsewhere", {})


def test_the_operators_implicit_host_is_the_reference_host_through_its_service(helm: Any) -> None:
    docs = render(helm, ON)
    operator = _operator(docs)
    env = _env(operator)
    assert env["TAKOFORM_HOST_URL"] == f"http://{HOST}.ops.svc:8787"
    assert (env["TAKOFORM_HOST_TOKEN_SECRET"], env["TAKOFORM_HOST_TOKEN_SECRET_KEY"]) == (
        SECRET,
        "token",
    )
    # It speaks plain http: the implicit host is insecure explicitly, and only with the option.
    assert env["TAKOFORM_HOST_INSECURE"] == "true"
    assert _env(_operator(render(helm)))["TAKOFORM_HOST_INSECURE"] == "false"

    host = _by_kind(docs, "Deployment", HOST)
    service = _by_kind(docs, "Service", HOST)
    pod = host["spec"]["template"]
    assert service["spec"]["ports"] == [{"name": "http", "port": 8787, "targetPort": "http"}]
    assert _matches(service["spec"]["selector"], pod["metadata"]["labels"])
    assert _matches(host["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    # No selector of the operator's takes the host's pod, nor the other way round.
    operator_pod = operator["spec"]["template"]["metadata"]["labels"]
    metrics = _by_kind(docs, "Service", "t-takoform-operator-metrics")
    assert not _matches(operator["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
    assert not _matches(metrics["spec"]["selector"], pod["metadata"]["labels"])
    assert not _matches(service["spec"]["selector"], operator_pod)

    spec = pod["spec"]
    (container,) = spec["containers"]
    assert container["image"] == operator["spec"]["template"]["spec"]["containers"][0]["image"]
    assert container["command"] == ["takoform-host"]
    assert container["args"] == [
        "serve",
        "--db=/var/lib/takoform-host/host.db",
        "--listen=0.0.0.0:8787",
        "--token-file=/etc/takoform-host/token",
        "--space=team-a",
    ]
    assert "hostNetwork" not in spec and spec["automountServiceAccountToken"] is False
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert spec["securityContext"]["runAsNonRoot"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"/var/lib/takoform-host", "/tmp", "/etc/takoform-host"}
    assert host["spec"]["replicas"] == 1 and host["spec"]["strategy"] == {"type": "Recreate"}


def test_with_host_network_both_meet_on_the_nodes_loopback(helm: Any) -> None:
    docs = render(helm, ON, "hostNetwork=true", "referenceHost.port=18787")
    assert _env(_operator(docs))["TAKOFORM_HOST_URL"] == "http://127.0.0.1:18787"
    spec = _by_kind(docs, "Deployment", HOST)["spec"]["template"]["spec"]
    assert spec["hostNetwork"] is True
    (container,) = spec["containers"]
    assert "--listen=127.0.0.1:18787" in container["args"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["host"] == "127.0.0.1", probe


def test_the_operator_may_read_its_token_and_write_connection_secrets_where_it_grants(
    helm: Any,
) -> None:
    docs = render(
        helm, ON, "referenceHost.grantNamespaces={demo}", "rbac.hostSecretNames={other-token}"
    )
    role = _by_kind(docs, "Role", "t-takoform-operator-host-secrets")
    (rule,) = role["rules"]
    assert rule["resourceNames"] == ["other-token", SECRET] and rule["verbs"] == ["get"]
    bound = {
        d["metadata"]["namespace"]
        for d in docs
        if d["kind"] == "RoleBinding"
        and d["roleRef"]["name"] == "t-takoform-operator-connection-secrets"
    }
    assert bound == {"demo"}
    # Without the option, grantNamespaces grants nothing and binds nothing.
    off = render(helm, "referenceHost.grantNamespaces={demo}")
    assert not any(d["kind"] == "RoleBinding" and d["metadata"]["namespace"] == "demo" for d in off)


def test_an_http_host_url_is_refused_unless_insecure_or_the_reference_host(helm: Any) -> None:
    http = "host.url=http://somewhere:8787"
    refused = helm("template", "t", str(CHART), "--set", http, check=False)
    assert refused.returncode != 0 and "host.insecure" in refused.stderr
    render(helm, http, ON)  # host.url is not used then


def _token(docs: list[dict[str, Any]]) -> str:
    secret = _by_kind(docs, "Secret", SECRET)
    return base64.b64decode(secret["data"]["token"]).decode()


def test_its_token_is_random_per_install_or_the_value_never_a_fixed_one(helm: Any) -> None:
    first, second = _token(render(helm, ON)), _token(render(helm, ON))
    assert first != second and len(first) == len(second) == 40
    assert re.fullmatch(r"[A-Za-z0-9]{40}", first)
    chosen = "a-token-of-my-own-0123"
    docs = render(helm, ON, f"referenceHost.token={chosen}")
    assert _token(docs) == chosen
    secret = _by_kind(docs, "Secret", SECRET)
    assert secret["metadata"]["labels"]["takoform.io/host-credential"] == "true"
    # Opted in for the implicit host at the very URL the operator reaches it by, as the
    # operator reads it, with and without hostNetwork.
    for values in ((ON,), (ON, "hostNetwork=true", "referenceHost.port=18787")):
        rendered = render(helm, *values)
        url = _env(_operator(rendered))["TAKOFORM_HOST_URL"]
        annotations = _by_kind(rendered, "Secret", SECRET)["metadata"]["annotations"]
        assert annotations["takoform.io/host-credential-for"] == f"default={url}"
        assert credential_refusal("ops", SECRET, "default", url, annotations) is None


@pytest.mark.parametrize(
    "value",
    [
        "referenceHost.token=short",
        "referenceHost.grantNamespaces={Not_A_Namespace}",
        "referenceHost.spaces={a/b}",
        "referenceHost.port=0",
        "referenceHost.replicas=2",
    ],
)
def test_the_schema_refuses_wrong_reference_host_values(helm: Any, value: str) -> None:
    proc = helm("template", "t", str(CHART), "--set", ON, "--set", value, check=False)
    assert proc.returncode != 0 and "schema" in proc.stderr.lower(), proc.stderr


# -- the install notes, on the real API server --------------------------------------------------


def _install(
    helm: Any, kube: KubeCluster, namespace: str, release: str, *values: str, verb: str = "install"
) -> str:
    """`helm install` (or upgrade) for real, nothing else of the cluster touched: the user
    ClusterRoles (one release per cluster) are left out. Returns what helm printed."""
    sets = [arg for value in values for arg in ("--set", value)]
    out = helm(
        verb, release, str(CHART), f"--kubeconfig={kube.kubeconfig}", "--namespace", namespace,
        "--set", "rbac.userRoles.create=false", "--set", f"watchNamespace={namespace}", *sets,
    ).stdout  # fmt: skip
    return str(out)


def _grant_snippet(notes: str) -> str:
    """The shell lines the notes print for a grant: NAMESPACE=... SPACE=... through EOF."""
    match = re.search(r"^NAMESPACE=\S+ SPACE=\S+\n.*?^EOF$", notes, re.S | re.M)
    assert match, notes
    return match[0]


@pytest.fixture
def release(kube_cluster: KubeCluster, helm: Any, kube_namespace: str) -> Any:
    name = f"n{uuid.uuid4().hex[:8]}"
    yield name
    helm(
        "uninstall", name, f"--kubeconfig={kube_cluster.kubeconfig}", "--namespace",
        kube_namespace, check=False,
    )  # fmt: skip


def test_the_notes_say_how_to_grant_and_how_to_see_blocked_crs_without_the_option(
    helm: Any, kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str, release: str
) -> None:
    out = _install(helm, kube_cluster, kube_namespace, release)
    notes = out.split("NOTES:", 1)[1]
    assert "create secret generic takoform-host-token" in notes
    assert "SpaceNotGranted" in notes and "kubectl takoform blocked -A" in notes
    assert "reference host" not in notes
    snippet = _grant_snippet(notes)
    assert snippet.startswith("NAMESPACE=my-namespace SPACE=my-space\n")
    _run_grant_snippet(kube_cluster, snippet, kube_namespace, "team-b")


def test_the_notes_with_the_reference_host_name_it_its_spaces_and_grants(
    helm: Any, kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str, release: str
) -> None:
    granted = f"{kube_namespace}-crs"
    out = _install(
        helm, kube_cluster, kube_namespace, release, ON,
        f"referenceHost.grantNamespaces={{{granted}}}",
    )  # fmt: skip
    notes = out.split("NOTES:", 1)[1]
    name = f"{release}-takoform-operator-reference-host"
    assert f"URL         http://{name}.{kube_namespace}.svc:8787\n" in notes
    assert f"token       Secret {name}-token (generated)\n" in notes
    assert "create secret generic" not in notes
    assert f"namespaces {granted} may use spaces\nteam-a on host `default`" in notes
    assert f"kubectl apply -n {granted} -f docs/examples/" in notes
    assert "kubectl takoform blocked -A" in notes
    snippet = _grant_snippet(notes)
    assert snippet.startswith("NAMESPACE=my-namespace SPACE=team-a\n")
    _run_grant_snippet(kube_cluster, snippet, kube_namespace, "team-a")

    # The grant the release made, and the token it generated: an upgrade keeps the token.
    grant = kube_cluster.kubectl_json("get", "takoformspacegrant", name)
    assert grant["spec"]["namespaces"] == {"names": [granted]}

    def token() -> str:
        secret = kube_cluster.kubectl_json(
            "get", "secret", f"{name}-token", namespace=kube_namespace
        )
        return base64.b64decode(secret["data"]["token"]).decode()

    before = token()
    assert len(before) == 40
    _install(
        helm, kube_cluster, kube_namespace, release, ON,
        f"referenceHost.grantNamespaces={{{granted}}}", verb="upgrade",
    )  # fmt: skip
    assert token() == before, "helm upgrade keeps the generated token"


def _run_grant_snippet(kube: KubeCluster, snippet: str, namespace: str, space: str) -> None:
    """Run the printed lines as a user would, with the two names set; the grant they create is
    the one the SpaceNotGranted remedy prints (core.tenancy.remedy), and lets the namespace in."""
    first, rest = snippet.split("\n", 1)
    assert first.startswith("NAMESPACE=")
    script = f"NAMESPACE={namespace} SPACE={space}\n{rest}\n"
    env = {
        **os.environ,
        "KUBECONFIG": str(kube.kubeconfig),
        "PATH": f"{kube.kubectl_bin.parent}{os.pathsep}{os.environ['PATH']}",
    }
    proc = subprocess.run(
        ["bash", "-euo", "pipefail"], input=script, capture_output=True, text=True, env=env,
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    created = kube.kubectl_json("get", "takoformspacegrant", f"{namespace}-{space}")
    try:
        printed = json.loads(remedy(namespace, space, "default").split("'")[1])
        assert created["apiVersion"] == printed["apiVersion"]
        assert created["kind"] == printed["kind"]
        assert created["spec"] == printed["spec"]
        assert grant_from_body(created).allows("default", space, namespace, {})
    finally:
        kube.kubectl("delete", "takoformspacegrant", f"{namespace}-{space}", check=False)
