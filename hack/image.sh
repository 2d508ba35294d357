#!/usr/bin/env bash
# Builds the operator image from the Dockerfile and writes it as an OCI archive:
#
#   build/image/takoform-operator-<version>.oci.tar   (image name takoform/takoform-operator:<version>)
#
# With a Docker daemon that answers `docker info`, `docker build` (base: the Dockerfile's default,
# the official python slim image). Otherwise buildah (Debian package) with chroot isolation on a
# base made here from Debian packages (hack/image/base.sh), so no container registry is needed.
# Dependencies are their own layer: a code change rebuilds in seconds.
#
#   TAKOFORM_IMAGE_ENGINE=docker|buildah   force one engine
#   TAKOFORM_IMAGE_NAME=...                default takoform/takoform-operator
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
log() { printf '%s image: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -1)"
[[ -n $version ]] || die "no version in pyproject.toml"
name="${TAKOFORM_IMAGE_NAME:-takoform/takoform-operator}"
ref="$name:$version"
revision="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD -- 2>/dev/null || revision="$revision-dirty"
source_url="$(git remote get-url origin 2>/dev/null || true)"
out="$repo/build/image"
archive="$out/takoform-operator-$version.oci.tar"
mkdir -p "$out"
t0=$SECONDS

engine="${TAKOFORM_IMAGE_ENGINE:-}"
if [[ -z $engine ]]; then
  if command -v docker >/dev/null && timeout 20 docker info >/dev/null 2>&1; then
    engine=docker
  else
    engine=buildah
  fi
fi

build_args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision"
  --build-arg "SOURCE=$source_url")

case "$engine" in
docker)
  log "docker build $ref"
  docker build "${build_args[@]}" -t "$ref" .
  # An OCI layout of the image (docker save writes one since Docker 25).
  docker save -o "$archive" "$ref"
  ;;
buildah)
  command -v buildah >/dev/null ||
    die "neither a Docker daemon nor buildah: apt-get install buildah mmdebstrap (see docs/deployment.md)"
  [[ $(id -u) -eq 0 ]] || die "buildah builds here need root (chroot isolation, root storage)"
  base="$(hack/image/base.sh)"
  log "buildah build $ref on $base"
  # pip inside the build verifies PyPI with this machine's CA bundle (Debian's pip reads the
  # system bundle): mounted read-only over the base's for the RUN steps only, so nothing of it
  # ends up in a layer.
  ca=/etc/ssl/certs/ca-certificates.crt
  mounts=()
  [[ -f $ca ]] && mounts=(-v "$ca:$ca:ro")
  buildah build --quiet --isolation chroot --layers --pull=never \
    --build-arg "BASE_IMAGE=$base" "${build_args[@]}" "${mounts[@]}" \
    -t "$ref" . >/dev/null
  rm -f "$archive"
  buildah push --quiet "$ref" "oci-archive:$archive:$ref"
  ;;
*) die "unknown engine $engine (docker or buildah)" ;;
esac
size="$(du -h "$archive" | cut -f1)"
log "built $ref with $engine in $((SECONDS - t0))s -> $archive ($size)"
echo "$archive"
