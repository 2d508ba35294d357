"""Ownership on the real API server: one host resource per CR, one CR per host resource.

- A create accepted by the host whose status write is lost, then a resourceName edit: still one
  host resource, and the CR is Blocked IdentityChanged (the operator-side check, proven on a
  CRD without the transition rules, as older CRDs and clusters with validation off have).
- A second CR importing a resource another CR manages: Blocked AlreadyManaged naming the
  TakoformBinding (never the owner CR); the owner's resource is neither rewritten nor deleted.

Lost status writes are real: a ValidatingAdmissionPolicy denies the status writes that record a
pending operation, so the API server refuses them exactly as it would under trouble.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from admission import refused_status_writes
from fixtures_kube import KubeCluster, apply_crds, crd_files, wait_until
from manifests import bucket
from operator_process import Operator, condition_of, cr_status, is_ready
from tenancy import binding_of

from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

pytestmark = [pytest.mark.kube, pytest.mark.host]

REGISTRY = load_registry()
#: A pin this build does not have: the operator sends nothing for a CR that carries it.
UNKNOWN_PIN = {"definitionVersion": "9.9.9", "schemaDigest": "sha256:" + "0" * 64}

SPACE = "team-a"


def _volume(name: str, **spec: Any) -> str:
    return json.dumps(
        {
            "apiVersion": "storage.takoform.io/v1",
            "kind": "Volume",
            "metadata": {"name": name},
            "spec": {
                "space": SPACE,
                "parameters": {"zone": "eu-west-1a", "sizeGiB": 10},
                **spec,
            },
        }
    )


def _host_resources(host: Any, kind: str) -> list[dict[str, Any]]:
    """The host's resources of that kind under the line's default create ref."""
    ref = REGISTRY.default_create_ref(FormLine("storage.takoform.io/v1", kind))
    assert ref is not None
    exact = {"definitionVersion": ref.definition_version, "schemaDigest": ref.schema_digest}
    with host.api() as api:
        answer = api.get(
            f"/v1alpha3/spaces/{SPACE}/forms/storage.takoform.io/v1/{kind}/resources", params=exact
        )
    answer.raise_for_status()
    return list(answer.json()["items"])


def _host_operations(host: Any) -> list[dict[str, Any]]:
    with host.api() as api:
        answer = api.get("/v1alpha3/operations", params={"space": SPACE})
    answer.raise_for_status()
    return list(answer.json()["items"])


@pytest.fixture
def volumes_without_transition_rules(kube_cluster: KubeCluster) -> Iterator[None]:
    """The Volume CRD as an older release shipped it: no immutability rules on the spec."""
    crd = kube_cluster.kubectl_json("get", "crd", "volumes.storage.takoform.io")
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    schema.pop("x-kubernetes-validations", None)
    for field in schema["properties"].values():
        field.pop("x-kubernetes-validations", None)
    for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
        crd["metadata"].pop(key, None)
    crd.pop("status", None)
    kube_cluster.kubectl("replace", "-f", "-", input=json.dumps(crd))
    try:
        yield
    finally:
        volume_crd = [f for f in crd_files() if f.name.startswith("volumes.")]
        kube_cluster.kubectl("replace", "-f", str(volume_crd[0]))
        apply_crds(kube_cluster, volume_crd)


@pytest.fixture
def pending_writes_lost(kube_cluster: KubeCluster, kube_namespace: str) -> Iterator[str]:
    """Every status write that would record a pending operation in this namespace is denied."""
    with refused_status_writes(
        kube_cluster,
        kube_namespace,
        group="storage.takoform.io",
        plural="volumes",
        expression="!has(object.status) || !has(object.status.pendingOperationId)",
        message="this test loses the status write that records a pending operation",
        probe=json.loads(_volume("probe", formRef=UNKNOWN_PIN)),
        probe_status={"pendingOperationId": "probe"},
    ) as binding:
        yield binding


def test_lost_status_write_then_resource_name_edit_makes_no_second_resource(
    operator: tuple[Operator, Any, str],
    kube_cluster: KubeCluster,
    volumes_without_transition_rules: None,
    pending_writes_lost: str,
) -> None:
    running, host, namespace = operator
    host.set_faults(stuckOperations=True)  # the create stays accepted-but-unfinished
    kube_cluster.kubectl("apply", "-f", "-", input=_volume("vol"), namespace=namespace)

    def create_accepted() -> bool:
        return any(op["name"] == "vol" and op["verb"] == "create" for op in _host_operations(host))

    wait_until(create_accepted, "the host accepted the create of vol")
    status = cr_status(kube_cluster, namespace, "vol", "volume")
    binding = binding_of(kube_cluster, "Volume", "vol")
    assert binding is not None, "the target was bound before the create was sent"
    assert binding["spec"]["claimRef"]["name"] == "vol"
    assert binding["spec"]["phase"] == "Bound"
    assert not status.get("pendingOperationId"), "the write recording the operation was lost"

    # The user edits the identity while the operator does not know its operation.
    patch = json.dumps({"spec": {"resourceName": "vol-renamed"}})
    kube_cluster.kubectl("patch", "volume", "vol", "--type=merge", "-p", patch, namespace=namespace)

    def blocked() -> dict[str, Any]:
        condition = condition_of(cr_status(kube_cluster, namespace, "vol", "volume"), "Blocked")
        return condition if condition.get("status") == "True" else {}

    wait_until(lambda: bool(blocked()), "Blocked after the identity edit")
    condition = blocked()
    assert condition["reason"] == "IdentityChanged"
    assert "'vol'" in condition["message"] and "'vol-renamed'" in condition["message"]
    assert "deletionPolicy Orphan" in condition["message"], "the remedies are spelled out"

    # Let the host finish the create: still exactly one resource, under the recorded name.
    host.set_faults(stuckOperations=False)
    wait_until(lambda: len(_host_resources(host, "Volume")) == 1, "the create committed")
    creates = [op for op in _host_operations(host) if op["verb"] == "create"]
    assert [op["name"] for op in creates] == ["vol"], "one create, never one for vol-renamed"
    assert [r["metadata"]["name"] for r in _host_resources(host, "Volume")] == ["vol"]

    # Reverting the field is the first remedy: the resource is adopted (it carries our key).
    patch = json.dumps({"spec": {"resourceName": None}})
    kube_cluster.kubectl("patch", "volume", "vol", "--type=merge", "-p", patch, namespace=namespace)
    kube_cluster.kubectl(
        "delete", "validatingadmissionpolicybinding", pending_writes_lost, check=False
    )
    wait_until(lambda: is_ready(kube_cluster, namespace, "vol", "volume"), "vol Ready")
    assert len(_host_resources(host, "Volume")) == 1
    assert running.process.poll() is None


def test_second_cr_importing_an_owned_resource_is_blocked_and_touches_nothing(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _running, host, namespace = operator
    kube_cluster.kubectl("apply", "-f", "-", input=bucket("owner", 10, resourceName="shared"),
                         namespace=namespace)  # fmt: skip
    wait_until(lambda: is_ready(kube_cluster, namespace, "owner"), "owner Ready")
    uid = cr_status(kube_cluster, namespace, "owner")["uid"]

    intruder = bucket("intruder", 99, resourceName="shared", importId=f"{SPACE}/shared")
    kube_cluster.kubectl("apply", "-f", "-", input=intruder, namespace=namespace)

    def blocked() -> dict[str, Any]:
        condition = condition_of(cr_status(kube_cluster, namespace, "intruder"), "Blocked")
        return condition if condition.get("status") == "True" else {}

    wait_until(lambda: bool(blocked()), "the intruder Blocked")
    assert blocked()["reason"] == "AlreadyManaged"
    binding = binding_of(kube_cluster, "Bucket", "shared")
    assert binding is not None and binding["spec"]["claimRef"]["name"] == "owner"
    assert binding["metadata"]["name"] in blocked()["message"], "the binding is named"
    assert "/owner" not in blocked()["message"], "another CR is never named"
    assert not cr_status(kube_cluster, namespace, "intruder").get("uid"), "never bound"

    # The owner keeps managing it; the intruder's parameters never reach the host.
    patch = json.dumps({"spec": {"parameters": {"region": "eu-west-1", "sizeGiB": 20}}})
    kube_cluster.kubectl("patch", "bucket", "owner", "--type=merge", "-p", patch,
                         namespace=namespace)  # fmt: skip

    def host_size() -> int:
        (resource,) = _host_resources(host, "Bucket")
        return int(resource["spec"]["sizeGiB"])

    wait_until(lambda: host_size() == 20, "the owner's update on the host")

    # Deleting the intruder (deletionPolicy Delete) deletes nothing on the host.
    kube_cluster.kubectl("delete", "bucket", "intruder", "--timeout=60s", namespace=namespace)
    (resource,) = _host_resources(host, "Bucket")
    assert resource["metadata"]["uid"] == uid and host_size() == 20
    assert not any(op["verb"] == "delete" for op in _host_operations(host))
    wait_until(lambda: is_ready(kube_cluster, namespace, "owner"), "the owner Ready, untouched")
    assert cr_status(kube_cluster, namespace, "owner")["uid"] == uid
