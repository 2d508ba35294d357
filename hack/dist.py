"""Builds the release artifacts (`make dist`) into build/dist/ (or --out):

  takoform-operator-<chart version>.tgz          the chart (`helm package`)
  takoform_operator-<version>-py3-none-any.whl   the package: operator, plugin, reference host
  takoform_operator-<version>.tar.gz             its source distribution
  takoform-operator-<version>.oci.tar            the image archive, when `make image` built one
  RELEASE-NOTES.md                               versions, image digest, how to install and verify
  SHA256SUMS                                     every file above (`sha256sum -c SHA256SUMS`)

The wheel and sdist are built by the setuptools backend itself, in a virtual environment of
exactly requirements-build.lock (hashes checked, kept under build/ and reused while the lock is
unchanged), from a copy of the files the image build copies: nothing is resolved, and the
checkout gets no build/lib or egg-info. The image is not built here (`make image` first, as the
release workflow does): an archive older than the checkout is still packaged, and the notes say
which revision it is.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import venv
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
CHART = REPO / "charts" / "takoform-operator"
# What the image build copies of the source (Dockerfile): the package is built from these alone.
PACKAGE_SOURCES = ("pyproject.toml", "README.md", "LICENSE", "NOTICE", "operator")
# The backend's commands read sys.argv: the output directory is taken off it first.
BUILD_BACKEND = """
import sys
from setuptools import build_meta
out = sys.argv.pop()
build_meta.build_sdist(out)
build_meta.build_wheel(out)
"""


def log(message: str) -> None:
    print(f"dist: {message}", file=sys.stderr)


def helm_binary() -> str:
    """The pinned helm of `make tools` (its env.sh), else one on PATH."""
    cache = Path(os.environ.get("TAKOFORM_TOOLS_CACHE") or Path.home() / ".cache/takoform-operator")
    env_sh = cache / "bin" / "env.sh"
    if env_sh.is_file():
        for line in env_sh.read_text().splitlines():
            if line.startswith("export TAKOFORM_HELM_BIN="):
                return line.split("=", 1)[1].strip('"') + "/helm"
    found = shutil.which("helm")
    if not found:
        sys.exit("dist: no helm: run `make tools`")
    return found


def build_env() -> Path:
    """A virtual environment of exactly requirements-build.lock, reused while the lock holds."""
    lock = REPO / "requirements-build.lock"
    key = hashlib.sha256(lock.read_bytes()).hexdigest()[:16]
    env = REPO / "build" / f"build-env-{key}"
    python = env / "bin" / "python"
    if not (env / ".complete").is_file():
        shutil.rmtree(env, ignore_errors=True)
        log(f"creating the build environment {env.name} from {lock.name}")
        venv.create(env, with_pip=True)
        subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
             "--require-hashes", "--no-deps", "--only-binary=:all:", "-r", lock],
            check=True,
        )  # fmt: skip
        (env / ".complete").touch()
    return python


def build_package(out: Path) -> None:
    """The wheel and sdist of the package, built from a copy of PACKAGE_SOURCES."""
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp)
        for name in PACKAGE_SOURCES:
            if (REPO / name).is_dir():
                shutil.copytree(
                    REPO / name,
                    src / name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"),
                )
            else:
                shutil.copy2(REPO / name, src / name)
        subprocess.run(
            [build_env(), "-c", BUILD_BACKEND, out],
            cwd=src, check=True, capture_output=True, text=True,
            env={**os.environ, "SOURCE_DATE_EPOCH": source_date_epoch()},
        )  # fmt: skip


def source_date_epoch() -> str:
    """The commit's time: the timestamps inside the wheel and sdist do not depend on the build's."""
    proc = subprocess.run(
        ["git", "log", "-1", "--format=%ct"], cwd=REPO, capture_output=True, text=True
    )
    return proc.stdout.strip() or "315532800"


def image_archive(version: str) -> dict[str, str] | None:
    """The archive `make image` left for this version, with its manifest digest, tag and base."""
    image = REPO / "build" / "image"
    archive = image / f"takoform-operator-{version}.oci.tar"
    if not archive.is_file():
        return None
    with tarfile.open(archive) as tar:

        def blob(digest: str) -> Any:
            return json.load(tar.extractfile("blobs/" + digest.replace(":", "/")))  # type: ignore[arg-type]

        manifest = json.load(tar.extractfile("index.json"))["manifests"][0]  # type: ignore[arg-type]
        config = blob(blob(manifest["digest"])["config"]["digest"])
    return {
        "archive": str(archive),
        "digest": manifest["digest"],
        "revision": config["config"]["Labels"]["org.opencontainers.image.revision"],
        "reference": manifest["annotations"]["org.opencontainers.image.ref.name"],
        "base": (image / f"takoform-operator-{version}.base").read_text().strip(),
    }


def release_notes(chart: dict[str, str], version: str, files: list[str], image: dict | None) -> str:
    revision = subprocess.run(
        ["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    wheel = next(f for f in files if f.endswith(".whl"))
    lines = [
        f"# takoform-operator {version}",
        "",
        f"Built from revision `{revision or 'unknown'}`.",
        "",
        "| Artifact | Version |",
        "|---|---|",
        f"| chart `{chart['name']}` | {chart['version']} (appVersion {chart['appVersion']}) |",
        f"| package `takoform-operator` (operator, plugin, reference host) | {version} |",
    ]
    if image:
        # Named as the chart pulls it (what the release workflow publishes), not as the local
        # build tagged it.
        values = yaml.safe_load((CHART / "values.yaml").read_text())
        published = f"{values['image']['repository']}:{chart['appVersion']}"
        lines.append(
            f"| image `{published}` (archived as `{image['reference']}`) "
            f"| digest `{image['digest']}` |"
        )
    lines += ["", "Files:", ""] + [f"- `{name}`" for name in files] + [""]
    if image:
        lines += [
            f"The image archive's manifest digest is `{image['digest']}`: the digest a registry",
            "reports after `skopeo copy oci-archive:...` (the chart's `image.digest`). Its base is",
            f"`{image['base']}`; it was built from revision `{image['revision']}`.",
        ]
    else:
        lines.append("No image archive in this build: `make image` before `make dist` adds one.")
    lines += [
        "",
        "Verify, install the chart and the plugin:",
        "",
        "```sh",
        "sha256sum -c SHA256SUMS",
        f"helm install takoform {chart['name']}-{chart['version']}.tgz"
        " --namespace takoform-system --create-namespace",
        f"pip install {wheel}   # kubectl-takoform, the kubectl plugin",
        "```",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "build" / "dist")
    out: Path = parser.parse_args().out.resolve()
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    if str(chart["appVersion"]) != version:
        sys.exit(
            f"dist: the chart's appVersion {chart['appVersion']} is not the package's {version}"
        )
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    subprocess.run([helm_binary(), "package", CHART, "--destination", out], check=True)
    build_package(out)
    image = image_archive(version)
    if image:
        shutil.copy2(image["archive"], out)
    files = sorted(p.name for p in out.iterdir())
    (out / "RELEASE-NOTES.md").write_text(release_notes(chart, version, files, image))
    sums = []
    for name in sorted(p.name for p in out.iterdir()):
        with (out / name).open("rb") as artifact:
            sums.append(f"{hashlib.file_digest(artifact, 'sha256').hexdigest()}  {name}")
    (out / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    for name in sorted(p.name for p in out.iterdir()):
        log(f"{(out / name).stat().st_size:>10}  {out / name}")


if __name__ == "__main__":
    main()
