#!/usr/bin/env bash
# Installs or upgrades the chart's CRDs. Helm installs a chart's crds/ on first install only and
# never upgrades (nor deletes) them, so run this before `helm upgrade` to a chart whose CRDs
# changed (docs/deployment.md). Server-side apply: big schemas overflow the client-side
# last-applied annotation, and the CRDs change in place (existing CRs are kept).
#
#   hack/crds.sh [CHART_DIR]     # default charts/takoform-operator; uses KUBECONFIG / context
#   KUBECTL=/path/to/kubectl     # default: kubectl on PATH
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart="${1:-$repo/charts/takoform-operator}"
kubectl="${KUBECTL:-kubectl}"
[[ -d "$chart/crds" ]] || { echo "crds.sh: no crds/ in $chart" >&2; exit 1; }
"$kubectl" apply --server-side --force-conflicts --field-manager=takoform-crds -f "$chart/crds/"
# Beside the CRDs: the admission policies that protect Bound TakoformBindings and bound the Forms'
# label keys (no condition to wait for).
"$kubectl" wait --for=condition=Established --timeout=60s crd -l app.kubernetes.io/part-of=takoform-operator
