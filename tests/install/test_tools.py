"""hack/tools.sh must work from an empty Go module cache: a step that only works once a module's
sources happen to be in the cache (from an earlier build, say) passes on every warm machine and
fails for a newcomer. Here the tool cache stays warm, so nothing is rebuilt, while GOMODCACHE and
GOCACHE are empty: every step that needs a module's sources must fetch them itself."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from fixtures_kube import REPO
from flux import build_version as fluxhealth_version


def pinned_go_builds() -> dict[str, str]:
    """Each Go-built component of hack/tools.sh with its version from hack/versions.env."""
    pins = dict(re.findall(r"^(\w+)=(\S+)$", (REPO / "hack/versions.env").read_text(), re.M))
    return {
        "kubernetes": pins["KUBERNETES_VERSION"],
        "kubernetes-node": pins["KUBERNETES_VERSION"],
        "etcd": pins["ETCD_VERSION"],
        "helm": pins["HELM_VERSION"],
        "prometheus": pins["PROMETHEUS_MODULE_VERSION"],
        "kube-state-metrics": pins["KUBE_STATE_METRICS_VERSION"],
        "fluxhealth": fluxhealth_version(),  # FLUX_RUNTIME_VERSION and a key of its main.go
    }


def test_tools_work_from_an_empty_go_module_cache(tmp_path: Path) -> None:
    cache = os.environ.get("TAKOFORM_TOOLS_CACHE") or Path.home() / ".cache/takoform-operator"
    bindir = Path(cache) / "bin"
    builds = pinned_go_builds()
    missing = [
        f"{c}-{v}" for c, v in builds.items() if not (bindir / f"{c}-{v}/.complete").is_file()
    ]
    assert not missing, f"this check needs the tools built: run `make tools` (missing {missing})"
    env = {
        **os.environ,
        "GOMODCACHE": str(tmp_path / "gomodcache"),
        "GOCACHE": str(tmp_path / "gocache"),
        # Module cache files are read-only by default; writable ones let tmp_path be removed.
        "GOFLAGS": "-buildvcs=false -modcacherw",
    }
    result = subprocess.run(
        ["hack/tools.sh"], cwd=REPO, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    cached = dict(re.findall(r"tools: (\S+) (v\S+): cached in", result.stderr))
    assert cached == builds, result.stderr[-3000:]
