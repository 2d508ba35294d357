"""Hosts and tenancy on the real API server with RBAC, against real host processes
(docs/tenancy.md): two TakoformHosts, token rotation without a restart, a TLS host moved to a
new CA without a restart, namespace users who reach only the spaces granted to their namespace,
a grant removed while CRs exist."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_helm import CHART
from fixtures_host import HostProcess
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import condition_of, cr_status, is_ready, policy_operator
from tenancy import grant_manifest, host_manifest, tls_secrets, token_secret
from tls import Pki

from takoform_operator.registry_data import load_registry
from takoform_spec.identity import FormLine

pytestmark = [pytest.mark.kube, pytest.mark.usefixtures("kube_crds")]
REGISTRY = load_registry()
BUCKETS = "/v1alpha3/spaces/{space}/forms/storage.takoform.io/v1/Bucket/resources"


REF = REGISTRY.default_create_ref(FormLine("storage.takoform.io/v1", "Bucket"))
assert REF is not None
EXACT = {"definitionVersion": REF.definition_version, "schemaDigest": REF.schema_digest}


def host_names(host: HostProcess, space: str) -> set[str]:
    return host.resource_names(space, REF)


def host_spec(host: HostProcess, space: str, name: str) -> dict[str, Any]:
    with host.api() as api:
        answer = api.get(BUCKETS.format(space=space) + f"/{name}", params=EXACT)
        answer.raise_for_status()
        return dict(answer.json()["spec"])


def patch_size(cluster: KubeCluster, namespace: str, name: str, size: int) -> None:
    patch = {"spec": {"parameters": {"region": "eu-west-1", "sizeGiB": size}}}
    cluster.kubectl(
        "patch", "bucket", name, "--type=merge", "-p", json.dumps(patch), namespace=namespace
    )


def ready_at(cluster: KubeCluster, namespace: str, name: str, generation: int) -> bool:
    ready = condition_of(cr_status(cluster, namespace, name), "Ready")
    return ready.get("status") == "True" and ready.get("observedGeneration") == generation


def host_condition(cluster: KubeCluster, name: str) -> dict[str, Any]:
    """The Ready condition of TakoformHost `name` (empty before the first probe)."""
    found = cluster.kubectl_json("get", "takoformhost", name)
    return dict(condition_of(found.get("status") or {}, "Ready"))


def host_ready(cluster: KubeCluster, name: str) -> bool:
    ready = host_condition(cluster, name)
    return ready.get("status") == "True" and ready.get("reason") == "Reachable"


def blocked_reason(cluster: KubeCluster, namespace: str, name: str) -> str | None:
    blocked = condition_of(cr_status(cluster, namespace, name), "Blocked")
    return blocked.get("reason") if blocked.get("status") == "True" else None


#: Secrets are not re-read on a clock (a rotation must work through the 401 path alone); the
#: TakoformHosts' status is written every second.
SETTINGS = {"TOKEN_REFRESH_SECONDS": "600", "HOST_STATUS_SECONDS": "1"}


def test_two_hosts_and_a_token_rotated_without_a_restart(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    namespaces: Callable[[str], str],
    policy: Callable[[str], None],
    host_factory: Any,
    tmp_path: Path,
) -> None:
    ops, team = kube_namespace, namespaces("team")
    prod, staging = host_factory(spaces=["team-a"]), host_factory(spaces=["team-a"])
    suffix = uuid.uuid4().hex[:6]
    prod_name, staging_name = f"prod-{suffix}", f"staging-{suffix}"
    token_secret(kube_cluster, ops, "prod-token", prod.token, {prod_name: prod.url})
    token_secret(kube_cluster, ops, "staging-token", staging.token, {staging_name: staging.url})
    policy(host_manifest(prod_name, prod.url, "prod-token", default=True))
    policy(host_manifest(staging_name, staging.url, "staging-token"))
    for host_name in (prod_name, staging_name):
        policy(grant_manifest(f"{team}-{host_name}", host_name, ["team-a"], [team]))

    log = tmp_path / "operator.log"
    with policy_operator(
        kube_cluster.kubeconfig, ops, log, team, POLL_READY_SECONDS="2", **SETTINGS
    ) as process:
        kube_cluster.apply(bucket("on-prod", space="team-a"), namespace=team)
        kube_cluster.apply(
            bucket("on-staging", space="team-a", hostRef=staging_name), namespace=team
        )
        for name in ("on-prod", "on-staging"):
            wait_until(lambda n=name: is_ready(kube_cluster, team, n), f"{name} Ready")  # type: ignore[misc]
        assert host_names(prod, "team-a") == {"on-prod"}
        assert host_names(staging, "team-a") == {"on-staging"}
        assert cr_status(kube_cluster, team, "on-prod")["host"] == prod_name
        assert cr_status(kube_cluster, team, "on-staging")["host"] == staging_name

        for name in (prod_name, staging_name):
            wait_until(lambda n=name: host_ready(kube_cluster, n), f"TakoformHost {name} Ready")  # type: ignore[misc]
        forms = kube_cluster.kubectl_json("get", "takoformhost", prod_name)["status"]["forms"]
        assert any(f["kind"] == "Bucket" and f["served"] and f["supported"] for f in forms)

        # Rotation: the admin writes the new token into the Secret, then revokes the old one
        # on the host (the reference host takes its tokens at start: restarted on the same
        # port and database with only the new token).
        old = staging.token
        new = "rotated-" + uuid.uuid4().hex
        token_secret(kube_cluster, ops, "staging-token", new, {staging_name: staging.url})
        staging.stop()
        staging.token = new
        staging.start()
        patch_size(kube_cluster, team, "on-staging", 20)
        try:
            wait_until(
                lambda: ready_at(kube_cluster, team, "on-staging", 2),
                "the update sent with the rotated token",
                timeout=90,
            )
        except BaseException:
            found = kube_cluster.kubectl_json("get", "bucket", "on-staging", namespace=team)
            print(json.dumps(found, indent=1))
            print(staging.log_tail())
            raise
        assert host_spec(staging, "team-a", "on-staging")["sizeGiB"] == 20
        wait_until(lambda: host_ready(kube_cluster, staging_name), "the staging host Ready again")
        assert process.poll() is None, "the operator did not restart"
        assert is_ready(kube_cluster, team, "on-prod")
        text = log.read_text(errors="replace")
        assert old not in text and new not in text and prod.token not in text
        for obj in ("takoformhost", "events"):
            dump = kube_cluster.kubectl("get", obj, "-A", "-o", "json").stdout
            assert old not in dump and new not in dump and prod.token not in dump


def test_a_host_on_tls_moved_to_a_new_ca_without_a_restart(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    namespaces: Callable[[str], str],
    policy: Callable[[str], None],
    host_factory: Any,
    tmp_path: Path,
) -> None:
    """CA bundle and client certificate from Secrets; the host switches to a certificate of a
    new CA, then the admin updates the bundle: the CRs recover, nothing restarts."""
    ops, team, pki = kube_namespace, namespaces("tls"), Pki(tmp_path / "pki")
    host = host_factory(tls=pki.host_tls("server-ca-1", client_ca="client-ca"), spaces=["team-a"])
    client = pki.client("client-ca", "operator")
    name = f"tls-{uuid.uuid4().hex[:6]}"
    token_secret(kube_cluster, ops, "tls-token", host.token, {name: host.url})
    tls_secrets(
        kube_cluster,
        ops,
        ("tls-ca", pki.ca("server-ca-1")),
        ("tls-client", client),
        {name: host.url},
    )
    policy(
        host_manifest(name, host.url, "tls-token", ca_secret="tls-ca", client_secret="tls-client")
    )
    policy(grant_manifest(f"{team}-{name}", name, ["team-a"], [team]))

    log = tmp_path / "operator.log"
    with policy_operator(kube_cluster.kubeconfig, ops, log, team, **SETTINGS) as process:
        kube_cluster.apply(bucket("over-tls", space="team-a", hostRef=name), namespace=team)
        wait_until(lambda: is_ready(kube_cluster, team, "over-tls"), "over-tls Ready")
        assert host_names(host, "team-a") == {"over-tls"}

        host.stop()
        host.tls = pki.host_tls("server-ca-2", client_ca="client-ca")
        host.start()
        wait_until(
            lambda: host_condition(kube_cluster, name).get("reason") == "CertificateUntrusted",
            "the host's Ready reason",
        )
        message = host_condition(kube_cluster, name)["message"]
        assert "certificate is not trusted: unable to get local issuer" in message

        patch_size(kube_cluster, team, "over-tls", 30)

        def degraded() -> str | None:
            found = condition_of(cr_status(kube_cluster, team, "over-tls"), "Degraded")
            return found.get("reason") if found.get("status") == "True" else None

        wait_until(lambda: degraded() == "HostUnavailable", "the CR Degraded HostUnavailable")
        assert not ready_at(kube_cluster, team, "over-tls", 2)
        tls_secrets(
            kube_cluster,
            ops,
            ("tls-ca", pki.ca("server-ca-2")),
            ("tls-client", client),
            {name: host.url},
        )
        wait_until(
            lambda: ready_at(kube_cluster, team, "over-tls", 2),
            "the update sent over the new CA",
            timeout=90,
        )
        assert host_spec(host, "team-a", "over-tls")["sizeGiB"] == 30
        wait_until(lambda: host_ready(kube_cluster, name), "the host Ready again")
        assert process.poll() is None, "the operator did not restart"
        key = client[1].read_text()
        assert key.split("\n")[1] not in log.read_text(errors="replace")


def as_plugin(
    cluster: KubeCluster, where: Path, token: str, *args: str
) -> subprocess.CompletedProcess[str]:
    """`kubectl takoform ARGS` with a kubeconfig holding only `token` (a user's own rights)."""
    config = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    for user in config["users"]:
        user["user"] = {"token": token}
    path = where / f"kubeconfig-{uuid.uuid4().hex[:6]}"
    path.write_text(yaml.safe_dump(config))
    plugin = Path(sys.executable).with_name("kubectl-takoform")
    return subprocess.run(
        [str(plugin), *args, "--kubeconfig", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def _user(cluster: KubeCluster, namespace: str, name: str) -> str:
    """A user with only the built-in `edit` role in `namespace`: a ServiceAccount token from
    the TokenRequest API."""
    cluster.kubectl("create", "serviceaccount", name, namespace=namespace)
    cluster.kubectl(
        "create",
        "rolebinding",
        f"{name}-edit",
        "--clusterrole=edit",
        f"--serviceaccount={namespace}:{name}",
        namespace=namespace,
    )
    return cluster.kubectl("create", "token", name, namespace=namespace).stdout.strip()


@pytest.fixture
def user_roles(helm: Any, kube_cluster: KubeCluster) -> Iterator[None]:
    """The chart's ClusterRoles for people (takoform-editor aggregates into `edit`)."""
    rendered = helm(
        "template", "t", str(CHART), "--show-only", "templates/rbac-users.yaml",
        "--set", "rbac.userRoles.prefix=takoform-e2e",
    ).stdout  # fmt: skip
    kube_cluster.apply(rendered)

    def aggregated() -> bool:
        edit = kube_cluster.kubectl_json("get", "clusterrole", "edit")
        return any("buckets" in rule.get("resources", ()) for rule in edit.get("rules") or ())

    wait_until(aggregated, "the Form CRs aggregated into the edit role")
    yield
    kube_cluster.kubectl("delete", "-f", "-", input=rendered, check=False)


def test_a_namespace_reaches_only_the_spaces_granted_to_it(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    namespaces: Callable[[str], str],
    policy: Callable[[str], None],
    user_roles: None,
    host_factory: Any,
    tmp_path: Path,
) -> None:
    ops, ns_a, ns_b = kube_namespace, namespaces("a"), namespaces("b")
    host = host_factory(extra_args=("--access-log",), spaces=["team-a", "team-b"])
    host_name = f"only-{uuid.uuid4().hex[:6]}"
    token_secret(kube_cluster, ops, "host-token", host.token, {host_name: host.url})
    policy(host_manifest(host_name, host.url, "host-token", default=True))
    policy(grant_manifest(f"{ns_a}-grant", host_name, ["team-a"], [ns_a]))
    grant_b = f"{ns_b}-grant"
    policy(grant_manifest(grant_b, host_name, ["team-b"], [ns_b]))
    alice, bob = _user(kube_cluster, ns_a, "alice"), _user(kube_cluster, ns_b, "bob")

    def as_user(token: str, *args: str, namespace: str, stdin: str | None = None) -> Any:
        return kube_cluster.kubectl(
            *args, namespace=namespace, token=token, input=stdin, check=False
        )

    log = tmp_path / "operator.log"
    with policy_operator(kube_cluster.kubeconfig, ops, log, POLL_READY_SECONDS="600", **SETTINGS):
        # Bob, an editor of B, manages a bucket in B's space.
        assert (
            as_user(
                bob, "apply", "-f", "-", namespace=ns_b, stdin=bucket("data", space="team-b")
            ).returncode
            == 0
        )
        # Watching every namespace, the operator's first looks also go to whatever CRs the
        # worker's earlier tests left in namespaces still terminating: a backlog on a loaded
        # machine (30 s was not always enough).
        wait_until(lambda: is_ready(kube_cluster, ns_b, "data"), "B's bucket Ready", timeout=120)
        assert host_names(host, "team-b") == {"data"}
        seen = len(host.log_path.read_text(errors="replace"))

        # Alice, an editor of A only: she cannot touch B's CR, the host token or the policy...
        patch = json.dumps({"spec": {"parameters": {"region": "eu-west-1", "sizeGiB": 99}}})
        own_grant = grant_manifest("mine", host_name, ["*"], [ns_a])
        own_host = host_manifest("mine", host.url, "host-token")
        refused = [
            as_user(alice, "patch", "bucket", "data", "--type=merge", "-p", patch, namespace=ns_b),
            as_user(alice, "delete", "bucket", "data", namespace=ns_b),
            as_user(alice, "get", "secret", "host-token", namespace=ops),
            as_user(alice, "apply", "-f", "-", namespace=ns_a, stdin=own_grant),
            as_user(alice, "apply", "-f", "-", namespace=ns_a, stdin=own_host),
        ]  # fmt: skip
        for proc in refused:
            assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), proc.stderr
        # ...and what she can create in her namespace never reaches space team-b: a create,
        # an import of B's resource, an update of it and a delete of it all stay Blocked.
        attempts = {
            "steal": bucket("steal", space="team-b"),
            "adopt": bucket("adopt", space="team-b", importId="team-b/data", resourceName="data"),
        }
        for manifest in attempts.values():
            assert (
                as_user(alice, "apply", "-f", "-", namespace=ns_a, stdin=manifest).returncode == 0
            )
        for name in attempts:
            wait_until(
                lambda n=name: blocked_reason(kube_cluster, ns_a, n) == "SpaceNotGranted",  # type: ignore[misc]
                f"A's {name} Blocked SpaceNotGranted",
            )
        message = condition_of(cr_status(kube_cluster, ns_a, "adopt"), "Blocked")["message"]
        assert ns_a in message and "team-b" in message and "TakoformSpaceGrant" in message
        # The plugin with a namespace user's own rights: `blocked` lists her Blocked CRs;
        # `trace` of Bob's bound CR shows its Kubernetes half, and its host half (which needs the
        # operator's Secrets) says in one line why it was not read.
        listed = as_plugin(kube_cluster, tmp_path, alice, "blocked", "-n", ns_a)
        assert listed.returncode == 0, listed.stderr
        assert {line.split()[1] for line in listed.stdout.splitlines()[1:]} == {
            "bucket.storage.takoform.io/adopt",
            "bucket.storage.takoform.io/steal",
        }
        traced = as_plugin(kube_cluster, tmp_path, bob, "trace", "bucket/data", "-n", ns_b)
        assert "Bucket data in namespace " + ns_b in traced.stdout, traced.stderr
        assert "Host resource (read under the exact FormRef)\n  not read: " in traced.stdout
        assert traced.returncode == 1 and "Traceback" not in traced.stderr
        said = traced.stderr.splitlines()
        assert all(line.startswith(("warning: ", "error: ")) for line in said), said
        assert "cannot read TakoformHost" in said[-1] and "with your rights" in said[-1], said
        resize = json.dumps({"spec": {"parameters": {"region": "eu-west-1", "sizeGiB": 99}}})
        assert (
            as_user(
                alice, "patch", "bucket", "adopt", "--type=merge", "-p", resize, namespace=ns_a
            ).returncode
            == 0
        )
        assert (
            as_user(
                alice, "delete", "bucket", "steal", "adopt", "--timeout=60s", namespace=ns_a
            ).returncode
            == 0
        )
        # The host's request log: nothing at all for space team-b since Bob's bucket was Ready
        # (read before this test's own look at the host below).
        later = host.log_path.read_text(errors="replace")[seen:]
        assert "team-b" not in later, f"requests for space team-b after Bob's: {later}"
        assert host_names(host, "team-b") == {"data"}
        assert host_spec(host, "team-b", "data")["sizeGiB"] == 10

        # The admin removes B's grant while B's CR exists: the watched grants reach the CR,
        # Blocked, and nothing is deleted (what a deletion without a grant does is the unit
        # rule test_tenancy.test_a_deletion_without_a_grant_stays_blocked_and_deletes_nothing).
        kube_cluster.kubectl("delete", "takoformspacegrant", grant_b)
        wait_until(
            lambda: blocked_reason(kube_cluster, ns_b, "data") == "SpaceNotGranted",
            "B's bucket Blocked once its grant is gone",
        )
        assert host_names(host, "team-b") == {"data"}, "nothing deleted without a grant"


def grant_condition(cluster: KubeCluster, name: str) -> dict[str, Any]:
    """The SelectorTooBroad condition of TakoformSpaceGrant `name` (empty before it is written)."""
    found = cluster.kubectl_json("get", "takoformspacegrant", name)
    return dict(condition_of(found.get("status") or {}, "SelectorTooBroad"))


def test_a_grant_whose_selector_has_no_positive_term_says_so(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    policy: Callable[[str], None],
    tmp_path: Path,
) -> None:
    """NotIn alone matches every namespace without that label, those created later too: the
    grant's status says so (and the operator's log), and stops saying so once it is fixed."""
    suffix = uuid.uuid4().hex[:6]
    broad, named = f"broad-{suffix}", f"named-{suffix}"
    negative = {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["b"]}]}
    policy(grant_manifest(broad, "prod", ["team-a"], selector=negative))
    policy(grant_manifest(named, "prod", ["team-a"], [kube_namespace]))
    log = tmp_path / "operator.log"
    with policy_operator(kube_cluster.kubeconfig, kube_namespace, log, **SETTINGS):
        wait_until(
            lambda: grant_condition(kube_cluster, broad).get("status") == "True",
            f"{broad} SelectorTooBroad",
            timeout=60,
        )
        condition = grant_condition(kube_cluster, broad)
        assert condition["reason"] == "NoPositiveTerm" and "positive term" in condition["message"]
        wait_until(
            lambda: grant_condition(kube_cluster, named).get("status") == "False",
            f"{named} not SelectorTooBroad",
            timeout=60,
        )
        fixed = {"matchLabels": {"team": "a"}, **negative}
        policy(grant_manifest(broad, "prod", ["team-a"], selector=fixed))
        wait_until(
            lambda: grant_condition(kube_cluster, broad).get("status") == "False",
            f"{broad} fixed",
            timeout=60,
        )
        listed = kube_cluster.kubectl("get", "takoformspacegrant", broad).stdout
        assert "TOO BROAD" in listed.splitlines()[0]
    assert f"TakoformSpaceGrant {broad}: spec.namespaces.selector has no positive term" in (
        log.read_text(errors="replace")
    )
