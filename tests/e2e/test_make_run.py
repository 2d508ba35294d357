"""`make run` against a cluster someone else runs (TAKOFORM_USE_EXISTING_CLUSTER=1) needs kubectl
and the project's Python environment, never the Go tool builds: here with an empty tool cache and
no `go` on PATH, the examples still become Ready. What it prints for another shell is enough for
`kubectl takoform trace` to answer."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fixtures_kube import REPO, KubeCluster
from processes import free_port
from waiting import wait_until

pytestmark = pytest.mark.kube

READY_TIMEOUT = 180.0


@pytest.fixture
def make_run(
    kube_cluster: KubeCluster, kube_crds: object, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """hack/run.sh (what `make run` runs after `make venv`) on the test cluster; yields the
    process and the file its output goes to. Afterwards the examples are deleted while the
    operator still runs (so their finalizers go), then the script is interrupted as Ctrl-C
    would."""
    without_go = [
        entry
        for entry in os.environ["PATH"].split(os.pathsep)
        if entry and not (Path(entry) / "go").exists()
    ]
    env = {name: value for name, value in os.environ.items() if not name.startswith("TAKOFORM_")}
    env |= {
        "PATH": os.pathsep.join([str(kube_cluster.kubectl_bin.parent), *without_go]),
        "KUBECONFIG": str(kube_cluster.kubeconfig),
        "TAKOFORM_USE_EXISTING_CLUSTER": "1",
        "TAKOFORM_TOOLS_CACHE": str(tmp_path / "empty-tools-cache"),
        "TAKOFORM_RUN_HOST_DIR": str(tmp_path / "host"),
        "TAKOFORM_METRICS_PORT": "0",
        # The examples' namespace only: other tests' namespaces come and go in this cluster.
        "TAKOFORM_NAMESPACE": "default",
        "HOST_LISTEN": f"127.0.0.1:{free_port()}",
    }
    output = tmp_path / "make-run.log"
    with output.open("wb") as sink:
        script = subprocess.Popen(
            ["hack/run.sh"],
            cwd=REPO,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield script, output
    finally:
        if script.poll() is None:
            kube_cluster.kubectl(
                "delete", "-f", str(REPO / "docs" / "examples"), "--timeout=60s", check=False
            )
        kube_cluster.kubectl(
            "delete", "takoformspacegrant", "make-run-default-team-a", "--wait=false", check=False
        )
        if script.poll() is None:
            os.killpg(script.pid, signal.SIGINT)
            try:
                script.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(script.pid, signal.SIGKILL)
                script.wait()


def test_make_run_on_an_existing_cluster_needs_no_go_tools_and_prints_what_the_plugin_needs(
    make_run: tuple[subprocess.Popen[bytes], Path], kube_cluster: KubeCluster
) -> None:
    script, output = make_run

    def printed_for_another_shell() -> bool:
        text = output.read_text(errors="replace")
        assert script.poll() is None, f"make run exited {script.returncode}:\n{text[-3000:]}"
        assert "run: ERROR" not in text and "Traceback" not in text, text[-3000:]
        return "kubectl takoform trace" in text

    wait_until(
        printed_for_another_shell, "make run's lines for another shell", timeout=READY_TIMEOUT
    )
    text = output.read_text(errors="replace")
    assert "all examples Ready" in text
    assert "tools:" not in text  # hack/tools.sh never ran

    # A second shell with only what make run printed for it: the plugin reaches the host.
    exports = re.findall(r" run: .*?export (.*)$", text, re.M)
    printed = dict(word.split("=", 1) for line in exports for word in shlex.split(line))
    assert printed["KUBECONFIG"] == str(kube_cluster.kubeconfig)
    plugin_dir = printed.pop("PATH").split(os.pathsep)[0]
    env = {name: value for name, value in os.environ.items() if not name.startswith("TAKOFORM_")}
    trace = subprocess.run(
        [Path(plugin_dir) / "kubectl-takoform", "trace", "bucket/logs"],
        env=env | printed, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert trace.returncode == 0, trace.stdout + trace.stderr
    assert "Bucket logs is available" in trace.stdout  # the host's own condition
