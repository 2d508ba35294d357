"""The kubectl plugin as users run it (`kubectl-takoform`, installed with the package), against
the real API server, the reference host process and the operator process: an import printed by
the plugin and applied as is with kubectl binds with zero host mutations (the host's request
log), `blocked` lists a Blocked CR with the operator's remedy, `trace` follows a Ready CR down to
its host resource and reads a running operation from the host, and every error is one line with
an exit status, never a traceback."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from argocd import health
from fixtures_host import HostProcess
from fixtures_kube import KubeCluster, drop_namespace, wait_until
from manifests import bucket
from operator_process import condition_of, cr_status, is_ready, operator_process
from processes import free_port
from tenancy import granted, host_manifest, token_secret
from waiting import wait_settled

from takoform_operator.core.import_id import canonical_import_id
from takoform_operator.core.remedies import Remedy, remedies_line, remedies_text
from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine, FormRef

pytestmark = [pytest.mark.kube, pytest.mark.host]

PLUGIN = Path(sys.executable).with_name("kubectl-takoform")
REGISTRY = load_registry()
BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
DEFAULT_REF = REGISTRY.default_create_ref(BUCKET)
assert DEFAULT_REF is not None
V2_REF = next(r for r in REGISTRY.known_refs(BUCKET) if r.definition_version == "2.0.0")
MUTATIONS = ("PUT", "POST", "DELETE", "PATCH")


def _path(space: str, ref: FormRef, name: str) -> str:
    group, version = ref.api_version.split("/")
    return f"/v1alpha3/spaces/{space}/forms/{group}/{version}/{ref.kind}/resources/{name}"


def _exact(ref: FormRef) -> dict[str, str]:
    return {"definitionVersion": ref.definition_version, "schemaDigest": ref.schema_digest}


def host_create(host: HostProcess, ref: FormRef, name: str, spec: dict[str, Any]) -> str:
    """Create a resource directly on the host (no CR); returns its uid once it exists."""
    with host.api() as api:
        answer = api.put(
            _path("team-a", ref, name),
            params=_exact(ref),
            json={"spec": spec},
            headers={"If-None-Match": "*", "Idempotency-Key": f"test-{uuid.uuid4()}"},
        )
        assert answer.status_code == 202, answer.text
        settled = wait_settled(api, answer.json()["id"])
        assert settled["state"] == "succeeded", settled
        return str(settled["resourceUid"])


def mutations_of(log: str, name: str) -> list[str]:
    """The host's access-log lines that mutate resource `name`."""
    pattern = re.compile(rf'"({"|".join(MUTATIONS)}) [^"]*/resources/{re.escape(name)}[?" ]')
    return [line for line in log.splitlines() if pattern.search(line)]


def plugin(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(PLUGIN), *args], capture_output=True, text=True, env=env, timeout=60)


@pytest.fixture
def ops_namespace(kube_cluster: KubeCluster) -> Iterator[str]:
    """The operator's namespace, where the TakoformHost's token Secret lives."""
    name = f"ops-{uuid.uuid4().hex[:8]}"
    kube_cluster.kubectl("create", "namespace", name)
    yield name
    drop_namespace(kube_cluster, name)


