#!/usr/bin/env bash
# Builds the operator image from the Dockerfile and writes it as an OCI archive:
#
#   build/image/takoform-operator-<version>.oci.tar   (image takoform/takoform-operator:<version>-<id>)
#
# The tag is per build: the version and the first 12 hex digits of the built image's id (the
# digest of its config), printed and written to build/image/takoform-operator-<version>.tag. A
# rebuild that changed anything has a new tag, so `helm upgrade --set image.tag=...` rolls the pods
# without a manual restart. The archive names the image fully qualified (docker.io/... for a name
# without a registry), the name a kubelet asks containerd for, so `kind load image-archive` and
# `ctr images import` store it under that name.
#
# With a Docker daemon that answers `docker info`, `docker build` (base: TAKOFORM_BASE_IMAGE, e.g.
# the official python slim image, by digest). Otherwise buildah (Debian package) with chroot isolation on a
# base made here from Debian packages (hack/image/base.sh), so no container registry is needed.
# Dependencies are their own layer: a code change rebuilds in seconds.
#
# The base is always used by digest (name@sha256:...), and that digest is printed, recorded in
# the image's labels org.opencontainers.image.base.{name,digest} and written next to the archive
# (takoform-operator-<version>.base). Then hack/image/check_image.py checks the archive (no shell,
# no pip, the operator's user, the base recorded) and fails the build on any problem.
#
#   TAKOFORM_IMAGE_ENGINE=docker|buildah   force one engine
#   TAKOFORM_IMAGE_NAME=...                default takoform/takoform-operator
#   TAKOFORM_BASE_IMAGE=name@sha256:...    Docker: the base (the Dockerfile's BASE_IMAGE), by digest
#   TAKOFORM_ALLOW_TAG_BASE=1              Docker: accept a base given by tag alone (its digest is
#                                          still recorded); refused otherwise
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
log() { printf '%s image: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
# The first 12 hex digits of an image id (sha256:... or bare).
id12() {
  local id="${1#sha256:}"
  [[ $id =~ ^[0-9a-f]{12} ]] || die "no image id: '$1'"
  printf '%s' "${id:0:12}"
}
# A repository name as a kubelet asks for it: docker.io/[library/]NAME unless it names a registry.
qualified() {
  local first="${1%%/*}"
  if [[ $1 != */* ]]; then
    printf 'docker.io/library/%s' "$1"
  elif [[ $first != *.* && $first != *:* && $first != localhost ]]; then
    printf 'docker.io/%s' "$1"
  else
    printf '%s' "$1"
  fi
}
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
  base="${TAKOFORM_BASE_IMAGE:-$(sed -n 's/^ARG BASE_IMAGE=//p' Dockerfile)}"
  if [[ $base != *@sha256:* ]]; then
    [[ ${TAKOFORM_ALLOW_TAG_BASE:-} == 1 ]] ||
      die "the base $base is a tag, not a digest: set TAKOFORM_BASE_IMAGE=name@sha256:<digest>" \
        "(docs/deployment.md), or TAKOFORM_ALLOW_TAG_BASE=1 to build on whatever the tag is now"
    docker pull --quiet "$base" >/dev/null
    pinned="$(docker image inspect --format '{{index .RepoDigests 0}}' "$base")"
    log "WARNING: the base was given by tag: $base is $pinned now (TAKOFORM_ALLOW_TAG_BASE=1)"
    base="$pinned"
  fi
  base_digest="${base##*@}"
  log "docker build $ref on $base"
  docker build "${build_args[@]}" --build-arg "BASE_IMAGE=$base" \
    --build-arg "BASE_NAME=${base%@*}" --build-arg "BASE_DIGEST=$base_digest" -t "$ref" .
  # An OCI layout of the image (docker save writes one since Docker 25).
  image_id="$(docker image inspect --format '{{.Id}}' "$ref")"
  tag="$version-$(id12 "$image_id")"
  docker tag "$ref" "$name:$tag"
  docker save -o "$archive" "$name:$tag"
  ;;
buildah)
  command -v buildah >/dev/null ||
    die "neither a Docker daemon nor buildah: apt-get install buildah mmdebstrap (see docs/deployment.md)"
  [[ $(id -u) -eq 0 ]] || die "buildah builds here need root (chroot isolation, root storage)"
  base_name="$(hack/image/base.sh)"
  # The base by digest (base.sh made it here from the locked Debian packages: there is no
  # registry digest to pin; the digest of the image in buildah's storage is what is used).
  base_digest="$(buildah inspect --type image --format '{{.FromImageDigest}}' "$base_name")"
  [[ $base_digest == sha256:* ]] || die "no digest for $base_name in buildah's storage"
  base="${base_name%:*}@$base_digest"
  log "buildah build $ref on $base ($base_name)"
  # pip inside the build verifies PyPI with this machine's CA bundle (Debian's pip reads the
  # system bundle): mounted read-only over the base's for the RUN steps only, so nothing of it
  # ends up in a layer.
  ca=/etc/ssl/certs/ca-certificates.crt
  mounts=()
  [[ -f $ca ]] && mounts=(-v "$ca:$ca:ro")
  buildah build --quiet --isolation chroot --layers --pull=never \
    --build-arg "BASE_IMAGE=$base" --build-arg "BASE_NAME=$base_name" \
    --build-arg "BASE_DIGEST=$base_digest" "${build_args[@]}" "${mounts[@]}" \
    -t "$ref" . >/dev/null
  image_id="$(buildah inspect --type image --format '{{.FromImageID}}' "$ref")"
  tag="$version-$(id12 "$image_id")"
  buildah tag "$ref" "$name:$tag"
  rm -f "$archive"
  buildah push --quiet "$name:$tag" "oci-archive:$archive:$(qualified "$name"):$tag"
  ;;
*) die "unknown engine $engine (docker or buildah)" ;;
esac
printf '%s\n' "$base" >"$out/takoform-operator-$version.base"
log "base: $base (recorded in $out/takoform-operator-$version.base and the image's labels)"
python3 hack/image/check_image.py "$archive" >"$out/takoform-operator-$version.check.json" ||
  die "the image fails its check (hack/image/check_image.py): see above"
log "image check passed: $(cat "$out/takoform-operator-$version.check.json")"
printf '%s\n' "$tag" >"$out/takoform-operator-$version.tag"
size="$(du -h "$archive" | cut -f1)"
log "built $name:$tag with $engine in $((SECONDS - t0))s -> $archive ($size)"
log "image tag: $tag (in $out/takoform-operator-$version.tag; helm: --set image.tag=$tag)"
echo "$archive"
