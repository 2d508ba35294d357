"""docs/argocd-health.md for the generator: the chart's Argo CD health check, registered in
argocd-cm under one `resource.customizations.health.<group>_<Kind>` key per Form line."""

from __future__ import annotations

from collections.abc import Iterable

from takoform_spec.identity import FormLine

DOC_PATH = "docs/argocd-health.md"
LUA_PATH = "charts/takoform-operator/files/argocd-health.lua"


def health_key(line: FormLine) -> str:
    return f"resource.customizations.health.{line.group}_{line.kind}"


def render_doc(lines: Iterable[FormLine], note: str) -> str:
    ordered = sorted(lines)
    keys = "".join(
        f"| `{line.api_version}` | `{line.kind}` | `{health_key(line)}` |\n" for line in ordered
    )
    return (
        f"<!-- {note}. Regenerate with `make generate`. -->\n"
        "# Argo CD health check\n\n"
        f"`{LUA_PATH}` tells Argo CD how healthy a Takoform CR\n"
        "is, from the conditions the operator writes (docs/operator.md). Argo CD runs it with\n"
        "gopher-lua (Lua 5.1); the tests run it with Debian's `lua5.1` on statuses the operator\n"
        "wrote. For Flux the chart ships `healthCheckExprs`: docs/deployment.md (*GitOps*).\n\n"
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
        "The chart ships the keys as a merge patch of `argocd-cm`, generated:\n"
        f"`{CM_PATCH_PATH}`, one key per Form line, each\n"
        "holding the whole script. A merge patch leaves every other key of `argocd-cm` alone (an\n"
        "apply of the whole ConfigMap would remove the keys a client-side `kubectl apply`\n"
        "wrote). From a checkout, or from the chart (`helm pull --untar`, the same path under\n"
        "it):\n\n"
        "```sh\n"
        "kubectl patch configmap argocd-cm --namespace argocd --type merge \\\n"
        f"  --patch-file {CM_PATCH_PATH}\n"
        "```\n\n"
        "Where `argocd-cm` is itself kept in Git or in the values of Argo CD's own chart\n"
        "(`configs.cm`), put the file's `data` keys there instead. The operator's chart has no\n"
        "option that renders them: a release cannot merge keys into a ConfigMap another\n"
        "installation owns.\n\n"
        "## The keys\n\n"
        "| apiVersion | kind | argocd-cm key |\n"
        "|---|---|---|\n"
        f"{keys}"
    )


CM_PATCH_PATH = "charts/takoform-operator/files/argocd-cm-patch.yaml"


def _block_scalar(text: str, indent: str) -> str:
    """`text` as a YAML literal block scalar whose value is exactly `text` (the chomping
    indicator says how many newlines end it)."""
    body = text.rstrip("\n")
    trailing = len(text) - len(body)
    chomp = {0: "|-", 1: "|"}.get(trailing, "|+")
    rows = "".join(f"{indent}{row}\n" if row else "\n" for row in body.split("\n"))
    return f"{chomp}\n{rows}" + "\n" * max(trailing - 1, 0)


def render_cm_patch(lines: Iterable[FormLine], lua: str, note: str) -> str:
    """A merge patch of Argo CD's `argocd-cm`: one key per Form line, each holding the whole
    health check inline (no YAML anchors, so any tool that merges YAML reads it alike)."""
    ordered = sorted(lines)
    script = _block_scalar(lua, "    ")
    keys = "".join(f"  {health_key(line)}: {script}" for line in ordered)
    return (
        f"# {note}.\n"
        "# Regenerate with `make generate`.\n"
        "#\n"
        "# The Argo CD health check of every Takoform Form line, one argocd-cm key each holding\n"
        f"# {LUA_PATH}: a merge patch, which leaves every\n"
        "# other key of argocd-cm alone (docs/argocd-health.md):\n"
        "#\n"
        "#   kubectl patch configmap argocd-cm --namespace argocd --type merge \\\n"
        f"#     --patch-file {CM_PATCH_PATH}\n"
        "data:\n"
        f"{keys}"
    )
