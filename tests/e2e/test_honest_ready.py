"""Day-2 behaviour on the real parts (the operator process, a real kube-apiserver, the reference
host as a real process): a host outage keeps idle CRs Ready with one Warning each; a host
resource's own Degraded makes its CR not Ready; failures back off exponentially (measured from
the host's request log); a remedy printed in a condition runs as printed with the real kubectl."""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
from datetime import datetime
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import Operator, condition_of, cr_status, is_ready
from tenancy import grant_manifest

pytestmark = [pytest.mark.kube, pytest.mark.host]

BUCKET = {"apiVersion": "storage.takoform.io/v1", "kind": "Bucket"}


def _condition(cluster: KubeCluster, namespace: str, name: str, kind: str) -> dict[str, Any]:
    return condition_of(cr_status(cluster, namespace, name), kind)


def _events(cluster: KubeCluster, namespace: str, name: str) -> list[dict[str, Any]]:
    items = cluster.kubectl_json("get", "events", namespace=namespace)["items"]
    return [e for e in items if e["involvedObject"].get("name") == name]


def _warnings(cluster: KubeCluster, namespace: str, name: str, reason: str) -> int:
    """Warning Events about one CR with one reason, repeats (`count`) included."""
    return sum(
        int(e.get("count") or 1)
        for e in _events(cluster, namespace, name)
        if e["type"] == "Warning" and e["reason"] == reason
    )


def _table(cluster: KubeCluster, namespace: str, *extra: str) -> dict[str, dict[str, str]]:
    """`kubectl get buckets -o wide` as the API server renders the CRD's printer columns: row
    name -> column -> cell. Every row's cell starts where its column's header does."""
    printed = cluster.kubectl("get", "buckets", "-o", "wide", *extra, namespace=namespace).stdout
    header, *rows = printed.splitlines()
    columns = [(found.group(), found.start()) for found in re.finditer(r"\S+", header)]
    bounds = list(itertools.pairwise([start for _name, start in columns] + [None]))
    table = {}
    for row in rows:
        cells = {name: row[a:b].strip() for (name, _), (a, b) in zip(columns, bounds, strict=True)}
        table[cells["NAME"]] = cells
    return table


def _host_errors(operator: Operator, reason: str) -> float:
    found = re.findall(
        rf'^takoform_host_errors_total\{{[^}}]*reason="{reason}"[^}}]*\}} (\S+)$',
        operator.metrics(),
        re.M,
    )
    return sum(float(v) for v in found)


