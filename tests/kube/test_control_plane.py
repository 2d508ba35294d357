"""Proof that the tests talk to a real Kubernetes control plane: a real API server validates
schemas, enforces RBAC on ServiceAccount tokens, and a real controller-manager finishes namespace
deletion and collects owned objects. Also checks the pinned helm and promtool run."""

from __future__ import annotations

import json
import subprocess
import textwrap
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster, KubeTools, apply_crds, localcluster, wait_until
from kubernetes import client
from runners import Helm, run

pytestmark = pytest.mark.kube

# A small CRD of our own: the checks below must not depend on what crds/ holds today.
TEST_GROUP = "test.takoform.io"
TEST_CRD = textwrap.dedent(
    f"""\
    apiVersion: apiextensions.k8s.io/v1
    kind: CustomResourceDefinition
    metadata:
      name: widgets.{TEST_GROUP}
    spec:
      group: {TEST_GROUP}
      scope: Namespaced
      names: {{plural: widgets, singular: widget, kind: Widget, categories: [takoform-test]}}
      versions:
        - name: v1alpha1
          served: true
          storage: true
          schema:
            openAPIV3Schema:
              type: object
              properties:
                spec:
                  type: object
                  required: [size]
                  properties:
                    size: {{type: integer, minimum: 1, description: How big the widget is.}}
                    colour: {{type: string, enum: [red, blue]}}
    """
)


@pytest.fixture(scope="module")
def test_crd(kube_cluster: KubeCluster, tmp_path_factory: pytest.TempPathFactory) -> Any:
    path = tmp_path_factory.mktemp("crd") / "widgets.yaml"
    path.write_text(TEST_CRD)
    (crd,) = apply_crds(kube_cluster, [path])
    return crd


def _storage_version(crd: Any) -> str:
    return next(v["name"] for v in crd["spec"]["versions"] if v["storage"])


def _resource(crd: Any) -> str:
    """plural.group: unambiguous for kubectl."""
    return f"{crd['spec']['names']['plural']}.{crd['spec']['group']}"


def _spec_schema(crd: Any) -> Any:
    version = next(v for v in crd["spec"]["versions"] if v["storage"])
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]


# --- the control plane itself ------------------------------------------------------------------


def test_api_server_reports_the_pinned_version(kube_cluster: KubeCluster) -> None:
    versions = kube_cluster.kubectl_json("version")
    if kube_cluster.existing:
        assert versions["serverVersion"]["gitVersion"].startswith("v1.")
    else:
        pinned = localcluster.read_versions()["KUBERNETES_VERSION"]
        # Stamped at build time; unstamped binaries say v0.0.0-master and break helm.
        assert versions["serverVersion"]["gitVersion"] == pinned
        assert versions["clientVersion"]["gitVersion"] == pinned


