"""docs/argocd-health.md for the generator: the chart's Argo CD health check, registered in
argocd-cm under one `resource.customizations.health.<group>_<Kind>` key per Form line."""

from __future__ import annotations

from collections.abc import Iterable

from takoform_spec.identity import FormLine

DOC_PATH = "docs/argocd-health.md"
LUA_PATH = "charts/takoform-operator/files/argocd-health.lua"
ANCHOR = "takoform-health"


def health_key(line: FormLine) -> str:
    return f"resource.customizations.health.{line.group}_{line.kind}"


def render_doc(lines: Iterable[FormLine], lua: str, note: str) -> str:
    ordered = sorted(lines)
    first, rest = ordered[0], ordered[1:]
    script = "".join(f"    {row}\n" if row else "\n" for row in lua.rstrip("\n").split("\n"))
    from_files = "".join(f"  --from-file={health_key(line)}={LUA_PATH} \\\n" for line in ordered)
    keys = "".join(
        f"| `{line.api_version}` | `{line.kind}` | `{health_key(line)}` |\n" for line in ordered
    )
    return (
        f"<!-- {note}. Regenerate with `make generate`. -->\n"
        "# Argo CD health check\n\n"
        f"`{LUA_PATH}` tells Argo CD how healthy a Takoform CR\n"
        "is, from the conditions the operator writes (docs/operator.md). Argo CD runs it with\n"
        "gopher-lua (Lua 5.1); the tests run it with Debian's `lua5.1` on statuses the operator\n"
        "wrote. Flux needs no such script: docs/deployment.md.\n\n"
        "| the CR | Argo CD health |\n"
        "|---|---|\n"
        '| annotation `takoform.io/paused: "true"` | `Suspended` |\n'
        "| `Blocked=True` | `Degraded`, the message names the remedy |\n"
        "| `status.observedGeneration` < `metadata.generation` | `Progressing` |\n"
        "| `Degraded=True` | `Degraded` |\n"
        "| `spec.managementPolicy: Observe` and `Drifted=True` (reported, never repaired) "
        "| `Suspended` |\n"
        "| `Ready=True` | `Healthy` |\n"
        "| `Drifted`, `Reconciling`, a pending operation, no status yet | `Progressing` |\n\n"
        "## Install\n\n"
        "From a checkout (or the chart's `files/`), add one key per Form line to `argocd-cm`\n"
        "with a merge patch, which leaves every other key alone (an apply of the whole ConfigMap\n"
        "would remove the keys a client-side `kubectl apply` wrote):\n\n"
        "```sh\n"
        "kubectl create configmap argocd-cm --dry-run=client -o yaml \\\n"
        f"{from_files}"
        "  | kubectl patch configmap argocd-cm --namespace argocd --type merge \\\n"
        "      --patch-file /dev/stdin\n"
        "```\n\n"
        "Or merge this into `argocd-cm` by hand (one script, one key per Form line):\n\n"
        "```yaml\n"
        "data:\n"
        f"  {health_key(first)}: &{ANCHOR} |\n"
        f"{script}" + "".join(f"  {health_key(line)}: *{ANCHOR}\n" for line in rest) + "```\n\n"
        "## The keys\n\n"
        "| apiVersion | kind | argocd-cm key |\n"
        "|---|---|---|\n"
        f"{keys}"
    )