@pytest.mark.operator_settings(
    POLL_READY_SECONDS="1",
    BACKOFF_BASE_SECONDS="0.2",
    BACKOFF_CAP_SECONDS="1",
    HOST_READ_RETRIES="0",
    HOST_TIMEOUT_SECONDS="2",
)
def test_a_host_outage_keeps_idle_crs_ready_with_one_warning_each(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    running, host, namespace = operator
    names = ("idle-a", "idle-b")
    for name in names:
        kube_cluster.apply(bucket(name), namespace=namespace)
    for name in names:
        wait_until(lambda n=name: is_ready(kube_cluster, namespace, n), f"{name} Ready", 60)  # type: ignore[misc]
    ready_since = {n: _condition(kube_cluster, namespace, n, "Ready") for n in names}
    # Nothing in flight: Reconciling False, with the reason that is true now (not the
    # CreatePending it had while it was True).
    for name in names:
        reconciling = _condition(kube_cluster, namespace, name, "Reconciling")
        assert (reconciling["status"], reconciling["reason"]) == ("False", "Available"), name
    # Never Degraded, not paused, nothing else to say: empty cells.
    before = _table(kube_cluster, namespace)["idle-a"]
    assert (before["READY"], before["DEGRADED"], before["PAUSED"], before["MESSAGE"]) == (
        "True", "", "", "",
    )  # fmt: skip

    host.stop()
    try:

        def degraded(name: str) -> bool:
            condition = _condition(kube_cluster, namespace, name, "Degraded")
            return (condition.get("status"), condition.get("reason")) == (
                "True",
                "HostUnavailable",
            )

        for name in names:
            wait_until(lambda n=name: degraded(n), f"{name} Degraded HostUnavailable", 60)  # type: ignore[misc]
        seen = _host_errors(running, "HostUnavailable")
        # Several more looks of each CR during the outage (one error per look).
        wait_until(
            lambda: _host_errors(running, "HostUnavailable") >= seen + 3 * len(names),
            "more looks during the outage",
            60,
        )
        for name in names:
            assert _condition(kube_cluster, namespace, name, "Ready") == ready_since[name], (
                f"{name}: the last known Ready is kept as it was"
            )
        # What the on-call sees: Ready as last known, Degraded, and why.
        during = _table(kube_cluster, namespace)
        print("kubectl get buckets -o wide, host down:", during, sep="\n")
        for name in names:
            row = during[name]
            assert (row["READY"], row["REASON"], row["DEGRADED"]) == ("True", "Available", "True")
            assert row["MESSAGE"].startswith("host unavailable"), row
    finally:
        host.start()

    def cleared(name: str) -> bool:
        degraded = _condition(kube_cluster, namespace, name, "Degraded")
        return (degraded.get("status"), degraded.get("reason")) == ("False", "Available")

    for name in names:
        wait_until(lambda n=name: cleared(n), f"{name} Degraded cleared", 60)  # type: ignore[misc]
        # The Normal Event of the clearing (its reason what is true now) is posted after the
        # outage's Warning: once it is there, every Event of the outage is.
        wait_until(
            lambda n=name: any(  # type: ignore[misc]
                (e["type"], e["reason"], e["message"])
                == ("Normal", "Available", "Degraded cleared")
                for e in _events(kube_cluster, namespace, n)
            ),
            f"{name}: the Event of Degraded clearing",
        )
        assert is_ready(kube_cluster, namespace, name)
        assert _warnings(kube_cluster, namespace, name, "HostUnavailable") == 1, name

    # A paused CR says so in its column, and its message says how to resume.
    kube_cluster.kubectl(
        "annotate", "bucket", "idle-b", "takoform.io/paused=true", namespace=namespace
    )
    wait_until(
        lambda: (
            _condition(kube_cluster, namespace, "idle-b", "Reconciling").get("reason") == "Paused"
        ),
        "idle-b Paused",
        60,
    )
    paused = _table(kube_cluster, namespace)["idle-b"]
    assert (paused["READY"], paused["PAUSED"]) == ("True", "true")
    assert paused["MESSAGE"].startswith("paused by the annotation takoform.io/paused"), paused


def test_a_host_resource_degraded_on_the_host_makes_its_cr_not_ready(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    _running, host, namespace = operator
    kube_cluster.apply(bucket("sick"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "sick"), "sick Ready", 60)
    target = {"space": "team-a", **BUCKET, "name": "sick"}
    degraded = {
        "type": "Degraded",
        "status": "True",
        "reason": "Failed",
        "message": "volume is full",
        "hostReason": "DiskFull",
    }
    host.admin("POST", "/admin/v1/resources/conditions", {**target, "conditions": [degraded]})

    def not_ready() -> bool:
        ready = _condition(kube_cluster, namespace, "sick", "Ready")
        return (ready.get("status"), ready.get("reason")) == ("False", "HostDegraded")

    wait_until(not_ready, "sick not Ready (HostDegraded)", 60)
    condition = _condition(kube_cluster, namespace, "sick", "Degraded")
    assert condition["status"] == "True" and condition["reason"] == "HostDegraded"
    assert condition["message"] == "host reports Degraded: DiskFull: volume is full"

    healed = {**degraded, "status": "False", "reason": "Available", "message": "", "hostReason": ""}
    host.admin("POST", "/admin/v1/resources/conditions", {**target, "conditions": [healed]})
    wait_until(lambda: is_ready(kube_cluster, namespace, "sick"), "sick Ready again", 60)


_STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) .*\"GET (\S+) HTTP")


