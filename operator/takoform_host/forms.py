"""Installed Form Definitions, their packages, and which installed FormRef a request names.

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

from takoform_spec.catalog import Catalog, load_catalog, load_definition_file
from takoform_spec.definitions import FormDefinition, check_compatibility
from takoform_spec.errors import CatalogError
from takoform_spec.host_api import ErrorCode
from takoform_spec.identity import FormLine, FormRef, parse_definition_version

from .errors import HostError
from .misbehaviours import Settings

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
        packages: dict[FormRef, list[Package]] = {}
        for definition in catalog.definitions:
            source = f"catalog:{catalog.sources.get(definition.ref, definition.ref)}"
            packages.setdefault(definition.ref, []).append(
                Package(definition.package_digest, source, definition)
            )
        for path in extra_files:
            definition = load_definition_file(path)
            known = packages.setdefault(definition.ref, [])
            if all(p.digest != definition.package_digest for p in known):
                known.append(Package(definition.package_digest, str(path), definition))
        definitions = [pkgs[0].definition for pkgs in packages.values()]
        _check_versions_unique(definitions)
        check_compatibility(definitions)
        self.packages = packages
        self._definitions = {ref: pkgs[0].definition for ref, pkgs in packages.items()}
        self._by_key = {ref_key(ref): ref for ref in packages}
        self._active: dict[FormRef, str] = {ref: pkgs[0].digest for ref, pkgs in packages.items()}

    # -- lookups by exact FormRef ------------------------------------------------------------

    def lookup(self, key: RefKey) -> FormRef | None:
        return self._by_key.get(key)

    def definition(self, ref: FormRef) -> FormDefinition:
        return self._definitions[ref]

    def refs_of_line(self, line: FormLine) -> list[FormRef]:
        return sorted(ref for ref in self._definitions if ref.line == line)

    def newest_of_line(self, line: FormLine) -> FormRef | None:
        refs = self.refs_of_line(line)
        if not refs:
            return None
        return max(refs, key=lambda ref: parse_definition_version(ref.definition_version))

    def has_line(self, line: FormLine) -> bool:
        return bool(self.refs_of_line(line))

    # -- what a request names ---------------------------------------------------------------

    def resolve(
        self, line: FormLine, version: str | None, digest: str | None, settings: Settings
    ) -> tuple[FormRef, bool]:
        """The installed FormRef a request names, and whether lookups may ignore the binding.

        Fails closed (H-8): anything but an installed exact FormRef is `form_unknown`.
        """
        if not version or not digest:
            newest = self.newest_of_line(line)
            if settings.on("default-missing-formref") and newest is not None:
                return newest, False
            missing = [
                n for n, v in (("definitionVersion", version), ("schemaDigest", digest)) if not v
            ]
            raise HostError(
                ErrorCode.INVALID_REQUEST,
                "the query parameters definitionVersion and schemaDigest are both required",
                {"missing": missing},
            )
        ref = self.lookup((line.api_version, line.kind, version, digest))
        if ref is not None:
            return ref, settings.on("serve-under-any-installed-ref")
        newest = self.newest_of_line(line)
        if settings.on("match-group-kind") and newest is not None:
            return newest, True
        raise HostError(
            ErrorCode.FORM_UNKNOWN,
            f"FormRef {line.api_version} {line.kind} definitionVersion={version} "
            f"schemaDigest={digest} is not installed on this host",
            {
                "formRef": {
                    "apiVersion": line.api_version,
                    "kind": line.kind,
                    "definitionVersion": version,
                    "schemaDigest": digest,
                },
                "installed": [ref.to_json() for ref in self.refs_of_line(line)],
            },
        )

    def item(self, ref: FormRef) -> dict[str, Any]:
        return {
            "formRef": ref.to_json(),
            "packageDigests": self.package_digests(ref),
            "activePackageDigest": self.active_package(ref),
        }

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


def _check_versions_unique(definitions: Iterable[FormDefinition]) -> None:
    """One schema per definitionVersion of a line: a version names one exact schema."""
    seen: dict[tuple[FormLine, str], FormRef] = {}
    for definition in definitions:
        other = seen.setdefault(
            (definition.line, definition.ref.definition_version), definition.ref
        )
        if other != definition.ref:
            raise CatalogError(
                f"{definition.line}: definitionVersion {definition.ref.definition_version} "
                f"is declared twice with different schemas"
            )


def install(extra_files: Iterable[Path]) -> InstalledForms:
    """The project catalog, the packages shipped with the host, then the given files."""
    shipped = sorted(SHIPPED_PACKAGES_DIR.glob("*.yaml"))
    return InstalledForms(load_catalog(), [*shipped, *extra_files])
