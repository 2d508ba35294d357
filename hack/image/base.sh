#!/usr/bin/env bash
# Makes (once) the base image for buildah builds from Debian packages with mmdebstrap: Debian's
# Python 3.11 with a virtual environment at /usr/local, so it has the layout of the official
# python slim images the Dockerfile defaults to (site-packages and scripts under /usr/local, pip).
#
#   hack/image/base.sh          # prints the image name, e.g. localhost/takoform-python:3.11-bookworm-<key>
#
# The name carries a key of this script, versions.env and base-packages.lock: a change makes a new
# base, an unchanged script reuses the one in buildah's storage (seconds). Needs root, mmdebstrap
# and buildah.
#
# The Debian packages are locked: base-packages.lock (beside this script) lists every package of
# the base with its exact version and architecture. A new base whose packages differ in any way
# (Debian published a security or point release since: its mirrors keep only current versions)
# is built with a warning that prints the difference, and the packages it was made of are written
# beside the image archive; with TAKOFORM_IMAGE_BASE_STRICT=1 (release builds) it is refused.
# Accept the difference with TAKOFORM_IMAGE_BASE_RELOCK=1, which rewrites the lock (commit it). A
# mirror that keeps old versions (a snapshot of the archive) set as TAKOFORM_DEBIAN_MIRROR and
# TAKOFORM_DEBIAN_SECURITY_MIRROR rebuilds the locked base exactly.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# shellcheck source=../versions.env
source "$repo/hack/versions.env"
log() { printf '%s image-base: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

suite="$IMAGE_DEBIAN_SUITE"
lock="$repo/hack/image/base-packages.lock"
base_name() {
  local key
  key="$(cat "${BASH_SOURCE[0]}" "$repo/hack/versions.env" "$lock" 2>/dev/null | sha256sum | cut -c1-12)"
  echo "localhost/takoform-python:3.11-$suite-$key"
}
name="$(base_name)"
if [[ ${TAKOFORM_IMAGE_BASE_RELOCK:-} != 1 ]] && buildah inspect --type image "$name" >/dev/null 2>&1; then
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

# The packages of what was made, against the lock.
mkdir -p "$work/dpkg"
tar -xf "$work/rootfs.tar" -C "$work/dpkg" ./var/lib/dpkg/status
dpkg-query --admindir="$work/dpkg/var/lib/dpkg" -W -f='${Package}=${Version} ${Architecture}\n' |
  LC_ALL=C sort >"$work/packages"
if [[ ${TAKOFORM_IMAGE_BASE_RELOCK:-} == 1 || ! -f $lock ]]; then
  {
    echo "# Debian packages of the image's base (hack/image/base.sh): $suite, package=version arch."
    echo "# Written by TAKOFORM_IMAGE_BASE_RELOCK=1 make image; a base that differs is refused."
    cat "$work/packages"
  } >"$lock"
  log "locked $(wc -l <"$work/packages") Debian packages in ${lock#"$repo"/}"
  name="$(base_name)"
elif ! diff <(grep -v '^#' "$lock") "$work/packages" >"$work/drift"; then
  level=WARNING
  [[ ${TAKOFORM_IMAGE_BASE_STRICT:-} != 1 ]] || level=ERROR
  log "$level: the Debian packages differ from ${lock#"$repo"/} (- locked, + now):"
  grep '^[<>]' "$work/drift" | sed 's/^</-/; s/^>/+/' >&2
  log "review them; TAKOFORM_IMAGE_BASE_RELOCK=1 make image accepts them (then commit the lock)"
  [[ $level == WARNING ]] || exit 1
fi
mkdir -p "$repo/build/image"
cp "$work/packages" "$repo/build/image/base-packages.txt"

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
