"""The operator as users run it, for the end-to-end tests: a `takoform-operator run` process for
one namespace, the reference host as a real process, a real kube-apiserver."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fixtures_kube import KubeCluster, wait_until
from lagging_proxy import STASHED, lagging_watches
from operator_process import Operator, operator_process, serving
from processes import free_port
from tenancy import granted


@pytest.fixture
def operator(
    kube_cluster: KubeCluster,
    kube_crds: list[Any],
    kube_namespace: str,
    host_factory: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[tuple[Operator, Any, str]]:
    """The operator for the test's namespace; `@pytest.mark.operator_settings(NAME="value")`
    overrides TAKOFORM_* settings (default: re-observe every 2 s), `@pytest.mark.host_args(...)`
    adds arguments of the host (e.g. "--access-log"), `@pytest.mark.lagging_watches(SECONDS)`
    puts the API server behind a proxy that delivers watch streams that late (lagging_proxy).
    The namespace is granted space team-a on the implicit host `default` (the reference host of
    the fixture)."""
    marker = request.node.get_closest_marker("operator_settings")
    settings = {"POLL_READY_SECONDS": "2", **(marker.kwargs if marker else {})}
    host_args = request.node.get_closest_marker("host_args")
    host = host_factory(commit_delay=0.1, extra_args=host_args.args if host_args else ())
    with host.api() as api:
        api.put("/v1alpha3/spaces/team-a")
    port = free_port()
    log = tmp_path / "operator.log"
    lagging = request.node.get_closest_marker("lagging_watches")
    with contextlib.ExitStack() as stack:
        kubeconfig = kube_cluster.kubeconfig
        if lagging:
            proxy = stack.enter_context(
                lagging_watches(kube_cluster, lagging.args[0], tmp_path / "proxy")
            )
            request.node.stash[STASHED] = proxy
            kubeconfig = proxy.kubeconfig
        stack.enter_context(granted(kube_cluster, kube_namespace, ["team-a"]))
        process = stack.enter_context(
            operator_process(
                kubeconfig, host, kube_namespace, log, METRICS_PORT=str(port), **settings
            )
        )
        running = Operator(process, log, f"http://127.0.0.1:{port}/metrics")
        try:
            wait_until(lambda: serving(running), "the operator's metrics endpoint", timeout=30)
            yield running, host, kube_namespace
        except BaseException:
            print(running.log_tail())
            raise


@pytest.fixture
def policy(kube_cluster: KubeCluster) -> Iterator[Callable[[str], None]]:
    """Apply cluster-scoped TakoformHosts/TakoformSpaceGrants; all removed afterwards."""
    applied: list[tuple[str, str]] = []

    def apply(manifest: str) -> None:
        doc = json.loads(manifest)
        kube_cluster.apply(manifest)
        applied.append((doc["kind"].lower(), doc["metadata"]["name"]))

    yield apply
    for kind, name in applied:
        kube_cluster.kubectl("delete", kind, name, "--wait=false", check=False)
