"""docs/deployment.md "Uninstall", run as written on a private API server: the chart installed
with real helm (its CRDs and the bindings' admission policy from `crds/`), the release's
operator running as the release's ServiceAccount with the release's settings (a process here,
as no node runs its pod), the reference host as a real process. Two namespaces' Buckets: one
released first (Orphan), one deleted with its host resource. Afterwards no CR, no binding, no
finalizer and nothing labelled with the release or the project is left."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_helm import CHART
from fixtures_kube import REPO, KubeCluster, wait_until
from manifests import bucket
from operator_process import Operator, is_ready, operator_process, serving
from processes import free_port

pytestmark = [pytest.mark.kube, pytest.mark.host]

DOC = (REPO / "docs" / "deployment.md").read_text(encoding="utf-8")
RELEASE, NAMESPACE = "takoform", "takoform-system"
SERVICE_ACCOUNT = f"{RELEASE}-takoform-operator"
KEPT, DROPPED = "team-kept", "team-dropped"
BUCKET_PATH = "/v1alpha3/spaces/team-a/forms/storage.takoform.io/v1/Bucket/resources"


def _steps() -> list[str]:
    """The sh blocks of the Uninstall section, in order."""
    section = DOC.split("\n## Uninstall\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert len(blocks) == 5, blocks
    return [re.sub(r"(?m)^   ", "", block) for block in blocks]


@pytest.fixture
def own_api_server(tmp_path: Path, kube_tools: Any) -> Iterator[KubeCluster]:
    """A private API server: the procedure deletes the CRDs, which every other test needs."""
    from fixtures_kube import localcluster

    local = localcluster.LocalCluster(tmp_path / "control-plane", die_with_parent=True)
    local.start()
    try:
        yield KubeCluster(local.kubeconfig, local.server, kube_tools.kubectl, False, tmp_path)
    finally:
        local.stop()


def _sh(cluster: KubeCluster, helm: Any, script: str, timeout: float = 300) -> str:
    tools = f"{cluster.kubectl_bin.parent}{os.pathsep}{Path(helm.binary).parent}"
    env = {
        **helm.env,
        "KUBECONFIG": str(cluster.kubeconfig),
        "PATH": f"{tools}{os.pathsep}{os.environ['PATH']}",
    }
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip
    assert run.returncode == 0, f"{script}\nfailed: {run.stderr}{run.stdout}"
    return run.stdout + run.stderr


def _release_env(cluster: KubeCluster, helm: Any) -> dict[str, str]:
    """The operator container's TAKOFORM_* settings from the release's own manifest; what the
    kubelet would fill in (the pod's name, the node address) and the ports are set here."""
    manifest = helm(
        "get", "manifest", RELEASE, "--namespace", NAMESPACE,
        f"--kubeconfig={cluster.kubeconfig}",
    ).stdout  # fmt: skip
    deployment = next(
        doc
        for doc in yaml.safe_load_all(manifest)
        if doc and doc["kind"] == "Deployment" and doc["metadata"]["name"] == SERVICE_ACCOUNT
    )
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    settings = {
        e["name"].removeprefix("TAKOFORM_"): e["value"]
        for e in container["env"]
        if e["name"].startswith("TAKOFORM_") and "value" in e
    }
    return {
        **settings,
        # In the pod: its ServiceAccount's mounted namespace file, and the downward API.
        "OPERATOR_NAMESPACE": NAMESPACE,
        "POD_NAME": f"{SERVICE_ACCOUNT}-0",
        "BIND_ADDRESS": "127.0.0.1",
        "METRICS_PORT": str(free_port()),
        "HEALTH_PORT": "0",
        "POLL_READY_SECONDS": "2",
    }


def _host_names(host: Any, ref: dict[str, str]) -> set[str]:
    """Which of the two Buckets the host serves under the FormRef the CRs recorded."""
    params = {key: ref[key] for key in ("definitionVersion", "schemaDigest")}
    with host.api() as api:
        return {
            name
            for name in ("kept", "dropped")
            if api.get(f"{BUCKET_PATH}/{name}", params=params).status_code == 200
        }


def _labelled(cluster: KubeCluster, selector: str) -> list[str]:
    """Every object of every listable kind that carries the label `selector`."""
    kinds = cluster.kubectl("api-resources", "--verbs=list", "-o", "name").stdout.split()
    found = cluster.kubectl(
        "get", ",".join(kinds), "--all-namespaces", "-l", selector, "-o", "name",
        "--ignore-not-found",
    ).stdout  # fmt: skip
    names: list[str] = found.split()
    return names


def test_the_documented_uninstall_leaves_nothing_and_strands_no_finalizer(
    own_api_server: KubeCluster,
    helm: Any,
    host_factory: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = own_api_server
    host = host_factory(commit_delay=0.05)
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a").raise_for_status()
    for namespace in (NAMESPACE, KEPT, DROPPED):
        cluster.kubectl("create", "namespace", namespace)
    # The token Secret, opted in for the implicit host (the chart README's first step).
    cluster.kubectl(
        "create", "secret", "generic", "takoform-host-token",
        f"--from-literal=token={host.token}", namespace=NAMESPACE,
    )  # fmt: skip
    cluster.kubectl(
        "annotate", "secret", "takoform-host-token",
        f"takoform.io/host-credential-for=default={host.url}", namespace=NAMESPACE,
    )  # fmt: skip
    helm(
        "install", RELEASE, str(CHART), f"--kubeconfig={cluster.kubeconfig}",
        "--namespace", NAMESPACE,
        "--set", f"host.url={host.url}", "--set", "host.insecure=true",
        "--set", "grants[0].name=teams", "--set", "grants[0].spaces={team-a}",
        "--set", f"grants[0].namespaces.names={{{KEPT},{DROPPED}}}",
        "--set", "rbac.userRoles.create=false",
        timeout=180,
    )  # fmt: skip
    token = cluster.kubectl(
        "create", "token", SERVICE_ACCOUNT, "--duration=1h", namespace=NAMESPACE
    ).stdout.strip()
    # The pod's namespace, as the downward API gives it to the chart's container.
    monkeypatch.setenv("POD_NAMESPACE", NAMESPACE)
    log = tmp_path / "operator.log"
    settings = _release_env(cluster, helm)
    steps = _steps()
    with operator_process(cluster.token_kubeconfig(token), None, None, log, **settings) as process:
        running = Operator(process, log, f"http://127.0.0.1:{settings['METRICS_PORT']}/metrics")
        try:
            wait_until(lambda: serving(running), "the release's operator serving", timeout=60)
            cluster.apply(bucket("kept"), namespace=KEPT)
            cluster.apply(bucket("dropped"), namespace=DROPPED)
            for namespace, name in ((KEPT, "kept"), (DROPPED, "dropped")):
                wait_until(
                    lambda ns=namespace, n=name: is_ready(cluster, ns, n),  # type: ignore[misc]
                    f"{namespace}/{name} Ready",
                    90,
                )
            ref = cluster.kubectl_json("get", "bucket", "kept", namespace=KEPT)["status"]["formRef"]
            assert _host_names(host, ref) == {"kept", "dropped"}
            bindings = cluster.kubectl_json("get", "takoformbindings")["items"]
            assert len(bindings) == 2
            assert all(b["metadata"].get("finalizers") for b in bindings), "protected while Bound"

            # 1. Release what is kept; 2. delete every CR and wait.
            _sh(cluster, helm, steps[0].replace("NAMESPACE", KEPT))
            released = cluster.kubectl_json("get", "bucket", "kept", namespace=KEPT)
            assert released["spec"]["deletionPolicy"] == "Orphan"
            listed = _sh(cluster, helm, steps[1])
            assert "No resources found" in listed, listed
            # 3. No binding Bound: the Delete one is gone, the Orphan one Released, unprotected.
            printed = _sh(cluster, helm, steps[2])
            left = cluster.kubectl_json("get", "takoformbindings")["items"]
            assert [b["spec"]["phase"] for b in left] == ["Released"], printed
            assert not left[0]["metadata"].get("finalizers"), left[0]["metadata"]
            assert _host_names(host, ref) == {"kept"}, (
                "Orphan kept its host resource, Delete did not"
            )
            # 4. The release goes; its operator with it.
            _sh(cluster, helm, steps[3])
        except BaseException:
            print(running.log_tail())
            raise
    # 5. What helm leaves: the CRDs, the admission policy, the namespace.
    kept_crds = cluster.kubectl(
        "get", "crd", "-l", "app.kubernetes.io/part-of=takoform-operator", "-o", "name"
    ).stdout.split()
    assert len(kept_crds) == len(list((CHART / "crds").glob("*.*.yaml"))), "helm keeps crds/"
    _sh(cluster, helm, steps[4])

    assert _labelled(cluster, "app.kubernetes.io/part-of=takoform-operator") == []
    assert _labelled(cluster, f"app.kubernetes.io/instance={RELEASE}") == []
    crds = cluster.kubectl("get", "crd", "-o", "name").stdout
    assert "takoform.io" not in crds, crds
    policies = cluster.kubectl(
        "get", "validatingadmissionpolicy,validatingadmissionpolicybinding", "-o", "name"
    ).stdout
    assert "takoform" not in policies, policies
    assert (
        helm("list", "--all-namespaces", f"--kubeconfig={cluster.kubeconfig}").stdout.count(RELEASE)
        == 0
    )
    assert cluster.get_object("namespace", NAMESPACE) is None
    # No object of the team namespaces is held by a finalizer of ours.
    for namespace in (KEPT, DROPPED):
        remaining = json.loads(
            cluster.kubectl("get", "all,secrets,events", "-o", "json", namespace=namespace).stdout
        )["items"]
        held = [
            o["metadata"]["name"]
            for o in remaining
            if any("takoform" in f for f in o["metadata"].get("finalizers") or ())
        ]
        assert held == [], held
    assert _host_names(host, ref) == {"kept"}
