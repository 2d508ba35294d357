"""The generator: Form catalog -> registry data, one CRD per Form line, reference docs.

`render(catalog)` is pure and returns {relative path: file text}; `generate(root, check=...)`
writes them or, in check mode, reports which committed files a regeneration would change. The
pieces: generator_crd (the CRDs), generator_docs (docs/forms), generator_tenancy (the three
cluster-scoped CRDs), generator_argocd (docs/argocd-health.md and the chart's argocd-cm patch),
generator_flux (the chart's Flux healthCheckExprs).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from takoform_operator import generator_tenancy
from takoform_operator.core.registry import Registry
from takoform_operator.generator_crd import (
    BOUNDS_POLICY_FILE,
    GENERATED_NOTE,
    bounds_policy,
    check_bounded,
    crd_file,
    crd_text,
    doc_file,
    render_crd,
    union_key_rules,
)
from takoform_operator.generator_docs import render_doc, render_index
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
    patch. With the chart, its Flux healthCheckExprs."""
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
    key_rules = []
    for line, definitions in lines.items():
        key_rules += union_key_rules(line, definitions, catalog.bounds)
        crd = render_crd(line, definitions, registry, catalog.bounds)
        files[f"{CRD_DIR}/{crd_file(line)}"] = crd
        if with_chart:
            files[f"{CHART_CRD_DIR}/{crd_file(line)}"] = crd
        files[f"{DOCS_DIR}/{doc_file(line)}"] = render_doc(
            line, definitions, registry, catalog.bounds
        )
    for policy in (
        generator_tenancy.host_crd(),
        generator_tenancy.grant_crd(),
        generator_tenancy.binding_crd(),
    ):
        name = f"{policy['metadata']['name']}.yaml"
        text = crd_text(check_bounded(policy))
        files[f"{CRD_DIR}/{name}"] = text
        if with_chart:
            files[f"{CHART_CRD_DIR}/{name}"] = text
    protection = f"# {GENERATED_NOTE}.\n# Regenerate with `make generate`.\n" + yaml.safe_dump_all(
        generator_tenancy.binding_protection(), sort_keys=False, width=100
    )
    files[f"{CRD_DIR}/{generator_tenancy.PROTECTION_FILE}"] = protection
    if with_chart:
        files[f"{CHART_CRD_DIR}/{generator_tenancy.PROTECTION_FILE}"] = protection
    if key_rules:
        bounds = f"# {GENERATED_NOTE}.\n# Regenerate with `make generate`.\n" + yaml.safe_dump_all(
            bounds_policy(key_rules), sort_keys=False, width=100
        )
        files[f"{CRD_DIR}/{BOUNDS_POLICY_FILE}"] = bounds
        if with_chart:
            files[f"{CHART_CRD_DIR}/{BOUNDS_POLICY_FILE}"] = bounds
    if argocd_lua is not None:
        from takoform_operator import generator_argocd

        files[generator_argocd.DOC_PATH] = generator_argocd.render_doc(lines, GENERATED_NOTE)
        if with_chart:
            files[generator_argocd.CM_PATCH_PATH] = generator_argocd.render_cm_patch(
                lines, argocd_lua, GENERATED_NOTE
            )
    if with_chart:
        from takoform_operator import generator_flux

        files[generator_flux.EXPRS_PATH] = generator_flux.render_exprs(lines, GENERATED_NOTE)
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
