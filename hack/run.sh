#!/usr/bin/env bash
# `make run`: the operator with what it needs on this machine. Starts the local control plane
# (unless TAKOFORM_USE_EXISTING_CLUSTER=1 with KUBECONFIG), applies the CRDs, starts the reference
# host (unless TAKOFORM_HOST_URL is set), starts the operator, applies the examples of
# docs/examples/ and waits until each is Ready (TAKOFORM_RUN_EXAMPLES=0 skips them), then keeps
# the operator running in the foreground until Ctrl-C. TAKOFORM_RUN_HOST_DIR: where the reference
# host keeps its database and log (default .cluster/host with the local control plane, else .host).
set -euo pipefail
cd "$(dirname "$0")/.."
log() { printf '%s run: %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

started_cluster=0
if [[ "${TAKOFORM_USE_EXISTING_CLUSTER:-}" == 1 && -n "${KUBECONFIG:-}" ]]; then
  # Someone else's cluster: only kubectl is needed, so no Go tool builds (the pinned kubectl only
  # when there is no other).
  tools_env="${TAKOFORM_TOOLS_CACHE:-$HOME/.cache/takoform-operator}/bin/env.sh"
  # shellcheck disable=SC1090
  command -v kubectl >/dev/null || { [[ -f $tools_env ]] && source "$tools_env"; } ||
    { log "ERROR: kubectl is not on PATH (needed with TAKOFORM_USE_EXISTING_CLUSTER=1)"; exit 1; }
else
  hack/tools.sh
  # shellcheck disable=SC1091
  source "${TAKOFORM_TOOLS_CACHE:-$HOME/.cache/takoform-operator}/bin/env.sh"
  eval "$(.venv/bin/python hack/localcluster.py up)"
  started_cluster=1
fi
log "cluster: $(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
kubectl wait --for=condition=Established crd -l app.kubernetes.io/part-of=takoform-operator \
  --timeout=60s >/dev/null
# Established comes a moment before the API server serves the new kinds ("storage is
# (re)initializing"): the operator's first lists would fail and be retried with ERROR lines.
# Every CRD of the project, listed by name, so a new kind cannot be forgotten here.
kinds="$(kubectl get crd -l app.kubernetes.io/part-of=takoform-operator \
  -o jsonpath='{range .items[*]}{.metadata.name}{","}{end}')"
for _ in $(seq 100); do
  kubectl get "${kinds%,}" -A >/dev/null 2>&1 && break
  sleep 0.2
done

host_pid=""
operator_pid=""
# Ctrl-C reaches the operator too (one process group): then wait for it to stop rather than
# signalling it a second time; on any other exit, stop it.
interrupted=0
trap 'interrupted=1' INT
cleanup() {
  if [[ -n "$operator_pid" ]]; then
    [[ "$interrupted" == 1 ]] || kill "$operator_pid" 2>/dev/null
    wait "$operator_pid" 2>/dev/null
  fi
  [[ -n "$host_pid" ]] && kill "$host_pid" 2>/dev/null
  true
}
trap cleanup EXIT
if [[ -z "${TAKOFORM_HOST_URL:-}" ]]; then
  listen="${HOST_LISTEN:-127.0.0.1:8787}"
  # The host's storage lives as long as the cluster whose CRs recorded its resources: with the
  # local control plane, in its state directory (`make cluster-down` removes both), so a fresh
  # cluster never meets resources that CRs of a removed one created (they would be NameTaken).
  host_dir=.host
  [[ "$started_cluster" == 1 ]] && host_dir=.cluster/host
  host_dir="${TAKOFORM_RUN_HOST_DIR:-$host_dir}"
  mkdir -p "$host_dir"
  TAKOFORM_HOST_TOKENS=dev-token TAKOFORM_HOST_ADMIN_TOKEN=dev-admin \
    .venv/bin/takoform-host serve --db "$host_dir/takoform-host.db" --listen "$listen" \
    --space team-a >"$host_dir/host.log" 2>&1 &
  host_pid=$!
  for _ in $(seq 50); do
    curl -fsS "http://$listen/healthz" >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -fsS "http://$listen/healthz" >/dev/null || { tail -20 "$host_dir/host.log"; exit 1; }
  # The local reference host is plain http: allowed explicitly (TAKOFORM_HOST_INSECURE).
  export TAKOFORM_HOST_URL="http://$listen" TAKOFORM_HOST_TOKEN=dev-token TAKOFORM_HOST_INSECURE=true
  log "reference host: $TAKOFORM_HOST_URL (token dev-token, admin token dev-admin; log $host_dir/host.log)"
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
# A local run serves /metrics to anyone on this machine (curl, a local Prometheus) without a token;
# in a cluster the chart keeps the default, TokenReview and SubjectAccessReview.
TAKOFORM_METRICS_AUTH="${TAKOFORM_METRICS_AUTH:-none}" .venv/bin/takoform-operator run &
operator_pid=$!
if [[ "${TAKOFORM_RUN_EXAMPLES:-1}" != 0 ]]; then
  # The examples are the ones tests/kube/test_examples.py proves valid against the CRDs.
  kubectl apply -f docs/examples/ >/dev/null
  log "examples applied (docs/examples/); waiting until they are Ready"
  if ! kubectl wait --for=condition=Ready --timeout="${TAKOFORM_RUN_READY_TIMEOUT:-120s}" \
    -f docs/examples/ >/dev/null; then
    [[ "$interrupted" == 1 ]] && exit 130
    kubectl get -f docs/examples/ >&2 || true
    log "an example did not become Ready (its conditions above say why)"
    exit 1
  fi
  kubectl get -f docs/examples/ >&2
  log "all examples Ready"
fi
# What `kubectl takoform` needs in that shell: it reads the implicit host `default` from the same
# TAKOFORM_HOST_* settings as the operator (a token given to make run is not printed).
plugin_env="TAKOFORM_HOST_URL=$TAKOFORM_HOST_URL"
if [[ -n "$host_pid" ]]; then
  plugin_env+=" TAKOFORM_HOST_TOKEN=dev-token TAKOFORM_HOST_INSECURE=true"
elif [[ -n "${TAKOFORM_HOST_INSECURE:-}" ]]; then
  plugin_env+=" TAKOFORM_HOST_INSECURE=$TAKOFORM_HOST_INSECURE"
fi
log "in another shell:  export KUBECONFIG=$KUBECONFIG"
log "                   export $plugin_env PATH=$PWD/.venv/bin:\$PATH"
[[ -n "$host_pid" ]] ||
  log "                   (and the TAKOFORM_HOST_TOKEN or TAKOFORM_HOST_TOKEN_FILE given to make run)"
log "                   kubectl get takoform; kubectl takoform trace bucket/logs; kubectl get secret orders-db"
wait "$operator_pid"
