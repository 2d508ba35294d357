"""The Form catalog: definition files shipped in this package, and their loading.

Definition files live in `definitions/<group>/<kind>-<definitionVersion>.yaml`;
`default-creates.yaml` names, per Form line, the definition NEW resources are created under;
`bounds.yaml` holds the size bounds of the generated CRDs (takoform_spec.bounds).
This module does the file I/O (the one module of takoform_spec that does); the rules live in
`takoform_spec.definitions`. The operator's Registry is built from a Catalog by the operator.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import yaml

from takoform_spec.bounds import Bounds, parse_bounds
from takoform_spec.definitions import FormDefinition, package_digest_of, parse_definition
from takoform_spec.errors import CatalogError
from takoform_spec.identity import FormLine, FormRef

CATALOG_DIR = Path(__file__).parent
DEFINITIONS_DIR = CATALOG_DIR / "definitions"
DEFAULT_CREATES_FILE = CATALOG_DIR / "default-creates.yaml"
BOUNDS_FILE = CATALOG_DIR / "bounds.yaml"


@dataclass(frozen=True)
class Catalog:
    definitions: tuple[FormDefinition, ...]
    #: Form line -> definitionVersion new resources are created under.
    default_creates: dict[FormLine, str]
    #: ref -> the definition file it came from, relative to the catalog directory.
    sources: dict[FormRef, str]
    #: The size bounds of the generated CRDs (bounds.yaml of the shipped catalog by default).
    bounds: Bounds = field(default_factory=lambda: load_bounds())


def load_definition_file(path: Path, source: str | None = None) -> FormDefinition:
    """Load one definition file (also used for extra packages given on a command line)."""
    raw = path.read_bytes()
    try:
        document = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise CatalogError(f"{source or path}: not valid YAML: {exc}") from None
    return parse_definition(document, package_digest_of(raw), source or str(path))


def load_catalog(directory: Path = CATALOG_DIR) -> Catalog:
    definitions: list[FormDefinition] = []
    sources: dict[FormRef, str] = {}
    for path in sorted((directory / "definitions").rglob("*.yaml")):
        relative = path.relative_to(directory).as_posix()
        definition = load_definition_file(path, relative)
        definitions.append(definition)
        sources[definition.ref] = relative
    bounds_file = directory / "bounds.yaml"
    bounds = load_bounds(bounds_file if bounds_file.is_file() else BOUNDS_FILE)
    return Catalog(tuple(definitions), _load_default_creates(directory), sources, bounds)


def load_bounds(path: Path = BOUNDS_FILE) -> Bounds:
    try:
        document = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise CatalogError(f"{path.name}: not valid YAML: {exc}") from None
    return parse_bounds(document, path.name)


def _load_default_creates(directory: Path) -> dict[FormLine, str]:
    path = directory / "default-creates.yaml"
    document = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    entries = document.get("defaultCreates")
    if not isinstance(entries, list):
        raise CatalogError(f"{path.name}: expected a defaultCreates list")
    result: dict[FormLine, str] = {}
    for entry in entries:
        try:
            line = FormLine(entry["apiVersion"], entry["kind"])
            version = str(entry["definitionVersion"])
        except (KeyError, TypeError):
            raise CatalogError(
                f"{path.name}: each entry needs apiVersion, kind, definitionVersion"
            ) from None
        if line in result:
            raise CatalogError(f"{path.name}: {line} is listed twice")
        result[line] = version
    return result
