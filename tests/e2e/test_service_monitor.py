"""The chart's ServiceMonitor as Prometheus runs it: the scrape job the prometheus-operator
generates from it, in a real Prometheus (upstream 3.x built by hack/tools.sh: Debian's 2.42 has
no kubernetes_sd) that finds the operator through the API server. The operator's Blocked series
names the CR's namespace and name; the same job without `honor_labels` names the namespace of
the operator's Service instead, so the check can fail. The job's labels are the ones the chart's
operator alerts select (`TakoformOperatorDown` holds while it leads).

Everything runs on loopback: the operator is a `takoform-operator run` process, and its metrics
Service is the chart's, in the namespace a release would have. The API server refuses loopback
addresses in IPv4/IPv6 EndpointSlices (and Endpoints), so no endpointslice controller could
publish 127.0.0.1 even for a pod on a node: the test writes the slice itself, as that controller
would for the Service, with addressType FQDN and the address 127.0.0.1 (Prometheus joins it with
the port and resolves no name)."""

from __future__ import annotations

import base64
import json
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from fixtures_helm import CHART
from fixtures_kube import KubeCluster, drop_namespace, wait_until
from loopback import sockets_of
from manifests import bucket
from monitoring import Process, cached_tool, running_prometheus
from operator_process import Operator, operator_process, serving
from processes import free_port
from tenancy import granted
from waiting import wait_for

pytestmark = [pytest.mark.kube, pytest.mark.host]

RELEASE = "tko"

# The prometheus-operator's config reloader replaces $(SHARD) with the shard's number.
SHARD = "0"
PROMETHEUS_SA = "prometheus"


@pytest.fixture(scope="session")
def prometheus_upstream() -> Path:
    """Upstream Prometheus 3.x from the tools cache (Debian's has no kubernetes_sd)."""
    return cached_tool("prometheus_upstream")


# -- the prometheus-operator's translation of a ServiceMonitor ----------------------------------