def test_new_namespace_gets_default_service_account(
    kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    # Created by the serviceaccount controller of kube-controller-manager (the fixture waited).
    sa = kube_cluster.kubectl_json("get", "serviceaccount", "default", namespace=kube_namespace)
    assert sa["metadata"]["namespace"] == kube_namespace
    # The Python client reaches the same API server through the same kubeconfig.
    with kube_cluster.api_client() as api:
        read = client.CoreV1Api(api).read_namespaced_service_account("default", kube_namespace)
    assert read.metadata.uid == sa["metadata"]["uid"]


def test_get_object_reads_what_kubectl_reads(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str
) -> None:
    """The tests' waits read objects over a kept connection (KubeCluster.get_object): by every
    name kubectl takes for the kind, the same object kubectl gets, and None where it finds
    none."""
    kube_cluster.apply(
        json.dumps({
            "apiVersion": "storage.takoform.io/v1", "kind": "Bucket", "metadata": {"name": "b"},
            "spec": {"space": "s", "parameters": {"region": "eu-west-1", "sizeGiB": 1}},
        }),
        namespace=kube_namespace,
    )  # fmt: skip
    by_kubectl = kube_cluster.kubectl_json("get", "bucket", "b", namespace=kube_namespace)
    for kind in ("bucket", "Bucket", "buckets", "buckets.storage.takoform.io", "tkbucket"):
        assert kube_cluster.get_object(kind, "b", kube_namespace) == by_kubectl, kind
    assert kube_cluster.get_object("bucket", "absent", kube_namespace) is None
    account = kube_cluster.get_object("serviceaccount", "default", kube_namespace)
    assert account["metadata"]["namespace"] == kube_namespace
    # A kind it does not know goes through kubectl.
    assert kube_cluster.get_object("namespace", kube_namespace)["status"]["phase"] == "Active"


# --- CRDs --------------------------------------------------------------------------------------


def test_project_crds_are_established_and_explained(
    kube_cluster: KubeCluster, kube_crds: list[Any]
) -> None:
    for crd in kube_crds:
        conditions = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
        assert conditions.get("Established") == "True", crd["metadata"]["name"]
        assert crd["apiVersion"] == "apiextensions.k8s.io/v1"
        group_version = f"{crd['spec']['group']}/{_storage_version(crd)}"
        explained = kube_cluster.kubectl(
            "explain", f"{crd['spec']['names']['plural']}.spec", f"--api-version={group_version}"
        ).stdout
        # The API server published the schema: every spec field is listed.
        for field in _spec_schema(crd).get("properties", {}):
            assert field in explained, f"{field} missing from kubectl explain:\n{explained}"


def test_project_crds_are_in_the_takoform_category(
    kube_cluster: KubeCluster, kube_crds: list[Any]
) -> None:
    listed = kube_cluster.kubectl("api-resources", "--categories=takoform", "-o", "name").stdout
    for crd in kube_crds:
        if crd["spec"]["group"] == "operator.takoform.io":
            # The admins' policy objects stay out of what `kubectl get takoform` shows users.
            assert _resource(crd) not in listed.split()
            continue
        assert _resource(crd) in listed.split(), f"{_resource(crd)} not in category takoform"


def _wrong_type_field(crd: Any) -> tuple[str, Any, str]:
    """A spec field and a value of the wrong type for it (plus the type it should have)."""
    for name, prop in _spec_schema(crd).get("properties", {}).items():
        kind = prop.get("type")
        if kind == "string":
            return name, {"not": "a string"}, kind
        if kind in ("integer", "number", "boolean", "object", "array"):
            return name, "not-of-the-right-type", kind
    pytest.fail(f"{crd['metadata']['name']}: no typed spec field to violate")


def _assert_wrong_type_rejected(cluster: KubeCluster, crd: Any, namespace: str) -> None:
    field, value, kind = _wrong_type_field(crd)
    cr = {
        "apiVersion": f"{crd['spec']['group']}/{_storage_version(crd)}",
        "kind": crd["spec"]["names"]["kind"],
        "metadata": {"name": "wrong-type"},
        "spec": {field: value},
    }
    ns = namespace if crd["spec"]["scope"] == "Namespaced" else None
    # --validate=false: no client-side checks, so the rejection is the API server's.
    proc = cluster.kubectl(
        "create", "--validate=false", "-f", "-", namespace=ns, input=json.dumps(cr), check=False
    )
    assert proc.returncode != 0, f"a CR with spec.{field} not of type {kind} was accepted"
    assert f"spec.{field}" in proc.stderr, proc.stderr
    assert "Invalid value" in proc.stderr, proc.stderr
    assert f"must be of type {kind}" in proc.stderr, proc.stderr


def test_project_cr_violating_schema_is_rejected(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str
) -> None:
    _assert_wrong_type_rejected(kube_cluster, kube_crds[0], kube_namespace)


@pytest.mark.parametrize("space", [".", "..", "team\x1b[2J", "team\nb", "a/b"])
def test_a_space_a_client_would_rewrite_is_refused_by_the_api_server(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str, space: str
) -> None:
    cr = {
        "apiVersion": "storage.takoform.io/v1",
        "kind": "Bucket",
        "metadata": {"name": "dots"},
        "spec": {"space": space, "parameters": {"region": "eu-west-1", "sizeGiB": 1}},
    }
    proc = kube_cluster.kubectl(
        "create", "--validate=false", "-f", "-", namespace=kube_namespace,
        input=json.dumps(cr), check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "spec.space" in proc.stderr, proc.stderr


def test_own_crd_schema_is_enforced(
    kube_cluster: KubeCluster, test_crd: Any, kube_namespace: str
) -> None:
    def widget(name: str, spec: dict[str, Any]) -> str:
        body = {"apiVersion": f"{TEST_GROUP}/v1alpha1", "kind": "Widget",
                "metadata": {"name": name}, "spec": spec}  # fmt: skip
        return json.dumps(body)

    def create(body: str) -> subprocess.CompletedProcess[str]:
        return kube_cluster.kubectl(
            "create", "--validate=false", "-f", "-",
            namespace=kube_namespace, input=body, check=False,
        )  # fmt: skip

    assert create(widget("good", {"size": 3, "colour": "red"})).returncode == 0
    _assert_wrong_type_rejected(kube_cluster, test_crd, kube_namespace)
    for name, spec, message in [
        ("too-small", {"size": 0}, "should be greater than or equal to 1"),
        ("bad-enum", {"size": 1, "colour": "green"}, "Unsupported value"),
        ("missing", {"colour": "red"}, "Required value"),
    ]:
        proc = create(widget(name, spec))
        assert proc.returncode != 0 and message in proc.stderr, (name, proc.stderr)
    # Unknown fields are pruned by the structural schema.
    create(widget("pruned", {"size": 2, "extra": "x"}))
    stored = kube_cluster.kubectl_json("get", "widget", "pruned", namespace=kube_namespace)
    assert stored["spec"] == {"size": 2}
    assert "widget" in kube_cluster.kubectl("explain", "widgets.spec.size").stdout.lower()


# --- RBAC --------------------------------------------------------------------------------------


def _assert_rbac_enforced(cluster: KubeCluster, crd: Any, namespace: str) -> None:
    resource = _resource(crd)
    cluster.kubectl("create", "serviceaccount", "reader", namespace=namespace)
    # TokenRequest API: a short-lived token bound to the ServiceAccount, signed by the API server.
    token = cluster.kubectl(
        "create", "token", "reader", "--duration=10m", namespace=namespace
    ).stdout.strip()
    whoami = cluster.kubectl("auth", "whoami", "-o", "json", token=token)
    user = json.loads(whoami.stdout)["status"]["userInfo"]["username"]
    assert user == f"system:serviceaccount:{namespace}:reader"

    def list_as_reader(ns: str) -> subprocess.CompletedProcess[str]:
        return cluster.kubectl("get", resource, namespace=ns, token=token, check=False)

    denied = list_as_reader(namespace)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
    assert user in denied.stderr

    group, plural = crd["spec"]["group"], crd["spec"]["names"]["plural"]
    cluster.kubectl(
        "create", "role", "read-crs", f"--resource={plural}.{group}",
        "--verb=get,list,watch", namespace=namespace,
    )  # fmt: skip
    cluster.kubectl(
        "create", "rolebinding", "reader-read-crs", "--role=read-crs",
        f"--serviceaccount={namespace}:reader", namespace=namespace,
    )  # fmt: skip
    wait_until(lambda: list_as_reader(namespace).returncode == 0, "the Role to take effect", 30)
    # Only where it was granted, and only those verbs (a named DELETE reaches authorization;
    # --all would just list and find nothing).
    assert list_as_reader("default").returncode != 0
    delete = cluster.kubectl(
        "delete", resource, "anything", namespace=namespace, token=token, check=False
    )
    assert delete.returncode != 0 and "forbidden" in delete.stderr.lower(), delete.stderr


def test_rbac_on_project_crs(
    kube_cluster: KubeCluster, kube_crds: list[Any], kube_namespace: str
) -> None:
    namespaced = [c for c in kube_crds if c["spec"]["scope"] == "Namespaced"]
    assert namespaced, "no namespaced CRD in crds/"
    _assert_rbac_enforced(kube_cluster, namespaced[0], kube_namespace)


def test_rbac_on_own_crd(kube_cluster: KubeCluster, test_crd: Any, kube_namespace: str) -> None:
    _assert_rbac_enforced(kube_cluster, test_crd, kube_namespace)


# --- controllers -------------------------------------------------------------------------------


def test_namespace_deletion_completes(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    # A namespace of its own (with content), so its deletion is the thing under test.
    doomed = f"{kube_namespace[:50]}-del"
    kube_cluster.kubectl("create", "namespace", doomed)
    kube_cluster.kubectl("create", "configmap", "content", "--from-literal=a=b", namespace=doomed)
    # The namespace controller must empty it and drop the `kubernetes` finalizer.
    kube_cluster.kubectl("delete", "namespace", doomed, "--wait=true", "--timeout=90s", timeout=120)
    gone = kube_cluster.kubectl("get", "namespace", doomed, check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, gone.stderr


def test_owned_object_is_garbage_collected(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    ns = kube_namespace
    kube_cluster.kubectl("create", "configmap", "owner", namespace=ns)
    owner_uid = kube_cluster.kubectl_json("get", "configmap", "owner", namespace=ns)["metadata"][
        "uid"
    ]
    child = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "child",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}
            ],
        },
    }
    kube_cluster.apply(json.dumps(child), namespace=ns)
    kube_cluster.kubectl("create", "configmap", "bystander", namespace=ns)
    # Background propagation: the owner goes at once, the garbage collector removes the child.
    kube_cluster.kubectl("delete", "configmap", "owner", "--cascade=background", namespace=ns)
    wait_until(
        lambda: (
            kube_cluster.kubectl("get", "configmap", "child", namespace=ns, check=False).returncode
            != 0
        ),
        "the garbage collector to delete the owned ConfigMap",
        90,
    )
    assert kube_cluster.kubectl("get", "configmap", "bystander", namespace=ns).returncode == 0


# --- helm and promtool -------------------------------------------------------------------------


def test_helm_lints_renders_and_installs_a_chart(
    kube_cluster: KubeCluster, helm: Helm, kube_namespace: str, tmp_path: Path
) -> None:
    pinned = localcluster.read_versions()["HELM_VERSION"]
    assert pinned in helm("version", "--short").stdout
    chart = tmp_path / "demo"
    helm("create", str(chart))
    lint = helm("lint", str(chart))
    assert "1 chart(s) linted, 0 chart(s) failed" in lint.stdout
    rendered = helm("template", "demo", str(chart), f"--namespace={kube_namespace}").stdout
    assert "kind: Deployment" in rendered and "kind: Service" in rendered
    # The rendered manifests are accepted by the real API server...
    kube_cluster.kubectl(
        "apply", "--dry-run=server", "-f", "-", namespace=kube_namespace, input=rendered
    )
    # ...and helm itself can install into it (no --wait: there is no kubelet to run pods).
    kubeconfig = f"--kubeconfig={kube_cluster.kubeconfig}"
    ns = f"--namespace={kube_namespace}"
    helm("install", "demo", str(chart), kubeconfig, ns)
    releases = json.loads(helm("list", "-o", "json", kubeconfig, ns).stdout)
    assert [(r["name"], r["status"]) for r in releases] == [("demo", "deployed")]
    kube_cluster.kubectl("get", "deployment", "demo", namespace=kube_namespace)


def test_promtool_runs(kube_tools: KubeTools, tmp_path: Path) -> None:
    assert kube_tools.promtool, "promtool missing: run `make tools` (Debian package prometheus)"
    version = run([kube_tools.promtool, "--version"], timeout=30)
    assert "promtool, version" in version.stdout + version.stderr
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        textwrap.dedent(
            """\
            groups:
              - name: demo
                rules:
                  - alert: AlwaysFiring
                    expr: vector(1) > 0
                    for: 1m
            """
        )
    )
    check = run([kube_tools.promtool, "check", "rules", rules], timeout=30)
    assert "SUCCESS: 1 rules found" in check.stdout
