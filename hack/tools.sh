#!/usr/bin/env bash
# Builds (once) and caches the pinned binaries the tests run against, then prints where they are.
#
#   kube-apiserver, kube-controller-manager, kubectl  <- k8s.io/kubernetes   (hack/go/kubernetes)
#   kubelet, kube-scheduler (the optional node)       <- k8s.io/kubernetes   (same wrapper)
#   pause (the node's sandbox process)                <- hack/node/pause.c   (cc -static)
#   etcd                                              <- go.etcd.io/etcd/server/v3 (hack/go/etcd)
#   helm                                              <- helm.sh/helm/v3     (hack/go/helm)
#   prometheus, promtool                              <- Debian package `prometheus`
#   prometheus, promtool 3.x with kubernetes_sd       <- github.com/prometheus/prometheus (hack/go/prometheus)
#   kube-state-metrics (the alerts' source)          <- k8s.io/kube-state-metrics/v2 (hack/go/kube-state-metrics)
#   containerd, runc (the node's runtime)             <- Debian packages `containerd`, `runc`
#   buildah, mmdebstrap (`make image` without Docker) <- Debian packages `buildah`, `mmdebstrap`
#   lua5.1 (runs the chart's Argo CD health check)    <- Debian package `lua5.1` (Argo CD: Lua 5.1)
#   dockerd, docker (`make image` through Docker)     <- Debian package `docker.io` (not started)
#   fluxhealth (Flux's healthCheckExprs evaluation)   <- github.com/fluxcd/pkg/runtime (hack/go/fluxhealth)
#
# Versions live in hack/versions.env. Binaries are cached OUTSIDE the repository, one directory per
# component and version:  $TAKOFORM_TOOLS_CACHE/bin/<component>-<version>/  (default cache:
# ~/.cache/takoform-operator). A directory only appears once its build succeeded, so an interrupted
# build is simply redone. A warm run only checks the stamps and takes a second.
# It finally writes $TAKOFORM_TOOLS_CACHE/bin/env.sh (source it to get the tools on PATH).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# shellcheck source=versions.env
source "$repo/hack/versions.env"

cache="${TAKOFORM_TOOLS_CACHE:-$HOME/.cache/takoform-operator}"
bindir="$cache/bin"
# Static binaries, no compiler needed for cgo; use the machine's Go, never fetch another.
export CGO_ENABLED=0 GOTOOLCHAIN="${GOTOOLCHAIN:-local}" GOFLAGS="${GOFLAGS:--buildvcs=false}"
jobs="${TAKOFORM_BUILD_JOBS:-$(nproc)}"
start=$SECONDS