def _label_name(key: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", key)


def service_monitor_job(monitor: dict[str, Any], index: int, sd: dict[str, Any]) -> dict[str, Any]:
    """The scrape job the prometheus-operator generates for endpoint `index` of `monitor`
    (serviceDiscoveryRole EndpointSlice, one shard), `sd` being how it reaches the API server.
    Only the fields the chart's ServiceMonitor uses are translated: anything else fails here
    rather than being ignored."""
    meta, spec = monitor["metadata"], monitor["spec"]
    endpoint = spec["endpoints"][index]
    untranslated = (
        set(spec) - {"selector", "endpoints"}
        | set(spec["selector"]) - {"matchLabels"}
        | set(endpoint) - {"port", "interval", "honorLabels", "bearerTokenFile"}
    )
    assert not untranslated, f"ServiceMonitor fields this test does not translate: {untranslated}"
    port = endpoint["port"]
    target_ref = [
        "__meta_kubernetes_endpointslice_address_target_kind",
        "__meta_kubernetes_endpointslice_address_target_name",
    ]
    relabelings: list[dict[str, Any]] = [
        {"source_labels": ["job"], "target_label": "__tmp_prometheus_job_name"}
    ]
    for key, value in sorted(spec["selector"]["matchLabels"].items()):
        name = _label_name(key)
        relabelings.append(
            {
                "action": "keep",
                "source_labels": [
                    f"__meta_kubernetes_service_label_{name}",
                    f"__meta_kubernetes_service_labelpresent_{name}",
                ],
                "regex": f"({value});true",
            }
        )
    relabelings += [
        {
            "action": "keep",
            "source_labels": ["__meta_kubernetes_endpointslice_port_name"],
            "regex": port,
        },
        {
            "source_labels": target_ref,
            "separator": ";",
            "regex": "Node;(.*)",
            "replacement": "${1}",
            "target_label": "node",
        },
        {
            "source_labels": target_ref,
            "separator": ";",
            "regex": "Pod;(.*)",
            "replacement": "${1}",
            "target_label": "pod",
        },
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
        {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
        {
            "action": "drop",
            "source_labels": ["__meta_kubernetes_pod_phase"],
            "regex": "(Failed|Succeeded)",
        },
        {
            "source_labels": ["__meta_kubernetes_service_name"],
            "target_label": "job",
            "replacement": "${1}",
        },
        {"target_label": "endpoint", "replacement": port},
        {
            "source_labels": ["__address__", "__tmp_hash"],
            "target_label": "__tmp_hash",
            "regex": "(.+);",
            "replacement": "$1",
            "action": "replace",
        },
        {
            "source_labels": ["__tmp_hash"],
            "target_label": "__tmp_hash",
            "modulus": 1,
            "action": "hashmod",
        },
        {
            "source_labels": ["__tmp_hash", "__tmp_disable_sharding"],
            "regex": f"{SHARD};|.+;.+",
            "action": "keep",
        },
    ]
    # The ServiceAccount token Prometheus's pod has at that path is, here, the file `sd` uses.
    token = {}
    if "bearerTokenFile" in endpoint:
        assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
        token = {"authorization": {"credentials_file": sd["authorization"]["credentials_file"]}}
    return {
        "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}",
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        **token,
        "kubernetes_sd_configs": [
            {"role": "endpointslice", "namespaces": {"names": [meta["namespace"]]}, **sd}
        ],
        "scrape_interval": endpoint["interval"],
        "relabel_configs": relabelings,
    }


def rendered(helm: Any, namespace: str, tmp_path: Path, *values: str) -> dict[str, Any]:
    """The chart's objects by kind for release RELEASE in `namespace`, with the ServiceMonitor
    (scraping every second) and the PrometheusRule (Blocked after 2 s), whose rules are written
    to the file under the key "rules", and the metrics-reader ClusterRole and its binding to
    the ServiceAccount PROMETHEUS_SA of `namespace` under "reader"."""
    sets = [
        "metrics.serviceMonitor.enabled=true",
        "metrics.serviceMonitor.interval=1s",
        "metrics.prometheusRule.enabled=true",
        "alerts.blockedFor=2s",
        "metrics.auth.reader.create=true",
        f"metrics.auth.reader.serviceAccounts[0].name={PROMETHEUS_SA}",
        *values,
    ]
    args = [arg for value in sets for arg in ("--set", value)]
    out = helm("template", RELEASE, str(CHART), "--namespace", namespace, *args).stdout
    every = [doc for doc in yaml.safe_load_all(out) if doc]
    docs = {doc["kind"]: doc for doc in every}
    reader = [d for d in every if d["metadata"]["name"].endswith("-metrics-reader")]
    rules = tmp_path / "rules.yaml"
    rules.write_text(yaml.safe_dump(docs["PrometheusRule"]["spec"], sort_keys=False))
    return {**docs, "rules": rules, "reader": reader}


# -- what the API server holds ---------------------------------------------------------------------


def grant_prometheus(kube: KubeCluster, namespace: str, scratch: Path) -> dict[str, Any]:
    """A ServiceAccount allowed only to list and watch what endpointslice discovery reads
    (EndpointSlices, Services, Pods) in `namespace`; returns the kubernetes_sd settings that use
    its token, as Prometheus in the cluster would use its mounted one."""
    rules = [
        {"apiGroups": [""], "resources": ["services", "pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["discovery.k8s.io"],
            "resources": ["endpointslices"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    subject = {"kind": "ServiceAccount", "name": PROMETHEUS_SA, "namespace": namespace}
    manifests = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": PROMETHEUS_SA}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": PROMETHEUS_SA},
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": PROMETHEUS_SA},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": PROMETHEUS_SA,
            },
            "subjects": [subject],
        },
    ]
    kube.apply(json.dumps({"apiVersion": "v1", "kind": "List", "items": manifests}), namespace)
    token = kube.kubectl(
        "create", "token", PROMETHEUS_SA, "--duration=1h", namespace=namespace
    ).stdout.strip()
    token_file = scratch / "prometheus.token"
    token_file.write_text(token)
    token_file.chmod(0o600)
    return {
        "api_server": kube.server,
        "authorization": {"credentials_file": str(token_file)},
        "tls_config": {"ca_file": str(_ca_file(kube, scratch))},
    }


def _ca_file(kube: KubeCluster, scratch: Path) -> Path:
    """The API server's CA as a file: the kubeconfig's path, or its embedded data written out."""
    cluster = kube.kubectl_json("config", "view", "--minify", "--raw")["clusters"][0]["cluster"]
    if cluster.get("certificate-authority"):
        return Path(cluster["certificate-authority"])
    path = scratch / "api-server-ca.crt"
    path.write_bytes(base64.b64decode(cluster["certificate-authority-data"]))
    return path


def endpoint_slice(service: dict[str, Any], address: str, address_type: str) -> str:
    """The EndpointSlice the endpointslice controller writes for `service` with one Ready
    endpoint at `address` (the Service's ports, whose named targetPort is the operator
    container's port of the same number), of `address_type`."""
    meta = service["metadata"]
    ports = [
        {"name": port["name"], "port": port["port"], "protocol": port["protocol"]}
        for port in service["spec"]["ports"]
    ]
    return json.dumps(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{meta['name']}-{address_type.lower()}",
                "namespace": meta["namespace"],
                "labels": {
                    "kubernetes.io/service-name": meta["name"],
                    "endpointslice.kubernetes.io/managed-by": "takoform-tests",
                },
                "ownerReferences": [
                    {
                        "apiVersion": "v1",
                        "kind": "Service",
                        "name": meta["name"],
                        "uid": meta["uid"],
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "addressType": address_type,
            "endpoints": [
                {
                    "addresses": [address],
                    "conditions": {"ready": True, "serving": True, "terminating": False},
                }
            ],
            "ports": ports,
        }
    )


# -- what a Prometheus process reports ----------------------------------------------------------


def active_targets(prom: Process, pool: str) -> list[dict[str, Any]]:
    found = prom.get("/api/v1/targets", state="active", scrapePool=pool) or {}
    return list(found.get("data", {}).get("activeTargets", []))


def series(prom: Process, query: str) -> list[dict[str, str]]:
    found = prom.get("/api/v1/query", query=query) or {}
    return [r["metric"] for r in found.get("data", {}).get("result", [])]


# -- the test ------------------------------------------------------------------------------------


def _bucket_condition(kube: KubeCluster, namespace: str, name: str, kind: str) -> bool:
    found = kube.kubectl("get", "bucket", name, "-o", "json", namespace=namespace, check=False)
    if found.returncode != 0:
        return False
    conditions = (json.loads(found.stdout).get("status") or {}).get("conditions", [])
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)


@pytest.fixture
def namespaces(kube_cluster: KubeCluster, kube_namespace: str) -> Iterator[tuple[str, str]]:
    """(the operator's namespace, another one for the CRs)."""
    crs = f"{kube_namespace}-crs"
    kube_cluster.kubectl("create", "namespace", crs)
    try:
        yield kube_namespace, crs
    finally:
        drop_namespace(kube_cluster, crs)


def test_prometheus_discovers_the_operator_and_the_blocked_series_names_the_cr(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    namespaces: tuple[str, str],
    host_factory: Any,
    helm: Any,
    prometheus_upstream: Path,
    tmp_path: Path,
) -> None:
    kube = kube_cluster
    operator_namespace, crs = namespaces
    host = host_factory(commit_delay=0.05)
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a")
    metrics_port = free_port()
    chart = rendered(helm, operator_namespace, tmp_path, f"metrics.port={metrics_port}")
    monitor = chart["ServiceMonitor"]
    assert monitor["spec"]["endpoints"][0]["honorLabels"] is True, "the chart's default"
    # /metrics asks for a token (the chart's default): Process sends its ServiceAccount's, which
    # the chart's metrics-reader ClusterRole lets `get` /metrics.
    assert "bearerTokenFile" in monitor["spec"]["endpoints"][0]
    assert [d["kind"] for d in chart["reader"]] == ["ClusterRole", "ClusterRoleBinding"]
    kube.apply(json.dumps(chart["Service"]), namespace=operator_namespace)
    service = kube.kubectl_json(
        "get", "service", chart["Service"]["metadata"]["name"], namespace=operator_namespace
    )
    # Why the slice is FQDN: the API server refuses a loopback address in an IPv4 slice,
    # the only kind the endpointslice controller writes.
    refused = kube.kubectl(
        "create", "--dry-run=server", "-f", "-", namespace=operator_namespace,
        input=endpoint_slice(service, "127.0.0.1", "IPv4"), check=False,
    )  # fmt: skip
    assert refused.returncode != 0 and "loopback" in refused.stderr, refused.stderr
    kube.apply(endpoint_slice(service, "127.0.0.1", "FQDN"), namespace=operator_namespace)

    sd = grant_prometheus(kube, operator_namespace, tmp_path)
    job = service_monitor_job(monitor, 0, sd)
    reader = json.dumps({"apiVersion": "v1", "kind": "List", "items": chart["reader"]})

    def config(scrape: dict[str, Any]) -> dict[str, Any]:
        return {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": [str(chart["rules"])],
            "scrape_configs": [scrape],
        }

    log = tmp_path / "operator.log"
    with (
        granted(kube, crs, ["team-a"]),
        _applied(kube, reader),
        operator_process(
            kube.kubeconfig,
            host,
            crs,
            log,
            METRICS_PORT=str(metrics_port),
            METRICS_AUTH="kubernetes",
            BIND_ADDRESS="127.0.0.1",
            POLL_READY_SECONDS="2",
        ) as process,
        running_prometheus(prometheus_upstream, tmp_path / "sm", config(job)) as prom,
        running_prometheus(
            prometheus_upstream, tmp_path / "no-honor", config({**job, "honor_labels": False})
        ) as control,
    ):
        running = Operator(process, log, f"http://127.0.0.1:{metrics_port}/metrics")
        try:
            wait_until(lambda: serving(running), "the operator's metrics endpoint", timeout=30)
            _assert_discovered(prom, job["job_name"], service, metrics_port)
            _assert_operator_down_holds(prom, chart, service)
            _assert_blocked_series_names_the_cr(prom, control, kube, host, crs, operator_namespace)
        except BaseException:
            print(running.log_tail())
            raise
        assert "metrics scrape refused" not in log.read_text(), running.log_tail()
        api_server = kube.server.removeprefix("https://")
        for pid in (prom.pid, control.pid, process.pid):
            sockets = sockets_of([pid])
            off = [s.line for s in sockets if not s.on_loopback]
            assert off == [], f"sockets of pid {pid} off loopback: {off}"
            assert any(s.state == "ESTAB" and s.peer == api_server for s in sockets), (
                f"pid {pid} holds no connection to the API server {api_server}: {sockets}"
            )


@contextmanager
def _applied(kube: KubeCluster, manifest: str) -> Iterator[None]:
    """Cluster-scoped objects (which no namespace deletion removes), deleted afterwards."""
    kube.apply(manifest)
    try:
        yield
    finally:
        kube.kubectl("delete", "--ignore-not-found", "-f", "-", input=manifest, check=False)


def _assert_discovered(
    prom: Process, pool: str, service: dict[str, Any], metrics_port: int
) -> None:
    """Exactly one target in the ServiceMonitor's pool, found by endpointslice discovery (its
    discovered labels come from the API server's Service and EndpointSlice), and up."""

    def discovered_and_up() -> dict[str, Any] | None:
        targets = active_targets(prom, pool)
        return targets[0] if len(targets) == 1 and targets[0]["health"] == "up" else None

    t0 = time.monotonic()
    target = wait_for(discovered_and_up, f"one healthy target in {pool}", timeout=60, interval=0.2)
    print(f"target discovered and up within {time.monotonic() - t0:.1f}s of the operator serving")
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    discovered = target["discoveredLabels"]
    assert discovered["__meta_kubernetes_namespace"] == namespace
    assert discovered["__meta_kubernetes_endpointslice_name"] == f"{name}-fqdn"
    assert discovered["__meta_kubernetes_endpointslice_address_type"] == "FQDN"
    assert discovered["__meta_kubernetes_endpointslice_port_name"] == "metrics"
    assert discovered["__meta_kubernetes_service_name"] == name
    selector = service["spec"]["selector"]
    for key, value in selector.items():
        assert discovered[f"__meta_kubernetes_service_label_{_label_name(key)}"] == value
    assert target["scrapeUrl"] == f"http://127.0.0.1:{metrics_port}/metrics"
    expected = {
        "namespace": namespace,
        "service": name,
        "endpoint": "metrics",
        "job": name,
        "instance": f"127.0.0.1:{metrics_port}",
    }
    labels = target["labels"]
    assert {k: labels.get(k) for k in expected} == expected, labels


def _assert_operator_down_holds(
    prom: Process, chart: dict[str, Any], service: dict[str, Any]
) -> None:
    """TakoformOperatorDown selects this release's series by the job the ServiceMonitor makes
    (namespace and job of its Service): they are there, and its expression is empty."""
    namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
    leading = f'takoform_leader{{namespace="{namespace}",job="{name}"}} == 1'
    wait_until(lambda: series(prom, leading) != [], "the release's leader series", 60)
    groups = chart["PrometheusRule"]["spec"]["groups"]
    (down,) = [r for g in groups for r in g["rules"] if r["alert"] == "TakoformOperatorDown"]
    assert f'takoform_leader{{namespace="{namespace}",job="{name}"}}' in down["expr"]
    answer = prom.get("/api/v1/query", query=down["expr"])
    assert answer and answer["status"] == "success", answer
    assert answer["data"]["result"] == [], "the operator leads: TakoformOperatorDown holds"


def _assert_blocked_series_names_the_cr(
    prom: Process,
    control: Process,
    kube: KubeCluster,
    host: Any,
    crs: str,
    operator_namespace: str,
) -> None:
    """A Bucket in `crs` goes Blocked (its host resource deleted and re-created): the operator's
    Blocked series, as scraped, names `crs` and the Bucket; without honor_labels it names the
    operator's namespace. (The Blocked alert itself reads the CR through kube-state-metrics:
    tests/e2e/test_alerts_from_crs.py.)"""
    kube.apply(bucket("watched"), namespace=crs)
    wait_until(lambda: _bucket_condition(kube, crs, "watched", "Ready"), "Bucket watched Ready", 90)
    query = 'takoform_resource_blocked{name="watched"} == 1'
    assert series(prom, query) == []
    target = {"space": "team-a", "apiVersion": "storage.takoform.io/v1", "kind": "Bucket"}
    host.admin("POST", "/admin/v1/resources/recreate", {**target, "name": "watched"})

    def blocked(prometheus: Process) -> list[dict[str, str]]:
        return series(prometheus, query)

    expected = {"namespace": crs, "name": "watched", "kind": "Bucket", "reason": "UidMismatch"}
    t0 = time.monotonic()
    scraped = wait_for(lambda: blocked(prom), "the Blocked series scraped", timeout=60)
    print(f"Blocked series scraped {time.monotonic() - t0:.1f}s after the recreate")
    assert [{k: s.get(k) for k in expected} for s in scraped] == [expected], (
        "the series names the CR's namespace, not the operator's"
    )
    assert "exported_namespace" not in scraped[0]

    # The same job without honor_labels: the target's namespace overwrites the series' own.
    scraped = wait_for(lambda: blocked(control), "the control's Blocked series", timeout=60)
    assert [(s["namespace"], s["exported_namespace"]) for s in scraped] == [
        (operator_namespace, crs)
    ]

    # Remedy: delete the host-side replacement; the operator re-creates, the series goes.
    host.admin("POST", "/admin/v1/resources/delete", {**target, "name": "watched"})
    wait_until(lambda: blocked(prom) == [], "the Blocked series gone", 60)
    wait_until(
        lambda: _bucket_condition(kube, crs, "watched", "Ready"), "Bucket watched Ready again", 90
    )
    kube.kubectl("delete", "bucket", "watched", "--timeout=60s", namespace=crs)
