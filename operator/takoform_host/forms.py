"""Installed Form Definitions and their packages.

Every FormRef the host serves comes from at least one *package* (a definition file; its package
digest is the SHA-256 of the file's bytes). The same FormRef may be installed from several
packages; exactly one is *active* per FormRef. The package digest is audit evidence only (H-10):
lookups go by the whole FormRef, never by package.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from takoform_operator.catalog import Catalog, load_catalog, load_definition_file
from takoform_operator.core.definitions import FormDefinition
from takoform_operator.core.errors import CatalogError
from takoform_operator.core.identity import FormLine, FormRef, parse_definition_version
from takoform_operator.core.registry import Registry

#: Package files shipped with the host (e.g. a mirror of a catalog definition).
SHIPPED_PACKAGES_DIR = Path(__file__).parent / "packages"

#: A FormRef as four plain strings: what a request names, before anything is known about it.
RefKey = tuple[str, str, str, str]


def ref_key(ref: FormRef) -> RefKey:
    return (ref.api_version, ref.kind, ref.definition_version, ref.schema_digest)


@dataclass(frozen=True)
class Package:
    digest: str
    source: str
    definition: FormDefinition


class InstalledForms:
    """What the host has installed: definitions by exact FormRef, packages, the active one."""

    def __init__(self, catalog: Catalog, extra_files: Iterable[Path] = ()) -> None:
        registry = catalog.registry()
        packages: dict[FormRef, list[Package]] = {}
        for definition in catalog.definitions:
            source = f"catalog:{catalog.sources.get(definition.ref, definition.ref)}"
            packages.setdefault(definition.ref, []).append(
                Package(definition.package_digest, source, definition)
            )
        for path in extra_files:
            definition = load_definition_file(path)
            known = packages.get(definition.ref)
            if known is None:
                registry = registry.register(definition)
                packages[definition.ref] = [
                    Package(definition.package_digest, str(path), definition)
                ]
            elif all(p.digest != definition.package_digest for p in known):
                known.append(Package(definition.package_digest, str(path), definition))
        self.registry: Registry = registry
        self.packages = packages
        self._by_key = {ref_key(ref): ref for ref in packages}
        self._active: dict[FormRef, str] = {ref: pkgs[0].digest for ref, pkgs in packages.items()}

    # -- lookups by exact FormRef ------------------------------------------------------------

    def lookup(self, key: RefKey) -> FormRef | None:
        return self._by_key.get(key)

    def definition(self, ref: FormRef) -> FormDefinition:
        return self.registry.lookup(ref).definition

    def refs_of_line(self, line: FormLine) -> list[FormRef]:
        return self.registry.known_refs(line)

    def newest_of_line(self, line: FormLine) -> FormRef | None:
        refs = self.refs_of_line(line)
        if not refs:
            return None
        return max(refs, key=lambda ref: parse_definition_version(ref.definition_version))

    def has_line(self, line: FormLine) -> bool:
        return bool(self.refs_of_line(line))

    # -- packages ----------------------------------------------------------------------------

    def package_digests(self, ref: FormRef) -> list[str]:
        return [p.digest for p in self.packages[ref]]

    def active_package(self, ref: FormRef) -> str:
        return self._active[ref]

    def activate(self, ref: FormRef, digest: str) -> None:
        if digest not in self.package_digests(ref):
            raise CatalogError(f"package {digest} is not installed for {ref}")
        self._active[ref] = digest

    def all_refs(self) -> list[FormRef]:
        return sorted(self.packages)

    def schema(self, ref: FormRef, *, alter: bool = False) -> dict[str, Any]:
        """The schema document of `ref` (what its schemaDigest hashes). `alter` is H-9's lie."""
        schema = copy.deepcopy(dict(self.definition(ref).schema))
        if alter and schema.get("fields"):
            first = schema["fields"][0]
            first["description"] = str(first.get("description", "")) + " (edited by this host)"
        return schema


def install(extra_files: Iterable[Path]) -> InstalledForms:
    """The project catalog, the packages shipped with the host, then the given files."""
    shipped = sorted(SHIPPED_PACKAGES_DIR.glob("*.yaml"))
    return InstalledForms(load_catalog(), [*shipped, *extra_files])
