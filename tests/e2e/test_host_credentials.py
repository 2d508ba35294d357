"""What the operator sends to a host, on the real API server against real host processes
(docs/tenancy.md, "What a TakoformHost can reach"): a token Secret that is not opted in for the
host at its URL is never sent (a host moved to another URL sends nothing there; the rule's
every case is a row of tests/unit/test_tenancy.py), and a plain http host is refused unless it
says insecure explicitly, both as a TakoformHost and as the implicit host of the settings."""

from __future__ import annotations

import json
import shlex
import uuid
from pathlib import Path
from typing import Any

import pytest
from fixtures_host import HostProcess
from fixtures_kube import KubeCluster, wait_until
from manifests import bucket
from operator_process import condition_of, cr_status, is_ready, operator_process, policy_operator
from tenancy import granted, host_manifest, token_secret

pytestmark = [pytest.mark.kube, pytest.mark.usefixtures("kube_crds")]


def host_requests(host: HostProcess) -> list[str]:
    """The API requests in the host's access log (health checks left out)."""
    lines = host.log_path.read_text(errors="replace").splitlines()
    return [line for line in lines if "/v1alpha3/" in line]


def host_ready(cluster: KubeCluster, name: str) -> dict[str, Any]:
    found = cluster.get_object("takoformhost", name)
    assert found is not None, f"TakoformHost {name} is gone"
    return dict(condition_of(found.get("status") or {}, "Ready"))


#: The hosts probed and their token Secrets read again every second.
EVERY_SECOND = {"HOST_STATUS_SECONDS": "1", "TOKEN_REFRESH_SECONDS": "1"}


def test_a_token_secret_not_opted_in_for_the_host_is_never_sent(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    host_factory: Any,
    tmp_path: Path,
) -> None:
    ns = kube_namespace
    host = host_factory(extra_args=("--access-log",), spaces=["team-a"])
    name = f"bare-{uuid.uuid4().hex[:6]}"
    # The Secret exists and holds the right token, but nobody opted it in for this host.
    token_secret(kube_cluster, ns, "some-token", host.token)
    kube_cluster.apply(host_manifest(name, host.url, "some-token"))
    before = len(host_requests(host))  # the fixture's own space set-up
    log = tmp_path / "operator.log"
    try:
        with (
            granted(kube_cluster, ns, ["team-a"], host=name),
            policy_operator(kube_cluster.kubeconfig, ns, log, ns, **EVERY_SECOND),
        ):
            kube_cluster.apply(bucket("logs", hostRef=name), namespace=ns)

            def refused() -> bool:
                ready = host_ready(kube_cluster, name)
                degraded = condition_of(cr_status(kube_cluster, ns, "logs"), "Degraded")
                return ready.get("reason") == "SecretNotOptedIn" and "not opted in" in str(
                    degraded.get("message")
                )

            wait_until(refused, "the host and the CR to say the Secret is not opted in")
            ready = host_ready(kube_cluster, name)
            assert ready["status"] == "False"
            remedy = (
                f"kubectl -n {ns} annotate secret some-token "
                f"takoform.io/host-credential-for={name}={host.url}"
            )
            assert ready["message"].endswith(remedy)
            assert host.token not in ready["message"]
            # Not one request reached the host: the token was never sent, not even to probe.
            assert host_requests(host)[before:] == []
            # The remedy as printed (kubectl, the admin's credentials) opts it in: it is used.
            kube_cluster.kubectl(*shlex.split(remedy)[1:])
            wait_until(lambda: is_ready(kube_cluster, ns, "logs"), "the bucket Ready once opted in")
            # The TakoformHost's own status is written on its own clock (HOST_STATUS_SECONDS).
            wait_until(
                lambda: host_ready(kube_cluster, name).get("reason") == "Reachable",
                "the TakoformHost Reachable once opted in",
            )
            assert host_requests(host)[before:], "requests once the Secret is opted in"
            assert host.token not in log.read_text(errors="replace")
            kube_cluster.kubectl("delete", "bucket", "logs", "--timeout=60s", namespace=ns)
    except BaseException:
        print(log.read_text(errors="replace")[-6000:])
        raise
    finally:
        kube_cluster.kubectl("delete", "takoformhost", name, "--wait=false", check=False)


def probed_twice_more(cluster: KubeCluster, name: str) -> None:
    """Wait until the operator probed host `name` twice more (its status's lastProbeTime, one
    second apart at HOST_STATUS_SECONDS=1): probes that would have reached the host."""
    seen: set[str] = set()

    def probed() -> bool:
        found = cluster.get_object("takoformhost", name) or {}
        seen.add(str((found.get("status") or {}).get("lastProbeTime")))
        return len(seen) >= 3

    wait_until(probed, f"two more probes of TakoformHost {name}")