@pytest.fixture
def setup(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    kube_namespace: str,
    ops_namespace: str,
    host_factory: Any,
    tmp_path: Path,
) -> Iterator[dict[str, Any]]:
    """A host with an access log, declared as a (non-default) TakoformHost whose token is in a
    Secret of the operator's namespace, and also the implicit host `default` of both the
    operator and the plugin (TAKOFORM_HOST_URL); the test namespace granted space team-a on
    both; the operator watching the test namespace."""
    host = host_factory(commit_delay=0.05, extra_args=("--access-log",))
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a").raise_for_status()
    host_name = f"plugin-{uuid.uuid4().hex[:6]}"
    token_secret(kube_cluster, ops_namespace, "host-token", host.token, {host_name: host.url})
    kube_cluster.apply(host_manifest(host_name, host.url, "host-token"))
    log = tmp_path / "operator.log"
    try:
        with (
            granted(kube_cluster, kube_namespace, ["team-a"], host=host_name),
            granted(kube_cluster, kube_namespace, ["team-a"], host="default"),
            operator_process(
                kube_cluster.kubeconfig,
                host,
                kube_namespace,
                log,
                METRICS_PORT="0",
                OPERATOR_NAMESPACE=ops_namespace,
                POLL_READY_SECONDS="2",
            ),
        ):
            # No TAKOFORM_HOST_* here: the plugin finds the host through the TakoformHost.
            env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOFORM_")}
            env["KUBECONFIG"] = str(kube_cluster.kubeconfig)
            implicit = {
                **env,
                "TAKOFORM_HOST_URL": host.url,
                "TAKOFORM_HOST_TOKEN": host.token,
                "TAKOFORM_HOST_INSECURE": "true",  # the local reference host is plain http
            }
            yield {
                "host": host,
                "host_name": host_name,
                "env": env,
                "implicit_env": implicit,
                "ops": ops_namespace,
            }
    except BaseException:
        print("\n".join(log.read_text(errors="replace").splitlines()[-60:]))
        raise
    finally:
        kube_cluster.kubectl("delete", "takoformhost", host_name, "--wait=false", check=False)