log() { printf '%s tools: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

command -v go >/dev/null || die "go is not installed (need Go >= 1.26)"
mkdir -p "$bindir"

# The wrapper module must require exactly the pinned version, else it is stale.
check_wrapper() { # DIR MODULE VERSION
  local have
  have="$(cd "$1" && go list -m -f '{{.Version}}' "$2")"
  [[ "$have" == "$3" ]] ||
    die "$1 requires $2 $have but hack/versions.env pins $3: run hack/go/generate.sh"
}

# build COMPONENT VERSION WRAPPER_DIR LDFLAGS NAME=PACKAGE...
# Builds into a scratch directory and renames it into place only when everything succeeded.
build() {
  local component="$1" version="$2" wrapper="$3" ldflags="$4" tags="${BUILD_TAGS:-}"
  shift 4
  local dest="$bindir/$component-$version"
  if [[ -f "$dest/.complete" ]]; then
    log "$component $version: cached in $dest"
    return
  fi
  local tmp="$bindir/.building-$component-$version"
  rm -rf "$tmp" && mkdir -p "$tmp"
  local t0=$SECONDS spec name pkg
  for spec in "$@"; do
    name="${spec%%=*}" pkg="${spec#*=}"
    log "$component $version: building $name (go build -p $jobs; minutes on a cold cache)"
    (cd "$wrapper" && go build -mod=readonly -trimpath -p "$jobs" -tags "$tags" \
      -ldflags "$ldflags" -o "$tmp/$name" "$pkg") || die "building $name from $pkg failed"
  done
  date -u +%Y-%m-%dT%H:%M:%SZ >"$tmp/.complete"
  rm -rf "$dest" && mv "$tmp" "$dest"
  log "$component $version: built in $((SECONDS - t0))s -> $dest"
}

# --- Kubernetes -------------------------------------------------------------------------------
kdir="$repo/hack/go/kubernetes"
check_wrapper "$kdir" k8s.io/kubernetes "$KUBERNETES_VERSION"
kminor="${KUBERNETES_VERSION#v1.}" && kminor="${kminor%%.*}"
kbuilddate="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
# Without these stamps /version says v0.0.0-master and helm's kubeVersion checks break.
# kubectl reports its client version from client-go, the servers from component-base.
kldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kldflags+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$kminor"
  kldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$kbuilddate"
done
build kubernetes "$KUBERNETES_VERSION" "$kdir" "$kldflags" \
  kube-apiserver=k8s.io/kubernetes/cmd/kube-apiserver \
  kube-controller-manager=k8s.io/kubernetes/cmd/kube-controller-manager \
  kubectl=k8s.io/kubernetes/cmd/kubectl
# The node's binaries in their own directory, so a cache made before they existed stays valid.
build kubernetes-node "$KUBERNETES_VERSION" "$kdir" "$kldflags" \
  kubelet=k8s.io/kubernetes/cmd/kubelet \
  kube-scheduler=k8s.io/kubernetes/cmd/kube-scheduler

# --- pause ------------------------------------------------------------------------------------
# The process holding each pod sandbox: a few lines of C, statically linked, keyed by its source.
pause_src="$repo/hack/node/pause.c"
pause_key="$(sha256sum "$pause_src" | cut -c1-12)"
pause_dir="$bindir/pause-$pause_key"
if [[ ! -f "$pause_dir/.complete" ]]; then
  command -v cc >/dev/null || die "cc is not installed (needed for the node's pause binary)"
  rm -rf "$pause_dir.tmp" && mkdir -p "$pause_dir.tmp"
  cc -static -Os -s -o "$pause_dir.tmp/pause" "$pause_src" || die "building pause failed"
  date -u +%Y-%m-%dT%H:%M:%SZ >"$pause_dir.tmp/.complete"
  rm -rf "$pause_dir" && mv "$pause_dir.tmp" "$pause_dir"
  log "pause: built -> $pause_dir"
fi

# --- etcd -------------------------------------------------------------------------------------
edir="$repo/hack/go/etcd"
check_wrapper "$edir" go.etcd.io/etcd/server/v3 "$ETCD_VERSION"
build etcd "$ETCD_VERSION" "$edir" \
  "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=$ETCD_VERSION" \
  etcd=go.etcd.io/etcd/server/v3

# --- helm -------------------------------------------------------------------------------------
hdir="$repo/hack/go/helm"
check_wrapper "$hdir" helm.sh/helm/v3 "$HELM_VERSION"
# helm's Makefile stamps the Kubernetes version it was built against (its client-go) as the
# default Capabilities.KubeVersion used by `helm template`/`helm lint`; do the same.
hk8s="$(cd "$hdir" && go list -m -f '{{.Version}}' k8s.io/client-go)"   # e.g. v0.35.1
hk8s_minor="${hk8s#v0.}" && hk8s_minor="${hk8s_minor%%.*}"
hldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
hldflags+=" -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  hldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$hk8s_minor"
done
build helm "$HELM_VERSION" "$hdir" "$hldflags" helm=helm.sh/helm/v3/cmd/helm

# --- prometheus (upstream) --------------------------------------------------------------------
# Debian's prometheus 2.42 is built without kubernetes_sd; the ServiceMonitor test needs discovery
# through the API server, so that one test runs an upstream build. The existing tests keep Debian's.
# Only the kubernetes service discovery is compiled in (Prometheus' own build tags), which skips
# the cloud SDKs; the web UI assets are not embedded (the HTTP API is all the tests use).
pdir="$repo/hack/go/prometheus"
check_wrapper "$pdir" github.com/prometheus/prometheus "$PROMETHEUS_MODULE_VERSION"
# Its VERSION file is read from the module's sources, which are only in the module cache once
# downloaded (`go list -m` reads go.mod and never fetches them): download first, and only when the
# build is not cached, so a warm run stays offline.
pversion=unused
if [[ ! -f "$bindir/prometheus-$PROMETHEUS_MODULE_VERSION/.complete" ]]; then
  (cd "$pdir" && go mod download github.com/prometheus/prometheus) ||
    die "downloading github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION failed"
  pversion="$(cat "$(cd "$pdir" && go list -m -f '{{.Dir}}' github.com/prometheus/prometheus)/VERSION")" ||
    die "no VERSION file in github.com/prometheus/prometheus $PROMETHEUS_MODULE_VERSION"
fi
pldflags="-s -w"
for kv in Version="$pversion" Revision="$PROMETHEUS_MODULE_VERSION" Branch=HEAD \
  BuildUser=takoform-operator BuildDate="$(date -u +%Y%m%d-%H:%M:%S)"; do
  pldflags+=" -X github.com/prometheus/common/version.$kv"
done
BUILD_TAGS="remove_all_sd,enable_kubernetes_sd" build prometheus "$PROMETHEUS_MODULE_VERSION" \
  "$pdir" "$pldflags" \
  prometheus=github.com/prometheus/prometheus/cmd/prometheus \
  promtool=github.com/prometheus/prometheus/cmd/promtool

# --- kube-state-metrics -----------------------------------------------------------------------
# The alerts read the CRs' own status.conditions through its CustomResourceStateMetrics
# (charts/takoform-operator/files/kube-state-metrics.yaml); tests/e2e/test_alerts_from_crs.py runs it.
ksdir="$repo/hack/go/kube-state-metrics"
check_wrapper "$ksdir" k8s.io/kube-state-metrics/v2 "$KUBE_STATE_METRICS_VERSION"
ksldflags="-s -w"
for kv in Version="$KUBE_STATE_METRICS_VERSION" Revision="$KUBE_STATE_METRICS_VERSION" Branch=HEAD \
  BuildUser=takoform-operator BuildDate="$(date -u +%Y%m%d-%H:%M:%S)"; do
  ksldflags+=" -X github.com/prometheus/common/version.$kv"
done
build kube-state-metrics "$KUBE_STATE_METRICS_VERSION" "$ksdir" "$ksldflags" \
  kube-state-metrics=k8s.io/kube-state-metrics/v2

# --- fluxhealth -------------------------------------------------------------------------------
# Flux's CEL health evaluation (github.com/fluxcd/pkg/runtime/cel) behind a small program of ours
# (hack/go/fluxhealth/main.go): the tests judge the chart's Flux healthCheckExprs with it. Keyed by
# the module version and by the program's own files, so an edit of main.go rebuilds it.
fhdir="$repo/hack/go/fluxhealth"
check_wrapper "$fhdir" github.com/fluxcd/pkg/runtime "$FLUX_RUNTIME_VERSION"
fhkey="$(cat "$fhdir/main.go" "$fhdir/go.mod" "$fhdir/go.sum" | sha256sum | cut -c1-12)"
build fluxhealth "$FLUX_RUNTIME_VERSION-$fhkey" "$fhdir" "-s -w" fluxhealth=.

# --- Debian packages: prometheus, containerd, runc, buildah, mmdebstrap -------------------------
apt_updated=""
apt_install() { # PACKAGE...
  local sudo=""
  if [[ $(id -u) -ne 0 ]]; then
    command -v sudo >/dev/null || die "missing $*; install these Debian packages as root"
    sudo="sudo"
  fi
  log "installing Debian packages (apt-get): $*"
  # Only the binaries are wanted: a policy-rc.d answering 101 stops the packages' postinst from
  # starting their services (standard Debian mechanism). Removed again afterwards.
  local policy=/usr/sbin/policy-rc.d own_policy=""
  if [[ ! -e $policy ]]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod +x "$policy"
    own_policy=1
  fi
  [[ -n $apt_updated ]] || $sudo apt-get update -qq
  apt_updated=1
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "$@" >/dev/null || { [[ -n $own_policy ]] && $sudo rm -f "$policy"; die "apt-get install $* failed"; }
  [[ -n $own_policy ]] && $sudo rm -f "$policy"
  # Belt and braces: if a daemon got started anyway (running as the package's `prometheus` user),
  # stop exactly that process.
  local pid
  for pid in $(pgrep -u prometheus -x prometheus 2>/dev/null || true); do
    log "prometheus: stopping the daemon the package started (pid $pid)"
    $sudo kill "$pid" || true
  done
}
missing=()
command -v promtool >/dev/null && command -v prometheus >/dev/null || missing+=(prometheus)
command -v containerd >/dev/null && command -v ctr >/dev/null || missing+=(containerd)
command -v runc >/dev/null || missing+=(runc)
command -v buildah >/dev/null || missing+=(buildah)
command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
command -v lua5.1 >/dev/null || missing+=(lua5.1)
command -v dockerd >/dev/null || missing+=(docker.io)
if [[ ${#missing[@]} -gt 0 ]]; then
  apt_install "${missing[@]}"
else
  log "Debian packages: using $(command -v prometheus), containerd, runc, buildah, mmdebstrap, lua5.1," \
    "dockerd"
fi
promdir="$(dirname "$(command -v promtool)")"

# --- env.sh -----------------------------------------------------------------------------------
kbin="$bindir/kubernetes-$KUBERNETES_VERSION"
ebin="$bindir/etcd-$ETCD_VERSION"
hbin="$bindir/helm-$HELM_VERSION"
nbin="$bindir/kubernetes-node-$KUBERNETES_VERSION"
pbin="$bindir/prometheus-$PROMETHEUS_MODULE_VERSION"
ksbin="$bindir/kube-state-metrics-$KUBE_STATE_METRICS_VERSION"
cat >"$bindir/env.sh.tmp" <<ENV
# Written by hack/tools.sh; source it to put the pinned tools on PATH.
export TAKOFORM_KUBE_BIN="$kbin"
export TAKOFORM_ETCD_BIN="$ebin"
export TAKOFORM_HELM_BIN="$hbin"
export TAKOFORM_NODE_BIN="$nbin"
export TAKOFORM_PAUSE_BIN="$pause_dir"
export TAKOFORM_PROMETHEUS_BIN="$promdir"
# Upstream Prometheus 3.x (kubernetes_sd); deliberately not on PATH, where Debian's stays.
export TAKOFORM_PROMETHEUS_UPSTREAM_BIN="$pbin"
# kube-state-metrics (the alerts' source); not on PATH either.
export TAKOFORM_KUBE_STATE_METRICS_BIN="$ksbin"
export TAKOFORM_FLUXHEALTH_BIN="$bindir/fluxhealth-$FLUX_RUNTIME_VERSION-$fhkey"
export PATH="$kbin:$ebin:$hbin:$promdir:\$PATH"
ENV
mv "$bindir/env.sh.tmp" "$bindir/env.sh"

log "ready in $((SECONDS - start))s:"
for f in "$kbin"/kube-apiserver "$kbin"/kube-controller-manager "$kbin"/kubectl "$ebin"/etcd \
  "$hbin"/helm "$nbin"/kubelet "$nbin"/kube-scheduler "$pause_dir"/pause \
  "$promdir"/prometheus "$promdir"/promtool "$pbin"/prometheus "$pbin"/promtool \
  "$ksbin"/kube-state-metrics; do
  printf '  %s\n' "$f" >&2
done
printf '  source %s   # puts them on PATH\n' "$bindir/env.sh" >&2
