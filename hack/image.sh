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
# With a Docker daemon that answers `docker info` (Docker 20.10 or later), `docker build`: the
# classic builder, with --network=none. The Python wheels of the two locks are downloaded here
# first (pip, hashes checked) into build/wheels, and the build installs from there only. The base
# is TAKOFORM_BASE_IMAGE (by digest) when set; otherwise the base made here from Debian packages
# (hack/image/base.sh, the one buildah builds on) is imported with `docker load`, or the archive
# TAKOFORM_BASE_ARCHIVE names, and used by its image id: no container registry is needed. `docker
# save` is then rewritten as an OCI archive (hack/image/oci_from_docker_save.py). Otherwise buildah
# (Debian package) with chroot isolation on that same base. Dependencies are their own layer: a
# code change rebuilds in seconds.
#
# The base is always used by digest (name@sha256:...), and that digest is printed, recorded in
# the image's labels org.opencontainers.image.base.{name,digest} and written next to the archive
# (takoform-operator-<version>.base). Then hack/image/check_image.py checks the archive (no shell,
# no pip, the operator's user, the base recorded) and fails the build on any problem.
#
#   TAKOFORM_IMAGE_ENGINE=docker|buildah   force one engine
#   TAKOFORM_IMAGE_NAME=...                default takoform/takoform-operator
#   TAKOFORM_IMAGE_OUT=DIR                 where the archive goes, default build/image
#   TAKOFORM_BASE_IMAGE=name@sha256:...    Docker: the base (the Dockerfile's BASE_IMAGE), by digest
#   TAKOFORM_ALLOW_TAG_BASE=1              Docker: accept a base given by tag alone (its digest is
#                                          still recorded); refused otherwise
#   TAKOFORM_BASE_ARCHIVE=FILE             Docker: `docker load` this archive of the base instead of
#                                          making it here (which needs buildah and root)
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
# COMMAND... under a time limit (SECONDS first), without GNU timeout (not on every machine).
limited() {
  python3 -c 'import subprocess, sys
try:
    sys.exit(subprocess.run(sys.argv[2:], timeout=float(sys.argv[1])).returncode)
except subprocess.TimeoutExpired:
    sys.exit(124)' "$@"
}

version="$(sed -n 's/^version *= *"\(.*\)"/\1/p' pyproject.toml | head -1)"
[[ -n $version ]] || die "no version in pyproject.toml"
name="${TAKOFORM_IMAGE_NAME:-takoform/takoform-operator}"
ref="$name:$version"
revision="$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)"
git diff --quiet HEAD -- 2>/dev/null || revision="$revision-dirty"
source_url="$(git remote get-url origin 2>/dev/null || true)"
out="${TAKOFORM_IMAGE_OUT:-$repo/build/image}"
archive="$out/takoform-operator-$version.oci.tar"
mkdir -p "$out" build/wheels # the Dockerfile copies build/wheels (filled by Docker builds)
t0=$SECONDS

engine="${TAKOFORM_IMAGE_ENGINE:-}"
if [[ -z $engine ]]; then
  if command -v docker >/dev/null && limited 20 docker info >/dev/null 2>&1; then
    engine=docker
  else
    engine=buildah
  fi
fi

build_args=(--build-arg "VERSION=$version" --build-arg "REVISION=$revision"
  --build-arg "SOURCE=$source_url")

case "$engine" in
docker)
  if [[ -n ${TAKOFORM_BASE_IMAGE:-} ]]; then
    base="$TAKOFORM_BASE_IMAGE"
    if [[ $base != *@sha256:* ]]; then
      [[ ${TAKOFORM_ALLOW_TAG_BASE:-} == 1 ]] ||
        die "the base $base is a tag, not a digest: set TAKOFORM_BASE_IMAGE=name@sha256:<digest>" \
          "(docs/deployment.md), or TAKOFORM_ALLOW_TAG_BASE=1 to build on whatever the tag is now"
      docker pull --quiet "$base" >/dev/null
      pinned="$(docker image inspect --format '{{index .RepoDigests 0}}' "$base")"
      log "WARNING: the base was given by tag: $base is $pinned now (TAKOFORM_ALLOW_TAG_BASE=1)"
      base="$pinned"
    fi
    from="$base"
  else
    base_archive="${TAKOFORM_BASE_ARCHIVE:-}"
    if [[ -z $base_archive ]]; then
      command -v buildah >/dev/null && [[ $(id -u) -eq 0 ]] ||
        die "no base: set TAKOFORM_BASE_IMAGE=name@sha256:<digest> or TAKOFORM_BASE_ARCHIVE=<docker" \
          "archive>, or run as root with buildah and mmdebstrap to make it here (docs/deployment.md)"
      base_name="$(hack/image/base.sh)"
      base_archive="$out/base.docker.tar"
      rm -f "$base_archive"
      buildah push --quiet "$base_name" "docker-archive:$base_archive:$base_name" >/dev/null
    fi
    base_name="$(docker load --quiet --input "$base_archive" | sed -n 's/^Loaded image: //p' | tail -1)"
    [[ -n $base_name ]] || die "$base_archive holds no named image"
    [[ -n ${TAKOFORM_BASE_ARCHIVE:-} ]] || rm -f "$base_archive"
    # By its id, the digest of its config: a loaded image has no registry digest.
    from="$(docker image inspect --format '{{.Id}}' "$base_name")"
    base="${base_name%:*}@$from"
  fi
  base_digest="${base##*@}"
  log "downloading the locked wheels into build/wheels"
  # The image's platform (the locks are resolved for it), not this machine's.
  platforms=()
  for glibc in $(seq 36 -1 17); do platforms+=(--platform "manylinux_2_${glibc}_x86_64"); done
  wheels() { # DEST PIP-ARGS...
    python3 -m pip download --quiet --disable-pip-version-check --require-hashes --no-deps \
      --only-binary=:all: "${platforms[@]}" --python-version 3.11 --implementation cp \
      --abi cp311 --abi abi3 --abi none --dest "$1" --find-links build/wheels \
      -r requirements.lock -r requirements-build.lock "${@:2}"
  }
  # From PyPI only what an earlier build did not download, into a directory of its own first:
  # a buildah build may be copying build/wheels meanwhile, and must see only whole files.
  if ! wheels build/wheels --no-index 2>/dev/null; then
    fetched="$(mktemp -d build/wheels-XXXXXX)"
    wheels "$fetched"
    mv -f "$fetched"/* build/wheels/
    rmdir "$fetched"
  fi
  log "docker build $ref on $base"
  # The classic builder: it takes FROM sha256:<image id>, and needs neither BuildKit nor buildx.
  DOCKER_BUILDKIT=0 docker build --quiet --network=none "${build_args[@]}" \
    --build-arg "BASE_IMAGE=$from" --build-arg "BASE_NAME=${base%@*}" \
    --build-arg "BASE_DIGEST=$base_digest" --build-arg PIP_NO_INDEX=1 -t "$ref" . >/dev/null
  image_id="$(docker image inspect --format '{{.Id}}' "$ref")"
  tag="$version-$(id12 "$image_id")"
  docker tag "$ref" "$name:$tag"
  docker save --output "$out/docker-save.tar" "$name:$tag"
  python3 hack/image/oci_from_docker_save.py "$out/docker-save.tar" "$archive" \
    "$(qualified "$name"):$tag" >/dev/null
  rm -f "$out/docker-save.tar"
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