def test_import_applied_as_is_binds_without_a_single_host_mutation(
    setup: dict[str, Any], kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    host, env = setup["host"], setup["env"]
    ops = ["--operator-namespace", setup["ops"]]
    resources = {
        # Under the default create ref, with a default the host fills in (public).
        "logs": (DEFAULT_REF, {"region": "eu-west-1", "sizeGiB": 42, "labels": {"team": "a"}}),
        # Under an older, breaking major: the CR pins it (spec.formRef).
        "archive": (V2_REF, {"region": "eu-west-1", "quota": "500Gi", "labels": ["team=a"]}),
        # Through the implicit host `default` (TAKOFORM_HOST_URL/TOKEN), no spec.hostRef.
        "plain": (DEFAULT_REF, {"region": "eu-west-1", "sizeGiB": 7}),
    }
    uids = {name: host_create(host, ref, name, spec) for name, (ref, spec) in resources.items()}
    seen = len(host.log_path.read_text(errors="replace"))
    for name, (ref, _spec) in resources.items():
        args = ["import", canonical_import_id("team-a", name, ref), "-n", kube_namespace]
        args += ["--name", f"imported-{name}", "--full"]
        if name == "plain":
            printed = plugin(*args, env=setup["implicit_env"])
        else:
            printed = plugin(*args, "--host", setup["host_name"], *ops, env=env)
        assert printed.returncode == 0, printed.stderr
        manifest = yaml.safe_load(printed.stdout)
        assert manifest["spec"].get("hostRef") == (None if name == "plain" else setup["host_name"])
        assert manifest["metadata"]["name"] == f"imported-{name}"
        assert manifest["spec"]["resourceName"] == name
        assert manifest["spec"]["managementPolicy"] == "Full"
        assert manifest["spec"]["deletionPolicy"] == "Orphan", "the default even with --full"
        assert ("formRef" in manifest["spec"]) == (ref != DEFAULT_REF)
        kube_cluster.apply(printed.stdout)  # as printed, comments and all
    for name in resources:
        wait_until(
            lambda n=name: is_ready(kube_cluster, kube_namespace, f"imported-{n}"),  # type: ignore[misc]
            f"imported-{name} Ready",
            timeout=60,
        )
        status = cr_status(kube_cluster, kube_namespace, f"imported-{name}")
        assert status["uid"] == uids[name], "bound to the host's incarnation"
        assert condition_of(status, "Drifted").get("status") != "True"
        # The chart's Argo CD health check on the real CR.
        body = kube_cluster.kubectl_json(
            "get", "bucket", f"imported-{name}", namespace=kube_namespace
        )
        assert health(body) == ("Healthy", "Ready Available: host resource is up to date")
    whole = host.log_path.read_text(errors="replace")
    log = whole[seen:]
    for name in resources:
        assert mutations_of(whole[:seen], name), "the log shows the direct create (the probe works)"
        assert f"/resources/{name}?" in log, "the operator did read it (the log is the real one)"
        assert mutations_of(log, name) == [], f"host mutations for {name}"

    # trace follows the Ready CR down to the host resource it read under the exact ref.
    traced = plugin(
        "trace",
        "buckets.storage.takoform.io/imported-logs",
        "-n",
        kube_namespace,
        "--operator-namespace",
        setup["ops"],
        env=env,
    )
    assert traced.returncode == 0, traced.stderr
    cr = kube_cluster.kubectl_json("get", "bucket", "imported-logs", namespace=kube_namespace)
    text = traced.stdout
    assert cr["metadata"]["uid"] in text
    assert f"1.1.0 {DEFAULT_REF.schema_digest}" in text
    assert f"host {setup['host_name']}, space team-a, name logs, uid {uids['logs']}" in text
    host_part = text.split("Host resource")[1].split("Pending operation")[0]
    assert f"uid {uids['logs']}, generation 1, observedGeneration 1" in host_part
    assert "Ready" in host_part, "the host resource's own conditions"
    assert "Pending operation\n  none" in text
    events = kube_cluster.kubectl_json(
        "get", "events", "--field-selector", f"involvedObject.uid={cr['metadata']['uid']}",
        namespace=kube_namespace,
    )["items"]  # fmt: skip
    assert f"Events (last {min(len(events), 10)} of {len(events)})" in text
    for event in events:
        assert event["reason"] in text.split("Events")[1]


def test_an_import_beyond_the_crd_size_bounds_is_refused_before_it_is_printed(
    setup: dict[str, Any], kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    """A resource made on the host directly may hold what the CRD's bounds refuse (a label
    value of 100 characters): the plugin says so, naming the API server's reason, and prints no
    manifest; its server-side dry run stores nothing. At the bounds, it prints the manifest."""
    host, env = setup["host"], setup["env"]
    ops = ["--host", setup["host_name"], "--operator-namespace", setup["ops"]]
    host_create(host, DEFAULT_REF, "wide", {"region": "eu-west-1", "sizeGiB": 1,
                                             "labels": {"team": "v" * 100}})  # fmt: skip
    host_create(host, DEFAULT_REF, "fits", {"region": "eu-west-1", "sizeGiB": 1,
                                             "labels": {"team": "v" * 63}})  # fmt: skip
    refused = plugin(
        "import", canonical_import_id("team-a", "wide", DEFAULT_REF), "-n", kube_namespace,
        *ops, env=env,
    )  # fmt: skip
    assert (refused.returncode, refused.stdout) == (1, ""), refused.stderr
    assert "does not fit this cluster's buckets.storage.takoform.io" in refused.stderr
    assert "spec.parameters.labels.team" in refused.stderr and "63" in refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.splitlines()) == 1
    listed = kube_cluster.kubectl("get", "buckets", "-o", "name", namespace=kube_namespace)
    assert listed.stdout == "", "the dry run stored nothing"
    fits = plugin(
        "import", canonical_import_id("team-a", "fits", DEFAULT_REF), "-n", kube_namespace,
        *ops, env=env,
    )  # fmt: skip
    assert fits.returncode == 0, fits.stderr
    assert yaml.safe_load(fits.stdout)["spec"]["parameters"]["labels"] == {"team": "v" * 63}


def test_observe_import_reports_drift_without_repairing_it_and_full_repairs_it_once(
    setup: dict[str, Any], kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    """The safe import path, the default: `import` applied as printed binds with no mutation; an
    edit of the parameters is reported as drift, never sent; switching to Full sends it once."""
    host, env = setup["host"], setup["env"]
    uid = host_create(host, DEFAULT_REF, "watched", {"region": "eu-west-1", "sizeGiB": 5})
    seen = len(host.log_path.read_text(errors="replace"))
    printed = plugin(
        "import", canonical_import_id("team-a", "watched", DEFAULT_REF), "-n", kube_namespace,
        "--host", setup["host_name"], "--operator-namespace", setup["ops"], env=env,
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    spec = yaml.safe_load(printed.stdout)["spec"]
    assert (spec["managementPolicy"], spec["deletionPolicy"]) == ("Observe", "Orphan")
    kube_cluster.apply(printed.stdout)
    wait_until(lambda: is_ready(kube_cluster, kube_namespace, "watched"), "watched Ready", 60)
    assert cr_status(kube_cluster, kube_namespace, "watched")["uid"] == uid

    kube_cluster.kubectl(
        "patch", "bucket", "watched", "--type=merge",
        "-p", '{"spec": {"parameters": {"sizeGiB": 9}}}', namespace=kube_namespace,
    )  # fmt: skip

    def drifted() -> bool:
        status = cr_status(kube_cluster, kube_namespace, "watched")
        return condition_of(status, "Drifted").get("reason") == "SpecDrift" and (
            condition_of(status, "Drifted").get("status") == "True"
        )

    wait_until(drifted, "watched Drifted SpecDrift", 60)
    body = kube_cluster.kubectl_json("get", "bucket", "watched", namespace=kube_namespace)
    assert health(body)[0] == "Suspended", "drift under Observe waits for a human"
    assert mutations_of(host.log_path.read_text(errors="replace")[seen:], "watched") == []

    kube_cluster.kubectl(
        "patch", "bucket", "watched", "--type=merge",
        "-p", '{"spec": {"managementPolicy": "Full"}}', namespace=kube_namespace,
    )  # fmt: skip

    def repaired() -> bool:
        status = cr_status(kube_cluster, kube_namespace, "watched")
        return is_ready(kube_cluster, kube_namespace, "watched") and (
            condition_of(status, "Drifted").get("status") != "True"
        )

    wait_until(repaired, "watched repaired under Full", 60)
    sent = mutations_of(host.log_path.read_text(errors="replace")[seen:], "watched")
    assert [line.split('"')[1].split()[0] for line in sent] == ["PUT"], sent
    with host.api() as api:
        answer = api.get(_path("team-a", DEFAULT_REF, "watched"), params=_exact(DEFAULT_REF))
    assert answer.json()["spec"]["sizeGiB"] == 9


def test_blocked_lists_a_blocked_cr_with_the_operators_remedy(
    setup: dict[str, Any], kube_cluster: KubeCluster, kube_namespace: str, kube_tools: Any
) -> None:
    host, env = setup["host"], setup["env"]
    host_create(host, DEFAULT_REF, "taken", {"region": "eu-west-1", "sizeGiB": 1})
    kube_cluster.apply(bucket("taken", 1, hostRef=setup["host_name"]), namespace=kube_namespace)

    def blocked() -> dict[str, Any]:
        found = condition_of(cr_status(kube_cluster, kube_namespace, "taken"), "Blocked")
        return found if found.get("status") == "True" else {}

    wait_until(lambda: bool(blocked()), "taken Blocked", timeout=60)
    message = blocked()["message"]
    recorded = cr_status(kube_cluster, kube_namespace, "taken")["remedies"]
    remedies = [Remedy.from_json(item) for item in recorded]
    assert message.endswith(remedies_text(remedies)), "the message states the recorded remedies"
    remedy = remedies_line(remedies)
    body = kube_cluster.kubectl_json("get", "bucket", "taken", namespace=kube_namespace)
    status, said = health(body)  # the chart's Argo CD health check on the real CR
    assert status == "Degraded" and said.endswith(remedy) and said.startswith("Blocked NameTaken")

    # Through kubectl itself: the plugin is found on PATH as `kubectl takoform`.
    path_env = {**env, "PATH": f"{PLUGIN.parent}{os.pathsep}{env.get('PATH', '')}"}
    listed = subprocess.run(
        [str(kube_tools.kubectl), "takoform", "blocked", "-n", kube_namespace],
        capture_output=True,
        text=True,
        env=path_env,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split() == ["NAMESPACE", "RESOURCE", "REASON", "REMEDY"]
    assert len(rows) == 1
    reason = blocked()["reason"]
    assert rows[0].split()[:3] == [kube_namespace, "bucket.storage.takoform.io/taken", reason]
    assert rows[0].endswith(remedy), "the remedy as the operator wrote it"
    assert "spec.importId" in remedy

    everywhere = plugin("blocked", "-A", env=env)
    assert everywhere.returncode == 0, everywhere.stderr
    assert any(
        line.split()[:3] == [kube_namespace, "bucket.storage.takoform.io/taken", reason]
        for line in everywhere.stdout.splitlines()
    )
    as_json = plugin("blocked", "-n", kube_namespace, "-o", "json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    (item,) = json.loads(as_json.stdout)["items"]
    assert (item["resource"], item["reason"]) == ("bucket.storage.takoform.io/taken", reason)
    assert item["remedies"] == recorded, "the remedies as recorded, not parsed from prose"
    empty = plugin("blocked", "-n", setup["ops"], env=env)
    nothing = f"No Blocked resources in namespace {setup['ops']}.\n"
    assert (empty.returncode, empty.stdout) == (0, nothing)


def test_trace_reads_the_pending_operation_from_the_host(
    setup: dict[str, Any], kube_cluster: KubeCluster, kube_namespace: str
) -> None:
    # The host commits nothing until released: the create stays running however long this
    # machine takes to start the plugin (a 15 s commit delay was not always enough).
    setup["host"].set_faults(stuckOperations=True)
    kube_cluster.apply(bucket("slow", 3, hostRef=setup["host_name"]), namespace=kube_namespace)
    wait_until(
        lambda: bool(cr_status(kube_cluster, kube_namespace, "slow").get("pendingOperationId")),
        "the create pending",
        timeout=60,
    )
    pending = cr_status(kube_cluster, kube_namespace, "slow")["pendingOperationId"]
    traced = plugin(
        "trace", "tkbucket/slow", "-n", kube_namespace, "--operator-namespace", setup["ops"],
        env=setup["env"],
    )  # fmt: skip
    assert traced.returncode == 0, traced.stderr
    operation = traced.stdout.split("Pending operation\n")[1].split("Events")[0]
    # The host's record, read from its operations API while the create runs.
    assert operation.startswith(f"  {pending} (Create)\n  create running on team-a/slow\n")
    assert "not found on the host" in traced.stdout, "nothing committed yet"
    body = kube_cluster.kubectl_json("get", "bucket", "slow", namespace=kube_namespace)
    status, message = health(body)
    assert status == "Progressing" and message.startswith("Reconciling "), message
    setup["host"].set_faults(stuckOperations=False)
    kube_cluster.kubectl("delete", "bucket", "slow", "--timeout=90s", namespace=kube_namespace)


def test_errors_are_one_line_with_an_exit_status(
    setup: dict[str, Any], kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path
) -> None:
    env = setup["env"]
    dead_port = free_port()
    unreachable = json.loads(kube_cluster.kubectl("config", "view", "--raw", "-o", "json").stdout)
    for cluster in unreachable["clusters"]:
        cluster["cluster"]["server"] = f"https://127.0.0.1:{dead_port}"
    dead_kubeconfig = tmp_path / "dead.kubeconfig"
    dead_kubeconfig.write_text(json.dumps(unreachable))
    dead_host = f"dead-{uuid.uuid4().hex[:6]}"
    token_secret(
        kube_cluster, setup["ops"], "dead-token", "t", {dead_host: f"http://127.0.0.1:{dead_port}"}
    )
    kube_cluster.apply(host_manifest(dead_host, f"http://127.0.0.1:{dead_port}", "dead-token"))
    some_id = canonical_import_id("team-a", "nothing-here", DEFAULT_REF)
    ops = ["--operator-namespace", setup["ops"]]
    cases = [
        (["import", "{not json"], 2, "import id is not one JSON object"),
        (["import", "logs"], 2, "--kind"),
        (["trace", "widgets/x", "-n", kube_namespace], 2, "unknown kind 'widgets'"),
        (["trace", "bucket/missing", "-n", kube_namespace], 1, "not found in namespace"),
        (["blocked", "--kubeconfig", str(dead_kubeconfig)], 1, "cannot reach the cluster"),
        (
            ["import", some_id, "--host", setup["host_name"], *ops],
            1,
            "has no Bucket 'nothing-here'",
        ),
        (["import", some_id, "--host", dead_host, *ops], 1, f"cannot reach host {dead_host}"),
        (["import", some_id, "--host", "nope", *ops], 1, "no TakoformHost named 'nope'"),
        (
            ["import", some_id, *ops, "--host-url", "http://host.example:8787"],
            2,
            "over plain http to this machine only",
        ),
    ]
    try:
        for args, status, words in cases:
            answer = plugin(*args, env=env)
            assert answer.returncode == status, (args, answer.stderr)
            assert answer.stdout == "", args
            assert len(answer.stderr.strip().splitlines()) == 1, answer.stderr
            assert words in answer.stderr and "Traceback" not in answer.stderr, answer.stderr
        lost = plugin("blocked", env={"PATH": os.environ["PATH"], "HOME": str(tmp_path)})
        assert (lost.returncode, lost.stdout) == (1, ""), lost.stderr
        assert (
            lost.stderr
            == "error: no kubeconfig: set KUBECONFIG, pass --kubeconfig, or create ~/.kube/config\n"
        )
    finally:
        kube_cluster.kubectl("delete", "takoformhost", dead_host, "--wait=false", check=False)


def _recorded(kube: KubeCluster, namespace: str, name: str, host: str, uid: str) -> None:
    """A Bucket in a namespace no operator watches, its status recording host resource `name`
    of space team-a on `host` as an operator would: trace reads what the status says."""
    kube.apply(bucket(name, 1), namespace=namespace)
    status = {"host": host, "space": "team-a", "name": name, "uid": uid,
              "formRef": DEFAULT_REF.to_json()}  # fmt: skip
    kube.kubectl(
        "patch", "buckets.storage.takoform.io", name, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": status}), namespace=namespace,
    )  # fmt: skip


def test_trace_reaches_an_in_cluster_host_through_a_port_forward(
    setup: dict[str, Any], kube_cluster: KubeCluster
) -> None:
    """Hosts whose URL is an in-cluster name this machine cannot resolve, as on kind: a
    TakoformHost, and the implicit host `default` of an operator configured in the cluster (the
    Secret the chart opts in for `default` at that URL). No TAKOFORM_HOST_* in the shell: the
    plugin takes each host's token from its Secret, checked against the host's own URL, and
    dials --host-url (KUBECTL_TAKOFORM_HOST_URL), what a port-forward listens on: here the
    reference host itself on 127.0.0.1."""
    host, env, ops = setup["host"], setup["env"], setup["ops"]
    in_cluster = f"http://takoform-host.{ops}.svc:8787"
    token_secret(kube_cluster, ops, "in-cluster-token", host.token, {"in-cluster": in_cluster})
    token_secret(kube_cluster, ops, "implicit-token", host.token, {"default": in_cluster})
    kube_cluster.apply(host_manifest("in-cluster", in_cluster, "in-cluster-token"))
    try:
        for host_name, name in (("in-cluster", "forwarded"), ("default", "implicit")):
            uid = host_create(host, DEFAULT_REF, name, {"region": "eu-west-1", "sizeGiB": 1})
            _recorded(kube_cluster, ops, name, host_name, uid)
            trace = ["trace", f"bucket/{name}", "-n", ops, "--operator-namespace", ops]
            direct = plugin(*trace, env=env)
            assert direct.returncode == 1, direct.stderr
            if host_name == "default":  # looked up, refused: plain http, no TAKOFORM_HOST_INSECURE
                assert "--host-url http://127.0.0.1:PORT" in direct.stderr, direct.stderr
            else:
                assert "cannot reach host in-cluster" in direct.stderr, direct.stderr
            forwarded = plugin(*trace, "--host-url", host.url, env=env)
            assert forwarded.returncode == 0, forwarded.stderr
            assert f"host {host_name}, space team-a, name {name}, uid {uid}" in forwarded.stdout
            host_part = forwarded.stdout.split("Host resource")[1].split("Pending operation")[0]
            assert f"uid {uid}, generation 1" in host_part, forwarded.stdout
            from_env = plugin(*trace, env={**env, "KUBECTL_TAKOFORM_HOST_URL": host.url})
            assert (from_env.returncode, from_env.stdout) == (0, forwarded.stdout), from_env.stderr
        # The shell's implicit host wins over the one the cluster configures.
        shell = {**setup["implicit_env"], "TAKOFORM_HOST_TOKEN": "wrong"}
        refused = plugin("trace", "bucket/implicit", "-n", ops, env=shell)
        assert refused.returncode == 1 and "refused" in refused.stderr, refused.stderr
    finally:
        kube_cluster.kubectl("delete", "takoformhost", "in-cluster", "--wait=false", check=False)


def test_trace_without_the_right_to_read_the_token_says_which_right_and_the_way_around(
    setup: dict[str, Any], kube_cluster: KubeCluster
) -> None:
    """A user who may read the CRs, their Events and the TakoformHosts, not Secrets: trace prints
    the CR's half, then one line naming the right it lacks (`get` on secrets in the operator's
    namespace) and the way around it (the host in the shell, a port-forward)."""
    host, ops = setup["host"], setup["ops"]
    uid = host_create(host, DEFAULT_REF, "guarded", {"region": "eu-west-1", "sizeGiB": 1})
    _recorded(kube_cluster, ops, "guarded", setup["host_name"], uid)
    role = f"plugin-reader-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "serviceaccount", "reader", namespace=ops)
    kube_cluster.kubectl(
        "create", "clusterrole", role, "--verb=get,list",
        "--resource=buckets.storage.takoform.io,takoformhosts.operator.takoform.io,events",
    )  # fmt: skip
    kube_cluster.kubectl(
        "create", "clusterrolebinding", role, f"--clusterrole={role}",
        f"--serviceaccount={ops}:reader",
    )  # fmt: skip
    try:
        token = kube_cluster.kubectl("create", "token", "reader", namespace=ops).stdout.strip()
        env = {**setup["env"], "KUBECONFIG": str(kube_cluster.token_kubeconfig(token))}
        traced = plugin("trace", "bucket/guarded", "-n", ops, "--operator-namespace", ops, env=env)
        assert traced.returncode == 1, traced.stderr
        assert f"host {setup['host_name']}, space team-a, name guarded, uid {uid}" in traced.stdout
        (line,) = traced.stderr.splitlines()
        assert line.startswith(f"error: cannot read Secret {ops}/host-token, a host's credential")
        assert f"it takes `get` on secrets in namespace {ops}" in line
        assert "TAKOFORM_HOST_URL and TAKOFORM_HOST_TOKEN" in line and "port-forward" in line
        assert "Traceback" not in traced.stderr
    finally:
        kube_cluster.kubectl("delete", "clusterrolebinding,clusterrole", role, check=False)
