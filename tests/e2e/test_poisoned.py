"""A poisoned object stays one object's problem (docs/architecture.md, "Reading what the API server
sends"): a Bucket whose free-form `labels` is nested as deep as the API server still serves back,
next to ordinary Buckets of another namespace, on the real API server with the real operator
process (all namespaces) and the reference host. The bounded Bucket CRD refuses such an object,
and prunes one stored before it when it serves it, so the objects are made (and read) under the
CRD from before the bounds: the depth-safe decoding holds whatever the CRDs installed are."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fixtures_kube import REPO, KubeCluster, apply_crds, wait_until
from manifests import bucket
from operator_process import Operator, condition_of, is_ready, operator_process, serving
from processes import free_port
from tenancy import granted

from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

pytestmark = [pytest.mark.kube, pytest.mark.host]
REF = load_registry().default_create_ref(FormLine("storage.takoform.io/v1", "Bucket"))
assert REF is not None
EXACT = {"definitionVersion": REF.definition_version, "schemaDigest": REF.schema_digest}
PLUGIN = Path(sys.executable).with_name("kubectl-takoform")
BUCKETS = "/v1alpha3/spaces/team-a/forms/storage.takoform.io/v1/Bucket/resources"

#: The deepest `labels` the API server (v1.35) both accepts and serves back: its decoder stops at
#: 10,000 levels, and the managedFields of an object repeat the nesting 7 levels deeper (9,993 to
#: 9,996 are stored but then cannot be read back by the API server itself, see the docs).
DEEPEST_SERVED = 9992


def nested(depth: int, *, lists: bool = False) -> str:
    """A JSON value nested `depth` levels deep (objects, or lists)."""
    if lists:
        return "[" * depth + "]" * depth
    return '{"a":' * depth + '"x"' + "}" * depth


def deep_bucket(name: str, labels: str) -> str:
    """A Bucket whose labels is the JSON text `labels` (built as text: Python's json would refuse
    to write it)."""
    head = json.loads(bucket(name, 5))
    text = json.dumps(head)
    return text.replace('"sizeGiB": 5}', '"sizeGiB": 5, "labels": ' + labels + "}")


def status_of(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    """The status alone (the whole object is too deep for Python's json, as it was for kopf)."""
    found = cluster.kubectl(
        "get", "bucket", name, "-o", "jsonpath={.status}", namespace=namespace, check=False
    )
    return dict(json.loads(found.stdout or "{}")) if found.returncode == 0 else {}


def create_raw(cluster: KubeCluster, namespace: str, text: str, where: Path) -> None:
    """POST the manifest as it is (kubectl apply would parse and re-encode it first)."""
    where.write_text(text)
    url = f"/apis/storage.takoform.io/v1/namespaces/{namespace}/buckets"
    cluster.kubectl("create", "--raw", url, "-f", str(where))


BUCKET_CRD = REPO / "crds" / "buckets.storage.takoform.io.yaml"


def loosened_bucket_crd(where: Path) -> Path:
    """The Bucket CRD as it was before its `labels` were bounded: free JSON, nested as deep as
    the API server allows. What an install finds stored after it upgraded its CRDs."""
    crd = yaml.safe_load(BUCKET_CRD.read_text())
    for version in crd["spec"]["versions"]:
        parameters = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
            "parameters"
        ]
        parameters["properties"]["labels"] = {"x-kubernetes-preserve-unknown-fields": True}
    where.write_text(yaml.safe_dump(crd))
    return where


@contextlib.contextmanager
def before_the_bounds(cluster: KubeCluster, tmp_path: Path) -> Iterator[None]:
    """Bucket CRs created inside are created under the loosened CRD; the bounded one is applied
    again on the way out (as `make crds-upgrade` would), and they stay stored."""
    apply_crds(cluster, [loosened_bucket_crd(tmp_path / "loosened-bucket-crd.yaml")])
    try:
        yield
    finally:
        apply_crds(cluster, [BUCKET_CRD])


@dataclass
class Running:
    operator: Operator
    host: Any
    health: str

    def healthz(self) -> int:
        try:
            return httpx.get(self.health + "/healthz", timeout=5).status_code
        except httpx.HTTPError:
            return 0


