#!/usr/bin/env bash
# `make fresh-check`: the README's path as a newcomer meets it, on empty caches. A fresh clone of
# this checkout's HEAD, with HOME, the Go module and build caches, pip's cache and the tool cache
# all in one new temporary folder, then:
#
#   1. make venv    (pip from an empty cache)
#   2. make tools   (every Go build from an empty module cache)
#   3. make test    (the rest of the README's test command)
#   4. make run     (until every example is Ready; then Ctrl-C and make cluster-down)
#
# Each phase is timed; the table at the end is what the README quotes. Not part of `make test`:
# it takes about as long as a CI run. What it cannot empty: Debian packages already installed
# (hack/tools.sh installs missing ones) and buildah's image storage (the image base is keyed by
# its script, hack/image/base.sh).
#
#   FRESH_DIR=/some/dir   use (and keep) this folder instead of a temporary one
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
log() { printf '%s fresh-check: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

work="${FRESH_DIR:-}"
if [[ -z $work ]]; then
  work="$(mktemp -d)"
  # Module cache files are read-only (GOFLAGS below makes new ones writable, this covers the rest).
  trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
fi
mkdir -p "$work/home"
export HOME="$work/home" \
  GOMODCACHE="$work/gomodcache" GOCACHE="$work/gocache" GOPATH="$work/gopath" \
  PIP_CACHE_DIR="$work/pip-cache" XDG_CACHE_HOME="$work/home/.cache" \
  TAKOFORM_TOOLS_CACHE="$work/tools-cache" \
  GOFLAGS="-buildvcs=false -modcacherw"
unset KUBECONFIG TAKOFORM_USE_EXISTING_CLUSTER VIRTUAL_ENV

log "cloning $(git -C "$repo" rev-parse --short HEAD) into $work/clone (HOME and every cache in $work)"
git clone --quiet "$repo" "$work/clone"
cd "$work/clone"

phases=()
phase() { # NAME COMMAND...
  local name="$1" t0=$SECONDS
  shift
  log "phase $name: $*"
  "$@"
  phases+=("$(printf '%-12s %5ds  (%dm%02ds)' "$name" $((SECONDS - t0)) $(((SECONDS - t0) / 60)) $(((SECONDS - t0) % 60)))")
  log "phase $name: done in $((SECONDS - t0))s"
}

# `make run` until the examples are Ready (run.sh says so), then Ctrl-C as a user would.
run_until_ready() {
  local output="$work/make-run.log" pid
  TAKOFORM_METRICS_PORT=0 setsid make run >"$output" 2>&1 &
  pid=$!
  local waited=0
  until grep -q "all examples Ready" "$output"; do
    if ! kill -0 "$pid" 2>/dev/null || ((waited >= 600)); then
      tail -40 "$output" >&2
      kill -INT -- "-$pid" 2>/dev/null || true
      wait "$pid" || true
      make cluster-down >/dev/null || true
      log "ERROR: make run did not get the examples Ready"
      return 1
    fi
    sleep 1
    waited=$((waited + 1))
  done
  kill -INT -- "-$pid"
  wait "$pid" || true
  make cluster-down >/dev/null # before judging the log: a failed check leaves no cluster running
  if grep -q "Traceback\| ERROR " "$output"; then
    grep -n "Traceback\| ERROR " "$output" >&2
    log "ERROR: make run logged errors ($output)"
    return 1
  fi
}

total=$SECONDS
phase venv make venv
phase tools make tools
phase test make test
phase run run_until_ready
log "all phases passed from empty caches in $((SECONDS - total))s:"
printf '  %s\n' "${phases[@]}" >&2
