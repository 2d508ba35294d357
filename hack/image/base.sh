#!/usr/bin/env bash
# Makes (once) the base image for buildah builds from Debian packages with mmdebstrap: Debian's
# Python 3.11 with a virtual environment at /usr/local, so it has the layout of the official
# python slim images the Dockerfile defaults to (site-packages and scripts under /usr/local, pip).
#
#   hack/image/base.sh          # prints the image name, e.g. localhost/takoform-python:3.11-bookworm-<key>
#
# The name carries a key of this script and versions.env: a change makes a new base, an unchanged
# script reuses the one in buildah's storage (seconds). Needs root, mmdebstrap and buildah.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../versions.env
source "$repo/hack/versions.env"
log() { printf '%s image-base: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

suite="$IMAGE_DEBIAN_SUITE"
key="$(cat "${BASH_SOURCE[0]}" "$repo/hack/versions.env" | sha256sum | cut -c1-12)"
name="localhost/takoform-python:3.11-$suite-$key"
if buildah inspect --type image "$name" >/dev/null 2>&1; then
  log "reusing $name"
  echo "$name"
  exit 0
fi

t0=$SECONDS
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mirror="${TAKOFORM_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
security="${TAKOFORM_DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
log "building $name with mmdebstrap ($suite; about a minute cold)"
# minbase (essential + apt), Python with venv support and the CA certificates; no docs, man pages
# or locales. The customize hook turns /usr/local into a virtual environment with pip.
mmdebstrap --quiet --mode=root --variant=minbase --format=tar \
  --include=python3,python3-venv,ca-certificates,tzdata \
  --dpkgopt='path-exclude=/usr/share/man/*' \
  --dpkgopt='path-exclude=/usr/share/locale/*' \
  --dpkgopt='path-exclude=/usr/share/info/*' \
  --dpkgopt='path-exclude=/usr/share/doc/*' \
  --dpkgopt='path-include=/usr/share/doc/*/copyright' \
  --customize-hook='chroot "$1" python3 -m venv /usr/local' \
  --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/var/log/*' \
  "$suite" "$work/rootfs.tar" \
  "deb $mirror $suite main" "deb $mirror $suite-updates main" \
  "deb $security $suite-security main"

ctr="$(buildah from --quiet scratch)"
trap 'rm -rf "$work"; buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah add --quiet "$ctr" "$work/rootfs.tar" / >/dev/null
buildah config \
  --env PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin \
  --env LANG=C.UTF-8 \
  --cmd python3 \
  --label org.opencontainers.image.description="Debian $suite python3 with /usr/local as a venv" \
  "$ctr"
buildah commit --quiet --rm "$ctr" "$name" >/dev/null
log "built $name in $((SECONDS - t0))s"
echo "$name"
