"""`make image` through Docker (hack/image.sh's Docker path), on Debian's Docker daemon (package
docker.io, 20.10: the oldest Docker it supports). The daemon is this test's own: its own data
root, socket and containerd, no bridge network and no iptables rules; the build and the image's
run have no network (--network=none), and the base is the one made here from Debian packages,
imported with `docker load`: no registry is contacted. Needs root, as dockerd does (CI runs as
root)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest
from fixtures_kube import REPO, wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        shutil.which("dockerd") is None,
        reason="dockerd is not installed (Debian package docker.io; `make tools` installs it)",
    ),
]


@pytest.fixture(scope="module")
def docker_env() -> Iterator[dict[str, str]]:
    """The environment of a `docker` client of a daemon started here for this module."""
    state = Path(tempfile.mkdtemp(prefix="takoform-dockerd-", dir="/var/tmp"))
    socket = state / "docker.sock"
    log = (state / "dockerd.log").open("w")
    daemon = subprocess.Popen(
        [
            "dockerd",
            "--bridge=none",
            "--iptables=false",
            "--ip6tables=false",
            f"--data-root={state / 'root'}",
            f"--exec-root={state / 'exec'}",
            f"--pidfile={state / 'dockerd.pid'}",
            f"--host=unix://{socket}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAKOFORM_", "DOCKER_"))}
    env["DOCKER_HOST"] = f"unix://{socket}"

    def answers() -> bool:
        assert daemon.poll() is None, (state / "dockerd.log").read_text()[-4000:]
        info = subprocess.run(["docker", "info"], env=env, capture_output=True, timeout=30)
        return info.returncode == 0

    try:
        wait_until(answers, "dockerd to answer on its socket", timeout=60)
        yield env
    finally:
        daemon.terminate()
        daemon.wait(timeout=60)
        log.close()
        shutil.rmtree(state, ignore_errors=True)


def _docker(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(["docker", *args], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_make_image_builds_through_docker_offline_on_the_base_made_here(
    docker_env: dict[str, str], tmp_path: Path
) -> None:
    assert "bridge" not in _docker(docker_env, "network", "ls", "--format", "{{.Name}}")
    proc = subprocess.run(
        [str(REPO / "hack/image.sh")],
        env=docker_env | {"TAKOFORM_IMAGE_OUT": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    # Docker was chosen because its daemon answered `docker info` in time (no GNU timeout).
    assert " with docker in " in proc.stderr, proc.stderr[-4000:]
    archive = Path(proc.stdout.strip().splitlines()[-1])
    tag = (tmp_path / archive.name.replace(".oci.tar", ".tag")).read_text().strip()
    built = f"takoform/takoform-operator:{tag}"

    # The archive holds the image Docker built (its config, so its id), on the base made here by
    # hack/image/base.sh, named by the id Docker gave it when it was loaded.
    with tarfile.open(archive) as oci:
        index = json.load(_member(oci, "index.json"))
        manifest = json.load(_member(oci, _blob(index["manifests"][0]["digest"])))
        config = json.load(_member(oci, _blob(manifest["config"]["digest"])))
    built_id = _docker(docker_env, "image", "inspect", "--format", "{{.Id}}", built)
    assert manifest["config"]["digest"] == built_id
    assert index["manifests"][0]["annotations"] == {
        "org.opencontainers.image.ref.name": f"docker.io/{built}"
    }
    base = (tmp_path / archive.name.replace(".oci.tar", ".base")).read_text().strip()
    base_name, _, base_digest = base.partition("@")
    assert base_name.startswith("localhost/takoform-python")
    loaded = _docker(docker_env, "image", "ls", "--no-trunc", "--format", "{{.ID}}", base_name)
    assert base_digest in loaded.split()
    assert config["config"]["Labels"]["org.opencontainers.image.base.digest"] == base_digest
    # And it runs, without a network.
    version = _docker(docker_env, "run", "--rm", "--network=none", built, "--version")
    assert version.startswith(f"takoform-operator {tag.rpartition('-')[0]} ")


def _blob(digest: str) -> str:
    return "blobs/" + digest.replace(":", "/")


def _member(archive: tarfile.TarFile, name: str) -> IO[bytes]:
    member = archive.extractfile(name)
    assert member is not None, name
    return member