def test_a_credential_follows_its_url_a_host_moved_elsewhere_sends_nothing_there(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    host_factory: Any,
    tmp_path: Path,
) -> None:
    ns = kube_namespace
    first = host_factory(extra_args=("--access-log",), spaces=["team-a"])
    second = host_factory(extra_args=("--access-log",))
    name = f"moving-{uuid.uuid4().hex[:6]}"
    # Opted in by name only, as a Secret of an earlier release is found after the upgrade.
    token_secret(kube_cluster, ns, "moving-token", first.token)
    kube_cluster.kubectl(
        "annotate", "secret", "moving-token", f"takoform.io/host-credential-for={name}",
        namespace=ns,
    )  # fmt: skip
    kube_cluster.apply(host_manifest(name, first.url, "moving-token"))
    before = {host.url: len(host_requests(host)) for host in (first, second)}

    def sent_to(host: HostProcess) -> list[str]:
        return host_requests(host)[before[host.url] :]

    def refused(reason: str, says: str) -> bool:
        ready = host_ready(kube_cluster, name)
        return ready.get("reason") == reason and says in str(ready.get("message"))

    log = tmp_path / "operator.log"
    try:
        with (
            granted(kube_cluster, ns, ["team-a"], host=name),
            policy_operator(kube_cluster.kubeconfig, ns, log, ns, **EVERY_SECOND),
        ):
            kube_cluster.apply(bucket("logs", hostRef=name), namespace=ns)
            # By name only: bound to no URL, so sent nowhere; the status says what to write.
            wait_until(
                lambda: refused("SecretNotOptedInForUrl", "opts this host in by name only"),
                "the TakoformHost refusing a Secret opted in by name only",
            )
            remedy = (
                f"kubectl -n {ns} annotate secret moving-token "
                f"takoform.io/host-credential-for={name}={first.url} --overwrite"
            )
            assert host_ready(kube_cluster, name)["message"].endswith(remedy)
            assert sent_to(first) == []
            kube_cluster.kubectl(*shlex.split(remedy)[1:])
            wait_until(lambda: is_ready(kube_cluster, ns, "logs"), "the bucket Ready once opted in")
            assert sent_to(first), "requests once the Secret is opted in at this URL"

            # Whoever may edit the TakoformHost points it at another URL: nothing goes there.
            moved = json.dumps({"spec": {"url": second.url}})
            kube_cluster.kubectl("patch", "takoformhost", name, "--type=merge", "-p", moved)
            wait_until(
                lambda: refused("SecretNotOptedInForUrl", f"not at its URL {second.url}"),
                "the TakoformHost refusing the Secret at its new URL",
            )
            message = host_ready(kube_cluster, name)["message"]
            assert f"is a credential of this host at {first.url} only" in message
            remedy = (
                f"kubectl -n {ns} annotate secret moving-token "
                f"takoform.io/host-credential-for={name}={second.url} --overwrite"
            )
            assert message.endswith(remedy), message
            # A CR of the host says so too, and sends nothing either.
            grow = json.dumps({"spec": {"parameters": {"sizeGiB": 30}}})
            kube_cluster.kubectl(
                "patch", "bucket", "logs", "--type=merge", "-p", grow, namespace=ns
            )

            def cr_refused() -> bool:
                degraded = condition_of(cr_status(kube_cluster, ns, "logs"), "Degraded")
                return degraded.get("reason") == "HostUnavailable" and (
                    f"not at its URL {second.url}" in str(degraded.get("message"))
                )

            wait_until(cr_refused, "the bucket Degraded, naming the refused URL")
            probed_twice_more(kube_cluster, name)
            assert sent_to(second) == [], "a request (with the token) reached the new URL"
            assert first.token not in log.read_text(errors="replace")

            # The CR lets go without the host (Orphan); the admin's opt-in moves the token.
            orphan = json.dumps({"spec": {"deletionPolicy": "Orphan"}})
            kube_cluster.kubectl(
                "patch", "bucket", "logs", "--type=merge", "-p", orphan, namespace=ns
            )
            kube_cluster.kubectl("delete", "bucket", "logs", "--timeout=60s", namespace=ns)
            assert sent_to(second) == []
            kube_cluster.kubectl(*shlex.split(remedy)[1:])
            # Sent there now, as the admin wrote (that host knows another token: 401).
            wait_until(
                lambda: refused("Unauthenticated", "the host refused the token (401)"),
                "the token sent to the new URL once opted in there",
            )
            assert sent_to(second), "requests once the Secret is opted in at the new URL"
    except BaseException:
        print(log.read_text(errors="replace")[-6000:])
        raise
    finally:
        kube_cluster.kubectl("delete", "takoformhost", name, "--wait=false", check=False)


def test_a_plain_http_host_is_refused_unless_it_says_insecure(
    kube_cluster: KubeCluster,
    kube_namespace: str,
    host_factory: Any,
    tmp_path: Path,
) -> None:
    ns = kube_namespace
    # A TakoformHost: the API server refuses http without insecure (the CRD's CEL rule).
    plain = json.loads(host_manifest("plain", "http://127.0.0.1:9", "t", insecure=False))
    refused = kube_cluster.kubectl("apply", "-f", "-", input=json.dumps(plain), check=False)
    assert refused.returncode != 0
    assert "url must be https; a plain http host needs insecure: true explicitly" in (
        refused.stderr
    )
    # The implicit host of the settings: the operator refuses it, the CR says why.
    host = host_factory(extra_args=("--access-log",), spaces=["team-a"])
    before = len(host_requests(host))
    log = tmp_path / "operator.log"
    with (
        granted(kube_cluster, ns, ["team-a"]),
        operator_process(
            kube_cluster.kubeconfig, host, ns, log, METRICS_PORT="0", HOST_INSECURE="false"
        ),
    ):
        kube_cluster.apply(bucket("logs"), namespace=ns)

        def degraded() -> dict[str, Any]:
            return condition_of(cr_status(kube_cluster, ns, "logs"), "Degraded")

        wait_until(lambda: degraded().get("status") == "True", "the CR Degraded")
        message = str(degraded()["message"])
        assert "plain http URL without TAKOFORM_HOST_INSECURE set to true" in message, message
        assert host_requests(host)[before:] == []
        # Nothing reached the host: the CR lets go without it (its remedy, Orphan).
        orphan = json.dumps({"spec": {"deletionPolicy": "Orphan"}})
        kube_cluster.kubectl("patch", "bucket", "logs", "--type=merge", "-p", orphan, namespace=ns)
        kube_cluster.kubectl("delete", "bucket", "logs", "--timeout=60s", namespace=ns)
    assert host_requests(host)[before:] == []
    assert "Traceback" not in log.read_text(errors="replace")
