#!/usr/bin/env python3
"""Checks a built operator image from its OCI archive (what `hack/image.sh` writes), without
running it: the file list of its root filesystem (every layer applied in order, whiteouts
honoured) has no shell and no pip, and it has the operator; its config runs as 65532 and records
its base. `hack/image.sh` runs it after each build and fails the build on any problem.

    hack/image/check_image.py build/image/takoform-operator-0.1.0.oci.tar   # prints a summary

Standard library only (tests/node/test_image.py and tests/unit/test_image_check.py import it)."""

from __future__ import annotations

import json
import re
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

# A shell of any kind, wherever it is installed.
SHELLS = frozenset(
    {"sh", "bash", "dash", "rbash", "ash", "ksh", "mksh", "zsh", "csh", "tcsh", "busybox"}
)
BIN_DIRS = ("bin", "sbin", "usr/bin", "usr/sbin", "usr/local/bin", "usr/local/sbin")
# pip, whatever installs it: its package, its scripts, the wheels ensurepip and venv install.
# Each match is reported once, at its top (the package's directory, not each of its files).
PIP = (
    re.compile(r"(^|/)(site|dist)-packages/pip(-[^/]*\.dist-info)?(?=/|$)"),
    re.compile(r"(^|/)bin/pip[0-9.]*$"),
    re.compile(r"(^|/)ensurepip(?=/|$)"),
    re.compile(r"(^|/)pip-[^/]*\.whl$"),
)
# What must be there: the interpreter and the entrypoint.
REQUIRED = ("usr/local/bin/takoform-operator", "usr/local/bin/python3")
USER = "65532:65532"


@dataclass
class Image:
    files: dict[str, str] = field(default_factory=dict)  # path -> "file", "dir", "link:<target>"
    config: dict[str, Any] = field(default_factory=dict)
    layers: int = 0


def _blob(archive: tarfile.TarFile, digest: str) -> bytes:
    algorithm, _, value = digest.partition(":")
    member = archive.extractfile(f"blobs/{algorithm}/{value}")
    if member is None:
        raise ValueError(f"{digest} is not in the archive")
    return member.read()


def _json(archive: tarfile.TarFile, name: str) -> Any:
    member = archive.extractfile(name)
    if member is None:
        raise ValueError(f"{name} is not in the archive")
    return json.load(member)


def _normal(name: str) -> str:
    return str(PurePosixPath("/", name)).lstrip("/")


def apply_layer(files: dict[str, str], layer: tarfile.TarFile) -> None:
    """One layer over the files of those below it (the OCI image spec's changeset rules)."""
    for member in layer.getmembers():
        path = _normal(member.name)
        parent, _, base = path.rpartition("/")
        if base == ".wh..wh..opq":
            for existing in [p for p in files if p.startswith(parent + "/")]:
                del files[existing]
            continue
        if base.startswith(".wh."):
            gone = f"{parent}/{base[4:]}" if parent else base[4:]
            for existing in [p for p in files if p == gone or p.startswith(gone + "/")]:
                del files[existing]
            continue
        if not path:
            continue
        if member.isdir():
            files[path] = "dir"
        elif member.issym():
            files[path] = f"link:{member.linkname}"
        else:
            if files.get(path) == "dir":
                for existing in [p for p in files if p.startswith(path + "/")]:
                    del files[existing]
            files[path] = "file"


def read_image(path: str) -> Image:
    """The root filesystem and config of the one image in an OCI archive (an OCI layout in a
    tar: buildah's oci-archive, or `docker save` of Docker 25 and later)."""
    image = Image()
    with tarfile.open(path) as archive:
        index = _json(archive, "index.json")
        manifests = index.get("manifests", [])
        if len(manifests) != 1:
            raise ValueError(f"{path}: {len(manifests)} images in index.json, expected one")
        manifest = json.loads(_blob(archive, manifests[0]["digest"]))
        if "manifests" in manifest:  # an index in the index (docker save)
            manifest = json.loads(_blob(archive, manifest["manifests"][0]["digest"]))
        image.config = json.loads(_blob(archive, manifest["config"]["digest"]))
        for descriptor in manifest["layers"]:
            algorithm, _, value = descriptor["digest"].partition(":")
            member = archive.extractfile(f"blobs/{algorithm}/{value}")
            if member is None:
                raise ValueError(f"layer {descriptor['digest']} is not in the archive")
            with tarfile.open(fileobj=member, mode="r:*") as layer:
                apply_layer(image.files, layer)
            image.layers += 1
    return image


def _resolve(files: dict[str, str], path: str) -> str:
    """The path with its directory symlinks followed (/bin -> usr/bin in a merged-/usr system)."""
    parts = path.split("/")
    for depth in range(len(parts) - 1, 0, -1):
        head = "/".join(parts[:depth])
        kind = files.get(head, "")
        if kind.startswith("link:"):
            target = kind[5:]
            base = target.lstrip("/") if target.startswith("/") else _join(head, target)
            return _resolve(files, "/".join([base, *parts[depth:]]))
    return path


def _join(link: str, target: str) -> str:
    return _normal(str(PurePosixPath(link).parent / target))


def problems(image: Image) -> list[str]:
    """What is wrong with the image, one line each; empty when it passes."""
    shells, pip = set(), set()
    for path in image.files:
        directory, _, base = path.rpartition("/")
        if base in SHELLS and directory in BIN_DIRS:
            shells.add(f"a shell: /{path}")
        for pattern in PIP:
            if match := pattern.search(path):
                pip.add(f"pip: /{path[: match.end()]}")
    found = sorted(shells) + sorted(pip)
    for required in REQUIRED:
        if _resolve(image.files, required) not in image.files:
            found.append(f"missing: /{required}")
    config = image.config.get("config", {})
    if config.get("User") != USER:
        found.append(f"runs as {config.get('User')!r}, not {USER}")
    labels = config.get("Labels") or {}
    if not re.fullmatch(
        r"sha256:[0-9a-f]{64}", labels.get("org.opencontainers.image.base.digest", "")
    ):
        found.append("no org.opencontainers.image.base.digest label (the base's digest)")
    return found


def summary(image: Image) -> dict[str, Any]:
    labels = image.config.get("config", {}).get("Labels") or {}
    return {
        "files": len(image.files),
        "layers": image.layers,
        "user": image.config.get("config", {}).get("User"),
        "base": labels.get("org.opencontainers.image.base.name"),
        "base_digest": labels.get("org.opencontainers.image.base.digest"),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: check_image.py ARCHIVE.oci.tar", file=sys.stderr)
        return 2
    image = read_image(argv[0])
    found = problems(image)
    for line in found:
        print(f"image check: {line}", file=sys.stderr)
    print(json.dumps(summary(image)))
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
