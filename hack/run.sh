#!/usr/bin/env bash
# `make run`: the operator with what it needs on this machine. Starts the local control plane
# (unless TAKOFORM_USE_EXISTING_CLUSTER=1 with KUBECONFIG), applies the CRDs, starts the reference
# host (unless TAKOFORM_HOST_URL is set), then runs the operator in the foreground.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '%s run: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# shellcheck disable=SC1091
source "${TAKOFORM_TOOLS_CACHE:-$HOME/.cache/takoform-operator}/bin/env.sh"
if [[ "${TAKOFORM_USE_EXISTING_CLUSTER:-}" != 1 || -z "${KUBECONFIG:-}" ]]; then
  eval "$(.venv/bin/python hack/localcluster.py up)"
fi
log "cluster: $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
kubectl wait --for=condition=Established crd -l app.kubernetes.io/part-of=takoform-operator \
  --timeout=60s >/dev/null

host_pid=""
cleanup() { [[ -n "$host_pid" ]] && kill "$host_pid" 2>/dev/null || true; }
trap cleanup EXIT
if [[ -z "${TAKOFORM_HOST_URL:-}" ]]; then
  listen="${HOST_LISTEN:-127.0.0.1:8787}"
  mkdir -p .host
  TAKOFORM_HOST_TOKENS=dev-token TAKOFORM_HOST_ADMIN_TOKEN=dev-admin \
    .venv/bin/takoform-host serve --db .host/takoform-host.db --listen "$listen" \
    --space team-a >.host/host.log 2>&1 &
  host_pid=$!
  for _ in $(seq 50); do
    curl -fsS "http://$listen/healthz" >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -fsS "http://$listen/healthz" >/dev/null || { tail -20 .host/host.log; exit 1; }
  export TAKOFORM_HOST_URL="http://$listen" TAKOFORM_HOST_TOKEN=dev-token
  log "reference host: $TAKOFORM_HOST_URL (token dev-token, admin token dev-admin; log .host/host.log)"
fi
# Deny by default (docs/tenancy.md): the example's namespace may use space team-a on the host
# the settings above define (the implicit host named `default`).
kubectl apply -f - >/dev/null <<'GRANT'
apiVersion: operator.takoform.io/v1alpha1
kind: TakoformSpaceGrant
metadata:
  name: make-run-default-team-a
spec:
  hostRef: default
  spaces: [team-a]
  namespaces:
    names: [default]
GRANT
log "grant: namespace default may use space team-a on host default (kubectl get takoformspacegrants)"
log "in another shell:  export KUBECONFIG=$KUBECONFIG"
log "                   kubectl apply -f docs/examples/bucket.yaml && kubectl get takoform"
.venv/bin/takoform-operator run
