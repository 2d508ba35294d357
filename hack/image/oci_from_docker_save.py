#!/usr/bin/env python3
"""Writes the image of a `docker save` archive as an OCI image layout in a tar, the archive
buildah writes (oci-archive) and what hack/image/check_image.py, `make dist`, `kind load
image-archive` and skopeo read:

    hack/image/oci_from_docker_save.py SAVED.tar OUT.oci.tar REFERENCE

Docker before 25 saves only its own format (manifest.json and the layers as plain tars); later
versions add an OCI layout, but manifest.json names the same files in both, so it is what is read.
The config is copied byte for byte, so the image id (the config's digest) stays what Docker says.
REFERENCE (docker.io/name:tag) is the name the index gives the image.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from typing import IO

# The first bytes of a compressed layer (Docker's containerd image store saves them compressed).
_LAYER_TYPES = {
    b"\x1f\x8b": "application/vnd.oci.image.layer.v1.tar+gzip",
    b"\x28\xb5\x2f\xfd": "application/vnd.oci.image.layer.v1.tar+zstd",
}
_PLAIN_LAYER = "application/vnd.oci.image.layer.v1.tar"


def _digest(member: IO[bytes]) -> tuple[str, int]:
    sha, size = hashlib.sha256(), 0
    while chunk := member.read(1 << 20):
        sha.update(chunk)
        size += len(chunk)
    return f"sha256:{sha.hexdigest()}", size


def _entry(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size, info.mode = size, 0o644
    return info


def convert(saved_path: str, out_path: str, reference: str) -> str:
    """Writes the layout and returns the manifest's digest."""
    with tarfile.open(saved_path) as saved, tarfile.open(out_path, "w") as out:

        def read(name: str) -> IO[bytes]:
            member = saved.extractfile(name)
            if member is None:
                raise ValueError(f"{saved_path}: no file {name}")
            return member

        written: set[str] = set()

        def add_blob(data: IO[bytes], digest: str, size: int) -> None:
            if digest not in written:
                out.addfile(_entry(f"blobs/sha256/{digest.removeprefix('sha256:')}", size), data)
                written.add(digest)

        def add_bytes(data: bytes) -> dict[str, object]:
            digest = f"sha256:{hashlib.sha256(data).hexdigest()}"
            add_blob(io.BytesIO(data), digest, len(data))
            return {"digest": digest, "size": len(data)}

        images = json.load(read("manifest.json"))
        if len(images) != 1:
            raise ValueError(f"{saved_path}: {len(images)} images, expected one")
        layers = []
        for name in images[0]["Layers"]:
            digest, size = _digest(read(name))
            magic = read(name).read(4)
            media_type = next(
                (t for m, t in _LAYER_TYPES.items() if magic.startswith(m)), _PLAIN_LAYER
            )
            add_blob(read(name), digest, size)
            layers.append({"mediaType": media_type, "digest": digest, "size": size})
        config = add_bytes(read(images[0]["Config"]).read())
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", **config},
            "layers": layers,
        }
        described = add_bytes(json.dumps(manifest, separators=(",", ":")).encode())
        index = {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": manifest["mediaType"],
                    **described,
                    "annotations": {"org.opencontainers.image.ref.name": reference},
                }
            ],
        }
        for name, data in (
            ("oci-layout", {"imageLayoutVersion": "1.0.0"}),
            ("index.json", index),
        ):
            encoded = json.dumps(data, separators=(",", ":")).encode()
            out.addfile(_entry(name, len(encoded)), io.BytesIO(encoded))
        return str(described["digest"])


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    print(convert(*sys.argv[1:]))
