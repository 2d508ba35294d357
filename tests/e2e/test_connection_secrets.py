"""Connection Secrets end to end: the operator process, the reference host process and a real
kube-apiserver with its garbage collector (tests/kube/test_control_plane.py proves it runs).

The sensitive outputs the host reports land in a Secret of the CR's namespace, owned by the CR,
written again only when the host's values change, and nowhere else: not in the status, not in
an Event, not in the operator's log, not in its metrics."""

from __future__ import annotations

import base64
import json
import re
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from operator_process import Operator, cr_status, is_ready

pytestmark = [
    pytest.mark.kube,
    pytest.mark.host,
    pytest.mark.host_args("--access-log"),
    pytest.mark.operator_settings(POLL_READY_SECONDS="1"),
]

GROUP = "database.takoform.io/v1"


def _manifest(kind: str, name: str, parameters: dict[str, Any], **spec: Any) -> str:
    group = "pki.takoform.io/v1" if kind == "Certificate" else GROUP
    return json.dumps(
        {
            "apiVersion": group,
            "kind": kind,
            "metadata": {"name": name},
            "spec": {"space": "team-a", "parameters": parameters, **spec},
        }
    )


POSTGRES = {"region": "eu-west-1", "engineVersion": "16", "storageGiB": 100}
REDIS = {"region": "eu-west-1", "memoryGiB": 4}
CERTIFICATE = {"commonName": "api.example.com", "issuer": "internal-ca"}


def _host_resource(host: Any, kind: str, name: str, status: dict[str, Any]) -> dict[str, Any]:
    ref = status["formRef"]
    group = ref["apiVersion"]
    with host.api() as api:
        answer = api.get(
            f"/v1alpha3/spaces/team-a/forms/{group}/{kind}/resources/{name}",
            params={
                "definitionVersion": ref["definitionVersion"],
                "schemaDigest": ref["schemaDigest"],
            },
        )
    answer.raise_for_status()
    resource: dict[str, Any] = answer.json()
    return resource


def _secret(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any] | None:
    secret: dict[str, Any] | None = cluster.get_object("secret", name, namespace)
    return secret


def _decoded(secret: dict[str, Any]) -> dict[str, str]:
    return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}


def _cr(cluster: KubeCluster, namespace: str, kind: str, name: str) -> dict[str, Any]:
    cr: dict[str, Any] = cluster.kubectl_json("get", kind.lower(), name, namespace=namespace)
    return cr


def _reads_of(host: Any, kind: str, name: str) -> int:
    return host.log_path.read_text(errors="replace").count(f"/{kind}/resources/{name}?")