@pytest.fixture
def all_namespaces(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    host_factory: Any,
    tmp_path: Path,
) -> Iterator[Callable[[list[str]], Running]]:
    """Start the operator for every namespace, with namespaces `names` granted team-a."""
    stack = contextlib.ExitStack()
    host = host_factory(commit_delay=0.0)
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a")

    def start(names: list[str]) -> Running:
        for name in names:
            stack.enter_context(granted(kube_cluster, name, ["team-a"]))
        port, health = free_port(), free_port()
        log = tmp_path / "operator.log"
        process = stack.enter_context(
            operator_process(
                kube_cluster.kubeconfig,
                host,
                None,
                log,
                METRICS_PORT=str(port),
                HEALTH_PORT=str(health),
                BIND_ADDRESS="127.0.0.1",
                POLL_READY_SECONDS="5",
            )
        )
        running = Operator(process, log, f"http://127.0.0.1:{port}/metrics")
        wait_until(lambda: serving(running), "the operator's metrics endpoint", timeout=30)
        return Running(running, host, f"http://127.0.0.1:{health}")

    with stack:
        try:
            yield start
        except BaseException:
            print(tmp_path.joinpath("operator.log").read_text(errors="replace")[-8000:])
            raise


def test_a_deeply_nested_bucket_is_its_own_problem(
    kube_cluster: KubeCluster,
    namespaces: Callable[[str], str],
    all_namespaces: Callable[[list[str]], Running],
    tmp_path: Path,
) -> None:
    poisoned, quiet = namespaces("poisoned"), namespaces("quiet")
    # Under a Bucket CRD whose labels are free JSON (the bounded one refuses these objects):
    # before the operator starts (its first list holds them) and after (its watch gets them).
    with before_the_bounds(kube_cluster, tmp_path):
        deep = deep_bucket("deep", nested(DEEPEST_SERVED))
        create_raw(kube_cluster, poisoned, deep, tmp_path / "a")
        running = all_namespaces([poisoned, quiet])
        create_raw(
            kube_cluster,
            poisoned,
            deep_bucket("deep-list", nested(DEEPEST_SERVED, lists=True)),
            tmp_path / "b",
        )
        for name in ("one", "two"):
            kube_cluster.apply(bucket(name, 10), namespace=quiet)
        for name in ("one", "two"):
            wait_until(
                lambda name=name: is_ready(kube_cluster, quiet, name), f"{quiet}/{name} Ready", 60
            )
        for name in ("deep", "deep-list"):
            assert wait_for_degraded(kube_cluster, poisoned, name, "NestedTooDeep")
            condition = degraded_of(kube_cluster, poisoned, name)
            assert "spec.parameters.labels" in condition["message"]
            ready = condition_of(status_of(kube_cluster, poisoned, name), "Ready")
            assert ready.get("status") == "False"
        assert running.operator.process.poll() is None, "the operator is still running"
        assert running.healthz() == 200
    # The bounded CRD applied again (`make crds-upgrade`): the API server now prunes what its
    # schema does not admit when it serves the stored object, so the nesting never arrives; the
    # spec that does is refused as invalid, still one CR's problem.
    assert wait_for_degraded(kube_cluster, poisoned, "deep", "InvalidSpec")
    assert running.operator.process.poll() is None and running.healthz() == 200
    log = running.operator.log.read_text(errors="replace")
    assert "Traceback" not in log, log[-4000:]
    # Nothing of the deep labels reached the host.
    with running.host.api() as api:
        answer = api.get(BUCKETS, params=EXACT)
        answer.raise_for_status()
        names = {item["metadata"]["name"] for item in answer.json()["items"]}
    assert {"one", "two"} <= names
    assert "deep" not in names and "deep-list" not in names


def degraded_of(cluster: KubeCluster, namespace: str, name: str) -> dict[str, Any]:
    return condition_of(status_of(cluster, namespace, name), "Degraded")


def wait_for_degraded(cluster: KubeCluster, namespace: str, name: str, reason: str) -> bool:
    wait_until(
        lambda: (
            degraded_of(cluster, namespace, name).get("reason") == reason
            and degraded_of(cluster, namespace, name).get("status") == "True"
        ),
        f"{name} Degraded {reason}",
        timeout=60,
    )
    return True


#: The shallowest `labels` the API server stores but cannot serve back itself: the managedFields
#: of the object repeat the nesting 7 levels deeper, past the API server's own decoder limit.
UNSERVABLE = 9993