def _request_times(log: str, path_part: str) -> list[float]:
    """When the host logged each GET whose path contains `path_part` (its access log)."""
    times = []
    for line in log.splitlines():
        found = _STAMP.match(line)
        if found and path_part in found.group(2):
            times.append(datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return times


@pytest.mark.host_args("--access-log")
@pytest.mark.operator_settings(
    BACKOFF_BASE_SECONDS="0.1", BACKOFF_CAP_SECONDS="10", HOST_READ_RETRIES="0"
)
def test_failures_back_off_exponentially(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    """The injected failure: the CR's space does not exist on the host (granted, but never
    made), so every look is refused (404 space_not_found). Each look is one GET in the host's
    request log; the gaps between them are the back-off. With full jitter each gap n is at most
    0.1 * 2**n s (plus the 0.2 s floor and the look itself); the later gaps are far longer than
    the first ones (the chance that four later gaps sum to under 1.5 s is about 1e-4)."""
    _running, host, namespace = operator
    grant = f"{namespace}-nowhere"
    kube_cluster.apply(grant_manifest(grant, "default", ["nowhere"], [namespace]))
    try:
        kube_cluster.apply(bucket("lost", space="nowhere"), namespace=namespace)
        path = "/spaces/nowhere/forms/storage.takoform.io/v1/Bucket/resources/lost"

        def looks() -> list[float]:
            return _request_times(host.log_path.read_text(errors="replace"), path)

        wait_until(lambda: len(looks()) >= 10, "ten refused looks", 120)
        times = looks()[:10]
        gaps = [b - a for a, b in itertools.pairwise(times)]
        ceilings = [min(10.0, 0.1 * 2**n) for n in range(len(gaps))]
        for n, (gap, ceiling) in enumerate(zip(gaps, ceilings, strict=True)):
            assert gap <= max(ceiling, 0.2) + 1.0, (
                f"gap {n} {gap:.2f} s beyond its back-off: {gaps}"
            )
        print("back-off gaps between refused looks (s):", [round(g, 2) for g in gaps])
        first, later = sum(gaps[:3]), sum(gaps[-4:])
        assert later > 1.5 and later > 2 * first, f"the gaps do not grow: {gaps}"
        degraded = _condition(kube_cluster, namespace, "lost", "Degraded")
        assert degraded["reason"] == "HostRejected" and "space_not_found" in degraded["message"]
    finally:
        kube_cluster.kubectl("delete", "takoformspacegrant", grant, "--wait=false", check=False)


POD = "takoform-operator-6f8b9c7d4-x7k2p"


@pytest.mark.operator_settings(POD_NAME=POD)
def test_the_uid_mismatch_remedy_runs_as_printed(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    """The CR `archive` manages the host resource `vault` (spec.resourceName): the remedy must
    name the CR, fully qualified, with its namespace -- and do what it says. While Blocked it is
    Stalled for kstatus readers (`kubectl wait` returns at once), and its Warning Event is
    signed by this operator and this replica (TAKOFORM_POD_NAME, as the chart sets it)."""
    _running, host, namespace = operator
    kube_cluster.apply(bucket("archive", resourceName="vault"), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "archive"), "archive Ready", 60)
    replacement = host.admin(
        "POST",
        "/admin/v1/resources/recreate",
        {"space": "team-a", **BUCKET, "name": "vault"},
    ).json()["metadata"]["uid"]
    kube_cluster.kubectl(
        "wait", "--for=condition=Stalled", "bucket/archive", "--timeout=60s",
        namespace=namespace, timeout=90,
    )  # fmt: skip
    blocked = _condition(kube_cluster, namespace, "archive", "Blocked")
    stalled = _condition(kube_cluster, namespace, "archive", "Stalled")
    assert blocked["reason"] == "UidMismatch" and blocked["status"] == "True"
    assert (stalled["status"], stalled["reason"], stalled["message"]) == (
        "True", blocked["reason"], blocked["message"],
    )  # fmt: skip
    reconciling = _condition(kube_cluster, namespace, "archive", "Reconciling")
    assert (reconciling["status"], reconciling["reason"]) == ("False", "UidMismatch")
    wait_until(
        lambda: _warnings(kube_cluster, namespace, "archive", "UidMismatch") >= 1,
        "the Warning Event of archive Blocked",
    )
    signed = kube_cluster.kubectl_json(
        "get", "events", "--field-selector",
        "source=takoform-operator,reason=UidMismatch,involvedObject.name=archive",
        namespace=namespace,
    )["items"]  # fmt: skip
    assert len(signed) == 1, signed
    event = signed[0]
    assert event["type"] == "Warning" and event["message"][:200] == blocked["message"][:200]
    assert event["reportingComponent"] == "takoform-operator"
    assert event["source"]["component"] == "takoform-operator"
    assert event["reportingInstance"] == POD
    assert event["metadata"]["name"].startswith("takoform-operator-"), event["metadata"]
    assert (
        event["involvedObject"]["uid"]
        == kube_cluster.kubectl_json("get", "bucket", "archive", namespace=namespace)["metadata"][
            "uid"
        ]
    )
    remedies = cr_status(kube_cluster, namespace, "archive")["remedies"]
    printed = next(r["command"] for r in remedies if "accept-uid" in r.get("command", ""))
    assert printed.startswith("kubectl annotate ")
    assert f"buckets.storage.takoform.io/archive -n {namespace}" in printed
    env = {
        **os.environ,
        "KUBECONFIG": str(kube_cluster.kubeconfig),
        "PATH": f"{kube_cluster.kubectl_bin.parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    ran = subprocess.run(
        ["sh", "-c", printed], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert ran.returncode == 0, f"{printed!r} failed: {ran.stderr}"
    wait_until(
        lambda: (
            is_ready(kube_cluster, namespace, "archive")
            and cr_status(kube_cluster, namespace, "archive").get("uid") == replacement
        ),
        "rebound to the new incarnation by the printed remedy",
        60,
    )


def test_the_name_taken_remedy_runs_as_printed(
    operator: tuple[Operator, Any, str], kube_cluster: KubeCluster
) -> None:
    """A resource the operator did not create holds the name: the remedy deletes this CR (which
    sends nothing to the host) and applies it again with the printed import id."""
    _running, host, namespace = operator
    with host.api() as api:
        forms = api.get("/v1alpha3/forms").json()["items"]
        ref = next(
            f["formRef"]
            for f in forms
            if f["formRef"]["kind"] == "Bucket" and f["formRef"]["definitionVersion"] == "1.1.0"
        )
        api.put(
            "/v1alpha3/spaces/team-a/forms/storage.takoform.io/v1/Bucket/resources/taken",
            params={k: ref[k] for k in ("definitionVersion", "schemaDigest")},
            json={"spec": {"region": "eu-west-1", "sizeGiB": 10}},
            headers={"If-None-Match": "*", "Idempotency-Key": "someone-else:create:0"},
        ).raise_for_status()
        wait_until(
            lambda: (
                api.get(
                    "/v1alpha3/spaces/team-a/forms/storage.takoform.io/v1/Bucket/resources/taken",
                    params={k: ref[k] for k in ("definitionVersion", "schemaDigest")},
                ).status_code
                == 200
            ),
            "the foreign resource committed",
        )
    kube_cluster.apply(bucket("taken"), namespace=namespace)
    wait_until(
        lambda: (
            _condition(kube_cluster, namespace, "taken", "Blocked").get("reason") == "NameTaken"
        ),
        "taken Blocked NameTaken",
        60,
    )
    (importing, _another_name) = cr_status(kube_cluster, namespace, "taken")["remedies"]
    printed = importing["command"]
    assert printed == f"kubectl delete buckets.storage.takoform.io/taken -n {namespace}"
    ran = subprocess.run(
        ["sh", "-c", f"{printed} --timeout=60s"],
        env={
            **os.environ,
            "KUBECONFIG": str(kube_cluster.kubeconfig),
            "PATH": f"{kube_cluster.kubectl_bin.parent}{os.pathsep}{os.environ.get('PATH', '')}",
        },
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert ran.returncode == 0, f"{printed!r} failed: {ran.stderr}"
    import_id = shlex.split(importing["does"].split("spec.importId set to ")[1])[0]
    kube_cluster.apply(bucket("taken", importId=import_id), namespace=namespace)
    wait_until(lambda: is_ready(kube_cluster, namespace, "taken"), "taken imported and Ready", 60)
    with host.api() as api:
        served = api.get(
            "/v1alpha3/spaces/team-a/forms/storage.takoform.io/v1/Bucket/resources/taken",
            params={k: ref[k] for k in ("definitionVersion", "schemaDigest")},
        ).json()
    assert cr_status(kube_cluster, namespace, "taken")["uid"] == served["metadata"]["uid"]
