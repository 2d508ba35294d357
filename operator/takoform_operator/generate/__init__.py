"""The generator: Form catalog -> registry data, one CRD per Form line, reference docs.

`render(catalog)` is pure and returns {relative path: file text}; `differences` says which
committed files a regeneration would change, `write` writes them (`takoform-operator generate
[--check]`). The pieces: crd (one CRD per Form line; the schema of its desired fields: fields),
bounds (the unbounded-node check and the admission policy for what no schema bounds), docs
(docs/forms), tenancy (the three cluster-scoped CRDs and the TakoformBinding protection), argocd
(docs/argocd-health.md and the chart's argocd-cm patch), flux (the chart's Flux
healthCheckExprs), monitoring (the chart's kube-prometheus-stack values), documents (the
Kubernetes envelopes and the YAML text they share).
"""

from __future__ import annotations

import json
from pathlib import Path

from takoform_operator.core.registry import Registry
from takoform_operator.generate import argocd, flux, monitoring, tenancy
from takoform_operator.generate.bounds import (
    BOUNDS_POLICY_FILE,
    bounds_policy,
    check_bounded,
    union_key_rules,
)
from takoform_operator.generate.crd import crd_file, doc_file, render_crd
from takoform_operator.generate.docs import render_doc, render_index
from takoform_operator.generate.documents import GENERATED_NOTE, crd_text, policy_text
from takoform_operator.registry_data import registry_document
from takoform_spec.catalog import Catalog
from takoform_spec.definitions import FormDefinition
from takoform_spec.identity import FormLine

REGISTRY_PATH = "operator/takoform_operator/generated/registry.json"
CRD_DIR = "crds"
CHART_CRD_DIR = "charts/takoform-operator/crds"
DOCS_DIR = "docs/forms"


# -- the whole set -----------------------------------------------------------------------------


def render(catalog: Catalog, *, with_chart: bool, argocd_lua: str | None = None) -> dict[str, str]:
    """Every generated file. `argocd_lua` is the chart's Argo CD health check (read from the
    checkout by the caller): with it, docs/argocd-health.md too, and with the chart its argocd-cm
    patch. With the chart, its Flux healthCheckExprs and kube-prometheus-stack values."""
    registry = Registry.from_definitions(catalog.definitions, catalog.default_creates)
    lines: dict[FormLine, list[FormDefinition]] = {}
    for definition in sorted(catalog.definitions, key=lambda d: (d.line, d.version_tuple)):
        lines.setdefault(definition.line, []).append(definition)
    files: dict[str, str] = {
        REGISTRY_PATH: json.dumps(
            registry_document(registry, catalog.sources), indent=2, ensure_ascii=False
        )
        + "\n",
        f"{DOCS_DIR}/README.md": render_index(lines, registry, catalog.bounds),
    }
    # The files of crds/, which the chart's crds/ holds too.
    crds: dict[str, str] = {}
    key_rules = []
    for line, definitions in lines.items():
        key_rules += union_key_rules(line, definitions, catalog.bounds)
        crds[crd_file(line)] = render_crd(line, definitions, registry, catalog.bounds)
        files[f"{DOCS_DIR}/{doc_file(line)}"] = render_doc(
            line, definitions, registry, catalog.bounds
        )
    for policy in (tenancy.host_crd(), tenancy.grant_crd(), tenancy.binding_crd()):
        crds[f"{policy['metadata']['name']}.yaml"] = crd_text(check_bounded(policy))
    crds[tenancy.PROTECTION_FILE] = policy_text(tenancy.binding_protection())
    if key_rules:
        crds[BOUNDS_POLICY_FILE] = policy_text(bounds_policy(key_rules))
    for directory in [CRD_DIR, *([CHART_CRD_DIR] if with_chart else [])]:
        files.update({f"{directory}/{name}": text for name, text in crds.items()})
    if argocd_lua is not None:
        files[argocd.DOC_PATH] = argocd.render_doc(lines, GENERATED_NOTE)
        if with_chart:
            files[argocd.CM_PATCH_PATH] = argocd.render_cm_patch(lines, argocd_lua, GENERATED_NOTE)
    if with_chart:
        files[flux.EXPRS_PATH] = flux.render_exprs(lines, GENERATED_NOTE)
        files[monitoring.VALUES_PATH] = monitoring.render_values(lines, GENERATED_NOTE)
    return files


def generated_dirs(with_chart: bool) -> list[str]:
    """Directories the generator owns entirely: a stale file in them is a difference too."""
    return [CRD_DIR, DOCS_DIR, *([CHART_CRD_DIR] if with_chart else [])]


def differences(root: Path, files: dict[str, str], with_chart: bool) -> list[str]:
    """Paths a regeneration would create, change or delete."""
    changed = [
        path
        for path, text in files.items()
        if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text
    ]
    for directory in generated_dirs(with_chart):
        for existing in sorted((root / directory).glob("*")):
            relative = existing.relative_to(root).as_posix()
            if existing.is_file() and relative not in files:
                changed.append(relative + " (stale)")
    return changed


def write(root: Path, files: dict[str, str], with_chart: bool) -> list[str]:
    changed = differences(root, files, with_chart)
    for directory in generated_dirs(with_chart):
        for existing in (root / directory).glob("*"):
            if existing.is_file() and existing.relative_to(root).as_posix() not in files:
                existing.unlink()
    for path, text in files.items():
        target = root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text(encoding="utf-8") != text:
            target.write_text(text, encoding="utf-8")
    return changed