def test_sensitive_outputs_go_to_an_owned_secret_and_nowhere_else(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    operator, host, namespace = operator
    kube_cluster.apply(_manifest("PostgresInstance", "orders", POSTGRES), namespace=namespace)
    wait_until(
        lambda: is_ready(kube_cluster, namespace, "orders", "postgresinstance"), "orders Ready"
    )
    status = cr_status(kube_cluster, namespace, "orders", "postgresinstance")
    assert status["formRef"]["definitionVersion"] == "1.2.0"
    outputs = _host_resource(host, "PostgresInstance", "orders", status)["status"]["outputs"]
    sensitive = {k: outputs[k] for k in ("username", "password", "connectionString")}
    assert len(sensitive["password"]) >= 24

    # The Secret: the documented default name, the host's values, owned by the CR.
    secret = wait_until_secret(kube_cluster, namespace, "orders-connection")
    assert _decoded(secret) == sensitive
    assert secret["type"] == "Opaque"
    cr = _cr(kube_cluster, namespace, "PostgresInstance", "orders")
    assert secret["metadata"]["ownerReferences"] == [
        {
            "apiVersion": GROUP,
            "kind": "PostgresInstance",
            "name": "orders",
            "uid": cr["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    labels = secret["metadata"]["labels"]
    assert labels["takoform.io/owner-name"] == "orders"
    assert labels["takoform.io/owner-kind"] == "PostgresInstance"
    assert labels["app.kubernetes.io/managed-by"] == "takoform-operator"

    # The status shows the other outputs and none of the sensitive ones.
    assert status["outputs"]["host"] == outputs["host"] and status["outputs"]["port"] == 5432
    assert not set(sensitive) & set(status["outputs"])

    # Steady state: three more host reads of the resource, and the Secret was not written.
    version = secret["metadata"]["resourceVersion"]
    reads = _reads_of(host, "PostgresInstance", "orders")
    wait_until(
        lambda: _reads_of(host, "PostgresInstance", "orders") >= reads + 3,
        "three more reads of orders",
        timeout=30,
    )
    assert _secret_version(kube_cluster, namespace, "orders-connection") == version

    # The host rotates the credentials: the Secret follows, the status still holds none.
    host.admin(
        "POST",
        "/admin/v1/resources/rotate-secrets",
        {"space": "team-a", "apiVersion": GROUP, "kind": "PostgresInstance", "name": "orders"},
    )
    rotated = _host_resource(host, "PostgresInstance", "orders", status)["status"]["outputs"]
    assert rotated["password"] != sensitive["password"]
    wait_until(
        lambda: (
            _decoded(_secret(kube_cluster, namespace, "orders-connection") or {}).get("password")
            == rotated["password"]
        ),
        "the Secret holds the rotated password",
        timeout=30,
    )
    values = [*sensitive.values(), rotated["password"], rotated["connectionString"]]

    # Nowhere else: the CR (status included), the namespace's Events, the log, the metrics.
    events = kube_cluster.kubectl("get", "events", "-o", "json", namespace=namespace).stdout
    where = {
        "the CR": json.dumps(_cr(kube_cluster, namespace, "PostgresInstance", "orders")),
        "the Events": events,
        "the operator's log": operator.log.read_text(errors="replace"),
        "the metrics": operator.metrics(),
    }
    assert "orders-connection" in where["the operator's log"], "the log names the Secret"
    written = [line for line in where["the operator's log"].splitlines() if "written" in line]
    assert written and all(re.search(r" look=[0-9a-f]{8}\b", line) for line in written), (
        "a line logged within a look carries its id"
    )
    for place, text in where.items():
        for value in values:
            assert value not in text, f"a sensitive value appears in {place}"


def wait_until_secret(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = []

    def present() -> bool:
        secret = _secret(cluster, namespace, name)
        if secret is not None and secret.get("data"):
            found.append(secret)
            return True
        return False

    wait_until(present, f"Secret {namespace}/{name}", timeout=30)
    return found[-1]


def _secret_version(cluster: KubeCluster, namespace: str, name: str) -> str:
    secret = _secret(cluster, namespace, name)
    assert secret is not None
    return str(secret["metadata"]["resourceVersion"])


def test_a_named_secret_is_kept_on_orphan_and_collected_on_delete(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _, host, namespace = operator
    # A custom name, deletionPolicy Orphan.
    kube_cluster.apply(
        _manifest(
            "RedisCache",
            "sessions",
            REDIS,
            deletionPolicy="Orphan",
            writeConnectionSecretToRef={"name": "sessions-auth"},
        ),
        namespace=namespace,
    )
    # The default name, deletionPolicy Delete.
    kube_cluster.apply(
        _manifest("Certificate", "api", CERTIFICATE, deletionPolicy="Delete"), namespace=namespace
    )
    auth = wait_until_secret(kube_cluster, namespace, "sessions-auth")
    status = cr_status(kube_cluster, namespace, "sessions", "rediscache")
    outputs = _host_resource(host, "RedisCache", "sessions", status)["status"]["outputs"]
    assert _decoded(auth) == {
        "authToken": outputs["authToken"],
        "connectionString": outputs["connectionString"],
    }
    assert outputs["connectionString"].startswith("rediss://:" + outputs["authToken"] + "@")
    assert _secret(kube_cluster, namespace, "sessions-connection") is None
    tls = wait_until_secret(kube_cluster, namespace, "api-connection")
    assert set(_decoded(tls)) == {"privateKey", "certificateChain"}
    assert _decoded(tls)["privateKey"].startswith("-----BEGIN PRIVATE KEY-----\n")

    # Orphan: the CR goes, the Secret stays, no longer owned (the garbage collector would
    # otherwise remove it), with the values the host still serves.
    kube_cluster.kubectl("delete", "rediscache", "sessions", "--timeout=60s", namespace=namespace)
    kept = _secret(kube_cluster, namespace, "sessions-auth")
    assert kept is not None and _decoded(kept) == _decoded(auth)
    assert not kept["metadata"].get("ownerReferences")

    # Delete: the garbage collector removes the Secret with its owner.
    kube_cluster.kubectl("delete", "certificate", "api", "--timeout=60s", namespace=namespace)
    wait_until(
        lambda: _secret(kube_cluster, namespace, "api-connection") is None,
        "the garbage collector to delete api-connection",
        timeout=60,
    )
    # The Orphan's Secret is still there after the collector's pass over the namespace.
    assert _secret(kube_cluster, namespace, "sessions-auth") is not None


def test_a_secret_that_is_not_ours_is_left_alone(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _, _, namespace = operator
    kube_cluster.kubectl(
        "create", "secret", "generic", "app-credentials", "--from-literal=password=mine",
        namespace=namespace,
    )  # fmt: skip
    kube_cluster.apply(
        _manifest(
            "PostgresInstance",
            "billing",
            POSTGRES,
            writeConnectionSecretToRef={"name": "app-credentials"},
        ),
        namespace=namespace,
    )
    wait_until(
        lambda: (
            "ConnectionSecretNotOurs"
            in kube_cluster.kubectl(
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=billing",
                namespace=namespace,
            ).stdout
        ),
        "a Warning Event ConnectionSecretNotOurs",
        timeout=30,
    )
    untouched = _secret(kube_cluster, namespace, "app-credentials")
    assert untouched is not None and _decoded(untouched) == {"password": "mine"}
    assert not untouched["metadata"].get("ownerReferences")
    assert is_ready(kube_cluster, namespace, "billing", "postgresinstance")
