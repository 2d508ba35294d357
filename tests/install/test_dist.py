"""`make dist` (hack/dist.py) builds what a release publishes, and each artifact works on its own:
the checksums verify, the chart package renders, the wheel installs into a fresh environment and
its plugin runs. The release workflow builds through the same target."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
import tomllib
import venv
from pathlib import Path

import pytest
import yaml
from fixtures_kube import REPO
from runners import Helm

VERSION = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
CHART = yaml.safe_load((REPO / "charts/takoform-operator/Chart.yaml").read_text())
IMAGE = REPO / "build" / "image" / f"takoform-operator-{VERSION}.oci.tar"


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, REPO / "hack/dist.py", "--out", out], check=True, timeout=300)
    return out


def test_dist_holds_every_artifact_and_checksums_that_verify(dist: Path) -> None:
    artifacts = {
        f"takoform-operator-{CHART['version']}.tgz",
        f"takoform_operator-{VERSION}-py3-none-any.whl",
        f"takoform_operator-{VERSION}.tar.gz",
        "RELEASE-NOTES.md",
    }
    if IMAGE.is_file():  # `make image` ran: its archive ships too
        artifacts.add(IMAGE.name)
    assert {p.name for p in dist.iterdir()} == artifacts | {"SHA256SUMS"}
    summed = {line.split("  ", 1)[1] for line in (dist / "SHA256SUMS").read_text().splitlines()}
    assert summed == artifacts
    check = subprocess.run(["sha256sum", "-c", "SHA256SUMS"], cwd=dist, capture_output=True)
    assert check.returncode == 0, check.stdout


def test_release_notes_name_the_versions_and_the_image_digest(dist: Path) -> None:
    notes = (dist / "RELEASE-NOTES.md").read_text()
    assert notes.startswith(f"# takoform-operator {VERSION}\n")
    assert f"{CHART['version']} (appVersion {CHART['appVersion']})" in notes
    if IMAGE.is_file():
        assert "digest `sha256:" in notes
        # As the chart's default pulls it, not as the local build tagged it.
        values = yaml.safe_load((REPO / "charts/takoform-operator/values.yaml").read_text())
        assert f"| image `{values['image']['repository']}:{CHART['appVersion']}` (" in notes
    else:
        assert "No image archive" in notes


def test_the_chart_package_renders_the_operator_at_its_app_version(dist: Path, helm: Helm) -> None:
    package = dist / f"takoform-operator-{CHART['version']}.tgz"
    docs = list(yaml.safe_load_all(helm("template", "t", str(package)).stdout))
    deployment = next(doc for doc in docs if doc and doc["kind"] == "Deployment")
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image.endswith(f":{CHART['appVersion']}")


def test_the_wheel_installs_alone_and_its_plugin_runs(dist: Path, tmp_path: Path) -> None:
    env = tmp_path / "env"
    venv.create(env, with_pip=True)
    wheel = dist / f"takoform_operator-{VERSION}-py3-none-any.whl"
    subprocess.run(
        [env / "bin/python", "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", wheel],
        check=True,
    )
    # The dependencies come from this environment (no index here), appended after the fresh
    # environment's own site-packages, whose takoform_operator is the wheel's.
    purelib = sysconfig.get_paths()["purelib"]
    fresh_purelib = subprocess.run(
        [env / "bin/python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    (Path(fresh_purelib) / "dependencies.pth").write_text(purelib + "\n")
    plugin = subprocess.run(
        [env / "bin/kubectl-takoform", "--version"], capture_output=True, text=True, timeout=60
    )
    assert plugin.returncode == 0, plugin.stderr
    assert f" {VERSION} " in plugin.stdout
    origin = subprocess.run(
        [env / "bin/python", "-c", "import takoform_operator; print(takoform_operator.__file__)"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert origin.startswith(fresh_purelib), origin


def test_the_release_workflow_builds_with_make_dist_and_pushes_chart_and_image() -> None:
    workflow = yaml.safe_load((REPO / ".github/workflows/release.yml").read_text())
    runs = [step.get("run", "") for job in workflow["jobs"].values() for step in job["steps"]]
    script = "\n".join(runs)
    assert "make dist" in script
    assert "helm push" in script
    assert "skopeo copy" in script
    # The push reads the artifacts make dist wrote, and checks them first.
    assert script.index("make dist") < script.index("sha256sum -c") < script.index("helm push")