@pytest.fixture
def own_api_server(tmp_path: Path, kube_tools: Any) -> Iterator[KubeCluster]:
    """A private API server: the object below breaks Buckets on it for good, for every client."""
    from fixtures_kube import crd_files, localcluster

    local = localcluster.LocalCluster(tmp_path / "control-plane", die_with_parent=True)
    local.start()
    try:
        cluster = KubeCluster(local.kubeconfig, local.server, kube_tools.kubectl, False, tmp_path)
        apply_crds(cluster, crd_files())
        # A Bucket created before its labels were bounded (the bounded CRD refuses it).
        apply_crds(cluster, [loosened_bucket_crd(tmp_path / "loosened-bucket-crd.yaml")])
        yield cluster
    finally:
        local.stop()


def test_a_watch_that_fails_for_good_makes_healthz_fail(
    own_api_server: KubeCluster, tmp_path: Path
) -> None:
    cluster = own_api_server
    cluster.kubectl("create", "namespace", "poisoned")
    where = tmp_path / "unservable.json"
    where.write_text(deep_bucket("unservable", nested(UNSERVABLE)))
    url = "/apis/storage.takoform.io/v1/namespaces/poisoned/buckets"
    created = cluster.kubectl("create", "--raw", url, "-f", str(where), check=False)
    # Stored, but the API server cannot even answer the create with what it stored.
    assert "exceeded max depth" in created.stderr
    listed = cluster.kubectl("get", "--raw", url, check=False)
    assert listed.returncode != 0, "the API server can no longer list Buckets"

    port, health = free_port(), free_port()
    log = tmp_path / "operator.log"
    with operator_process(
        cluster.kubeconfig,
        None,
        "poisoned",
        log,
        METRICS_PORT=str(port),
        HEALTH_PORT=str(health),
        BIND_ADDRESS="127.0.0.1",
        IMPLICIT_HOST="false",
        WATCH_FAILURE_SECONDS="1",
    ) as process:
        running = Running(
            Operator(process, log, f"http://127.0.0.1:{port}/metrics"), None,
            f"http://127.0.0.1:{health}",
        )  # fmt: skip
        try:
            wait_until(lambda: serving(running.operator), "the operator's metrics", timeout=30)
            # kopf retries the list for about 54 s before it gives up once (and starts again).
            wait_until(lambda: running.healthz() == 503, "/healthz failing", timeout=150)
            answer = httpx.get(running.health + "/healthz", timeout=5)
            assert "/apis/storage.takoform.io/v1/namespaces/poisoned/buckets" in answer.text
            assert "takoformbindings" not in answer.text, "only the failing watch is named"
            assert process.poll() is None, "alive: the kubelet's probe restarts it"
        except BaseException:
            print(running.operator.log_tail())
            raise


def test_the_plugin_lists_blocked_crs_past_a_deeply_nested_one(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    namespaces: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """`kubectl takoform blocked -A` reads the API server's answers depth-safe, as the operator
    does: one old Bucket nested as deep as the API server serves is no traceback, and the
    Blocked CR beside it is listed."""
    poisoned = namespaces("poisoned")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOFORM_")}
    env["KUBECONFIG"] = str(kube_cluster.kubeconfig)
    with before_the_bounds(kube_cluster, tmp_path):
        create_raw(
            kube_cluster, poisoned, deep_bucket("deep", nested(DEEPEST_SERVED)), tmp_path / "a"
        )
        kube_cluster.apply(bucket("blocked", 1), namespace=poisoned)
        blocked = {
            "type": "Blocked",
            "status": "True",
            "reason": "SpaceNotGranted",
            "message": "no grant",
            "lastTransitionTime": "2026-12-04T00:00:00Z",
        }
        kube_cluster.kubectl(
            "patch", "buckets.storage.takoform.io", "blocked", "--subresource=status",
            "--type=merge", "-p", json.dumps({"status": {"conditions": [blocked]}}),
            namespace=poisoned,
        )  # fmt: skip
        answer = subprocess.run(
            [str(PLUGIN), "blocked", "-A"],
            capture_output=True, text=True, env=env, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert answer.returncode == 0, answer.stderr[-4000:]
    assert "Traceback" not in answer.stderr
    (row,) = [line for line in answer.stdout.splitlines() if poisoned in line]
    assert "blocked" in row and "SpaceNotGranted" in row, answer.stdout
