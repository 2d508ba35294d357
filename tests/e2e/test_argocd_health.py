"""The GitOps health checks on the real API server. docs/argocd-health.md's install command,
run as written, merges the chart's argocd-cm patch: one key per Form line holding exactly the
chart's script, the keys that were there kept, an older script replaced. Then both health
checks, the Lua (real lua5.1) and the Flux healthCheckExprs (Flux's own CEL status reader),
on CR bodies the real operator wrote through every state a GitOps tool meets."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import waiting
from argocd import health
from fixtures_kube import REPO, KubeCluster, drop_namespace
from flux import flux_status
from manifests import bucket

from takoform_operator.generate.argocd import CM_PATCH_PATH, DOC_PATH, LUA_PATH, health_key
from takoform_operator.registry_data import load_registry

pytestmark = pytest.mark.kube

DOC = (REPO / DOC_PATH).read_text(encoding="utf-8")
LUA = (REPO / LUA_PATH).read_text(encoding="utf-8")
KEYS = {health_key(line) for line in load_registry().lines()}


def _block(language: str, after: str) -> str:
    found = re.search(rf"{re.escape(after)}.*?```{language}\n(.*?)```", DOC, re.S)
    assert found, f"no {language} block after {after!r} in {DOC_PATH}"
    return found.group(1)


def _argocd_cm(cluster: KubeCluster, namespace: str) -> None:
    existing = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "argocd-cm", "namespace": namespace},
        "data": {"url": "https://argocd.example.com"},
    }
    cluster.apply(json.dumps(existing))


def _data(cluster: KubeCluster, namespace: str) -> dict[str, Any]:
    data: dict[str, Any] = cluster.kubectl_json(
        "get", "configmap", "argocd-cm", namespace=namespace
    )["data"]
    return data


def test_the_generated_command_installs_every_key(
    kube_cluster: KubeCluster, kube_namespace: str, kube_tools: Any, tmp_path: Path
) -> None:
    _argocd_cm(kube_cluster, kube_namespace)
    command = _block("sh", "## Install").replace(
        "--namespace argocd", f"--namespace {kube_namespace}"
    )
    assert CM_PATCH_PATH in command, "the shipped file, applied in one step"
    env = {
        **os.environ,
        "KUBECONFIG": str(kube_cluster.kubeconfig),
        "PATH": f"{kube_tools.kubectl.parent}{os.pathsep}{os.environ['PATH']}",
    }
    run = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", command],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    data = _data(kube_cluster, kube_namespace)
    assert set(data) == KEYS | {"url"}, "one key per Form line, the other keys kept"
    assert all(data[key] == LUA for key in KEYS)


def test_the_patch_replaces_an_older_script(kube_cluster: KubeCluster, kube_namespace: str) -> None:
    _argocd_cm(kube_cluster, kube_namespace)
    stale = {"data": {key: "return {status = 'Healthy'}\n" for key in sorted(KEYS)[:3]}}
    kube_cluster.kubectl(
        "patch", "configmap", "argocd-cm", "--type=merge", f"--patch={json.dumps(stale)}",
        namespace=kube_namespace,
    )  # fmt: skip
    kube_cluster.kubectl(
        "patch", "configmap", "argocd-cm", "--type=merge",
        f"--patch-file={REPO / CM_PATCH_PATH}", namespace=kube_namespace,
    )  # fmt: skip
    data = _data(kube_cluster, kube_namespace)
    assert set(data) == KEYS | {"url"}
    assert all(data[key] == LUA for key in KEYS)


# -- both health checks on CRs the real operator wrote -------------------------------------------


def _condition(body: dict[str, Any], kind: str) -> dict[str, Any]:
    conditions = (body.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind), {})


def _holds(kind: str, status: str = "True", reason: str | tuple[str, ...] = ()) -> Any:
    reasons = (reason,) if isinstance(reason, str) else reason

    def test(body: dict[str, Any]) -> bool:
        found = _condition(body, kind)
        return found.get("status") == status and (not reasons or found.get("reason") in reasons)

    return test


#: sample -> (Argo CD health, Flux status with the chart's healthCheckExprs, kstatus alone).
#: kstatus alone reads a CR without any status as Current (nothing says otherwise), and a
#: Blocked one as Failed, from its Stalled condition, as the exprs do: neither waits out its
#: timeout. With the exprs a CR without status is Unknown (an evaluation error: Flux keeps
#: waiting, as for InProgress).
EXPECTED = {
    "no status yet": ("Progressing", "Unknown", "Current"),
    "creating": ("Progressing", "InProgress", "InProgress"),
    "ready": ("Healthy", "Current", "Current"),
    "blocked (space not granted)": ("Degraded", "Failed", "Failed"),
    "blocked (uid mismatch)": ("Degraded", "Failed", "Failed"),
    "degraded (operation failed)": ("Degraded", "InProgress", "InProgress"),
    "drifted under Observe": ("Suspended", "InProgress", "InProgress"),
    "paused": ("Suspended", "Current", "Current"),
    "paused, spec edited": ("Suspended", "InProgress", "InProgress"),
    "deleting (paused)": ("Suspended", "InProgress", "Terminating"),
}


@pytest.mark.host
def test_real_statuses_as_argo_cd_and_flux_see_them(
    operator: tuple[Any, Any, str], kube_cluster: KubeCluster
) -> None:
    """CR bodies exactly as the API server serves them after the real operator wrote their
    status, one per state a GitOps tool meets, judged by the chart's Lua (real lua5.1) and by
    Flux's CEL status reader with the chart's healthCheckExprs (and by kstatus alone, which is
    what a Kustomization without them, cli-utils and older Flux do: a Blocked CR is Failed,
    from its Stalled condition)."""
    _running, host, namespace = operator
    samples: dict[str, dict[str, Any]] = {}

    def capture(sample: str, name: str, test: Any, ns: str = namespace) -> None:
        last: list[dict[str, Any]] = []

        def probe() -> dict[str, Any] | None:
            body: dict[str, Any] = kube_cluster.get_object("bucket", name, ns)
            assert body is not None, f"{name} is gone"
            last[:] = [body]
            return body if test(body) else None

        try:
            samples[sample] = waiting.wait_for(probe, f"{name}: {sample}", timeout=60, interval=0.2)
        except waiting.TimedOut as timed_out:
            status = json.dumps(last[0].get("status") if last else None, indent=1)
            raise waiting.TimedOut(f"{timed_out}; its status then: {status}") from None

    # A namespace the operator does not serve: the CR as it is before any status write.
    unwatched = f"{namespace}-idle"[:63]
    kube_cluster.kubectl("create", "namespace", unwatched)
    try:
        kube_cluster.apply(bucket("idle"), namespace=unwatched)
        capture("no status yet", "idle", lambda body: "metadata" in body, ns=unwatched)
        assert "status" not in samples["no status yet"]
    finally:
        drop_namespace(kube_cluster, unwatched)

    # The host holds every operation running: a create the host accepted, not finished.
    host.set_faults(stuckOperations=True)
    kube_cluster.apply(bucket("pending"), namespace=namespace)
    # CreatePending until the host accepted it, OperationRunning from the next look on.
    capture(
        "creating", "pending", _holds("Reconciling", reason=("CreatePending", "OperationRunning"))
    )
    assert samples["creating"]["status"]["pendingOperationVerb"] == "Create"
    host.set_faults(stuckOperations=False)

    for name in ("ready", "watched", "recreated"):
        kube_cluster.apply(bucket(name), namespace=namespace)
    kube_cluster.apply(bucket("elsewhere", space="team-z"), namespace=namespace)
    for name in ("pending", "ready", "watched", "recreated"):
        capture("ready", name, _holds("Ready"))
    capture("blocked (space not granted)", "elsewhere", _holds("Blocked", reason="SpaceNotGranted"))

    # The host fails every operation until the sample is taken (its only operations are the
    # failing create's retries): Degraded, retried with back-off. One failure alone would let the
    # first retry turn it Ready before a slow poll saw it.
    host.set_faults(failNextOperations=1000)
    kube_cluster.apply(bucket("failing"), namespace=namespace)
    capture("degraded (operation failed)", "failing", _holds("Degraded", reason="OperationFailed"))
    host.set_faults(failNextOperations=0)

    # Deleted and recreated on the host, out of band: Blocked UidMismatch.
    host.admin(
        "POST", "/admin/v1/resources/recreate",
        {"space": "team-a", "apiVersion": "storage.takoform.io/v1", "kind": "Bucket",
         "name": "recreated"},
    ).raise_for_status()  # fmt: skip
    capture("blocked (uid mismatch)", "recreated", _holds("Blocked", reason="UidMismatch"))

    # Observe only, and the spec differs from the host: reported, never repaired.
    kube_cluster.kubectl(
        "patch", "bucket", "watched", "--type=merge",
        "-p", '{"spec": {"managementPolicy": "Observe", "parameters": {"sizeGiB": 9}}}',
        namespace=namespace,
    )  # fmt: skip
    capture("drifted under Observe", "watched", _holds("Drifted", reason="SpecDrift"))

    # Paused, then a spec edit the paused operator does not observe, then deleted while paused.
    kube_cluster.kubectl(
        "annotate", "bucket", "ready", "takoform.io/paused=true", namespace=namespace
    )
    capture("paused", "ready", _holds("Reconciling", "False", "Paused"))
    kube_cluster.kubectl(
        "patch", "bucket", "ready", "--type=merge",
        "-p", '{"spec": {"parameters": {"sizeGiB": 11}}}', namespace=namespace,
    )  # fmt: skip
    capture(
        "paused, spec edited",
        "ready",
        lambda body: body["metadata"]["generation"] > body["status"]["observedGeneration"],
    )
    kube_cluster.kubectl("delete", "bucket", "ready", "--wait=false", namespace=namespace)
    capture("deleting (paused)", "ready", _holds("Deleting", reason="Paused"))
    assert "deletionTimestamp" in samples["deleting (paused)"]["metadata"]
    kube_cluster.kubectl("annotate", "bucket", "ready", "takoform.io/paused-", namespace=namespace)

    names = list(EXPECTED)
    assert set(samples) == set(names)
    bodies = [samples[name] for name in names]
    with_exprs = flux_status(bodies)
    alone = flux_status(bodies, exprs=[])
    seen = {
        name: (health(body)[0], flux.status, plain.status)
        for name, body, flux, plain in zip(names, bodies, with_exprs, alone, strict=True)
    }
    assert seen == EXPECTED, json.dumps(samples, indent=1)[:20000]
    # What Argo CD shows and what Flux records (an error only where no status exists at all).
    assert health(samples["blocked (uid mismatch)"])[1].startswith("Blocked UidMismatch: ")
    errors = {name: v.error for name, v in zip(names, with_exprs, strict=True) if v.error}
    assert list(errors) == ["no status yet"] and "no such attribute" in errors["no status yet"]
    # kstatus's own reading: the Stalled message is the Blocked one, remedies included.
    blocked = _condition(samples["blocked (uid mismatch)"], "Blocked")
    assert alone[names.index("blocked (uid mismatch)")].message == blocked["message"]
    ready = _condition(samples["ready"], "Reconciling")
    assert (ready["status"], ready["reason"]) == ("False", "Available"), "true now, not stale"
    kube_cluster.kubectl(
        "wait", "--for=delete", "bucket/ready", "--timeout=60s", namespace=namespace
    )
