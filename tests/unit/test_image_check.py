"""hack/image/check_image.py, the build's check of the image archive (no shell, no pip, the
operator's user, the base recorded), on small OCI archives made here: it reads the layers in
order with their whiteouts, as the runtime would see the root filesystem."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32


def _load() -> ModuleType:
    # hack/ is not a package and not on sys.path; load the module from its file.
    spec = importlib.util.spec_from_file_location("check_image", REPO / "hack/image/check_image.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


check_image = _load()

# A merged-/usr system: /bin is a link to usr/bin.
OPERATOR = {
    "bin": "link:usr/bin",
    "usr/bin/python3.11": "file",
    "usr/local/bin/python3": "link:/usr/bin/python3.11",
    "usr/local/bin/takoform-operator": "file",
}


def _layer(entries: dict[str, str]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path, kind in entries.items():
            info = tarfile.TarInfo(path)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind.startswith("link:"):
                info.type, info.linkname = tarfile.SYMTYPE, kind[5:]
            tar.addfile(info, io.BytesIO(b""))
    return buffer.getvalue()


def _archive(
    path: Path, layers: list[dict[str, str]], user: str = "65532:65532", base: bool = True
) -> Path:
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> dict[str, Any]:
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        blobs[digest] = data
        return {"digest": digest, "size": len(data)}

    labels = {"org.opencontainers.image.base.digest": DIGEST} if base else {}
    config = blob(json.dumps({"config": {"User": user, "Labels": labels}}).encode())
    manifest = blob(
        json.dumps({"config": config, "layers": [blob(_layer(layer)) for layer in layers]}).encode()
    )
    with tarfile.open(path, "w") as tar:
        files = {"index.json": json.dumps({"manifests": [manifest]}).encode()}
        files |= {f"blobs/sha256/{d.split(':')[1]}": data for d, data in blobs.items()}
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def _problems(tmp_path: Path, *layers: dict[str, str], **config: Any) -> list[str]:
    image = check_image.read_image(
        str(_archive(tmp_path / "image.oci.tar", list(layers), **config))
    )
    return list(check_image.problems(image))


def test_an_image_with_the_operator_and_nothing_else_passes(tmp_path: Path) -> None:
    assert _problems(tmp_path, OPERATOR) == []


def test_a_shell_or_pip_anywhere_in_the_root_filesystem_fails(tmp_path: Path) -> None:
    unwanted = {
        "usr/bin/sh": "link:dash",
        "usr/bin/dash": "file",
        "usr/local/bin/pip3": "file",
        "usr/local/lib/python3.11/site-packages/pip/__init__.py": "file",
        "usr/local/lib/python3.11/site-packages/pip-23.0.1.dist-info/METADATA": "file",
        "usr/lib/python3.11/ensurepip/__init__.py": "file",
        "usr/share/python-wheels/pip-23.0.1-py3-none-any.whl": "file",
        "usr/share/doc/bash/copyright": "file",  # a package's doc is no shell
    }
    assert _problems(tmp_path, OPERATOR, unwanted) == [
        "a shell: /usr/bin/dash",
        "a shell: /usr/bin/sh",
        "pip: /usr/lib/python3.11/ensurepip",
        "pip: /usr/local/bin/pip3",
        "pip: /usr/local/lib/python3.11/site-packages/pip",
        "pip: /usr/local/lib/python3.11/site-packages/pip-23.0.1.dist-info",
        "pip: /usr/share/python-wheels/pip-23.0.1-py3-none-any.whl",
    ]


def test_what_an_upper_layer_whites_out_is_gone(tmp_path: Path) -> None:
    lower = {
        **OPERATOR,
        "usr/bin/bash": "file",
        "usr/local/lib/python3.11/site-packages/pip/x.py": "file",
    }
    upper = {
        "usr/bin/.wh.bash": "file",
        "usr/local/lib/python3.11/site-packages/.wh.pip": "file",
    }
    assert _problems(tmp_path, lower) != []
    assert _problems(tmp_path, lower, upper) == []
    # An opaque directory hides everything below it, and an upper layer can add again.
    opaque = {"usr/bin/.wh..wh..opq": "file", "usr/bin/python3.11": "file", "usr/bin/rbash": "file"}
    assert _problems(tmp_path, lower, opaque) == [
        "a shell: /usr/bin/rbash",
        "pip: /usr/local/lib/python3.11/site-packages/pip",
    ]


@pytest.mark.parametrize(
    ("config", "layers", "problem"),
    [
        ({"user": "0:0"}, [OPERATOR], "runs as '0:0', not 65532:65532"),
        (
            {"base": False},
            [OPERATOR],
            "no org.opencontainers.image.base.digest label (the base's digest)",
        ),
        ({}, [{"usr/local/bin/takoform-operator": "file"}], "missing: /usr/local/bin/python3"),
    ],
)
def test_the_user_the_base_label_and_the_operator_itself_are_checked(
    tmp_path: Path, config: dict[str, Any], layers: list[dict[str, str]], problem: str
) -> None:
    assert _problems(tmp_path, *layers, **config) == [problem]


@pytest.mark.parametrize(
    "base", ["docker.io/library/python:3.11-slim-bookworm", "registry.example/python:3.11"]
)
def test_the_docker_build_refuses_a_base_given_by_tag_alone(base: str) -> None:
    """Before anything is built or pulled: TAKOFORM_BASE_IMAGE must be name@sha256:... (or the
    explicit override given)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOFORM_")}
    env |= {"TAKOFORM_IMAGE_ENGINE": "docker", "TAKOFORM_BASE_IMAGE": base}
    proc = subprocess.run(
        [str(REPO / "hack/image.sh")], capture_output=True, text=True, env=env, timeout=60
    )
    assert proc.returncode != 0 and proc.stdout == ""
    assert "is a tag, not a digest" in proc.stderr, proc.stderr
    assert "TAKOFORM_BASE_IMAGE=name@sha256:" in proc.stderr
