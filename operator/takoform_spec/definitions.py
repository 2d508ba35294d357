"""Form Definitions as data: parsing, the computed schemaDigest, and the compatibility rule.

A definition file declares one exact definition version of one Form line. Its `schemaDigest` is
never typed by hand: it is the SHA-256 of the canonical serialisation of the schema (everything in
the file except the `package` member), see docs/schema-digest.md. The package digest is the
SHA-256 of the file's bytes: distribution provenance, audit evidence only (decision 0011).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .canonical import canonical_json, sha256_digest
from .errors import CatalogError, CompatibilityError
from .identity import FormLine, FormRef, form_ref_problems, parse_definition_version

SCALAR_TYPES = ("string", "integer", "number", "boolean")
FIELD_TYPES = (*SCALAR_TYPES, "array", "map")
#: Constraint keys a Kubernetes structural schema can express too.
CONSTRAINT_KEYS = (
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "maxItems",
)
_FIELD_KEYS = {
    "name",
    "type",
    "items",
    "values",
    "required",
    "description",
    "default",
    "unit",
    "immutable",
    *CONSTRAINT_KEYS,
}
#: `sensitive: true` marks an output whose value is a secret (a password, a private key): the
#: operator writes it into the CR's connection Secret, never into status (docs/tenancy.md).
_OUTPUT_KEYS = {"name", "type", "items", "values", "description", "unit", "sensitive"}
_TOP_KEYS = {"apiVersion", "kind", "definitionVersion", "description", "fields", "outputs"}
_FIELD_NAME = re.compile(r"^[a-z][A-Za-z0-9]*$")


@dataclass(frozen=True)
class FieldSpec:
    """One portable desired field (or output) as a definition declares it."""

    name: str
    type: str
    description: str
    required: bool = False
    items: str | None = None
    values: str | None = None
    default: Any = None
    unit: str | None = None
    immutable: bool = False
    enum: tuple[Any, ...] | None = None
    pattern: str | None = None
    min_length: int | None = None
    max_length: int | None = None
    minimum: int | float | None = None
    maximum: int | float | None = None
    max_items: int | None = None
    #: An output whose value is a secret (outputs only; see _OUTPUT_KEYS).
    sensitive: bool = False

    @property
    def type_label(self) -> str:
        if self.type == "array":
            return f"array of {self.items}"
        if self.type == "map":
            return f"map of {self.values}"
        return self.type


@dataclass(frozen=True)
class FormDefinition:
    """One exact definition version of a Form line, with its computed identity."""

    ref: FormRef
    description: str
    fields: tuple[FieldSpec, ...]
    outputs: tuple[FieldSpec, ...]
    package_digest: str
    #: The schema document the digest was computed from (for docs and the host).
    schema: Mapping[str, Any]

    @property
    def line(self) -> FormLine:
        return self.ref.line

    @property
    def version_tuple(self) -> tuple[int, int, int]:
        return parse_definition_version(self.ref.definition_version)

    def field(self, name: str) -> FieldSpec | None:
        return next((f for f in self.fields if f.name == name), None)

    @property
    def sensitive_outputs(self) -> tuple[FieldSpec, ...]:
        return tuple(out for out in self.outputs if out.sensitive)


def schema_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """The part of a definition file the schemaDigest covers: all but `package`."""
    return {key: value for key, value in document.items() if key != "package"}


def schema_digest(document: Mapping[str, Any]) -> str:
    return sha256_digest(canonical_json(schema_of(document)))


def package_digest_of(raw: bytes) -> str:
    """The package digest of a definition file: SHA-256 of its exact bytes (provenance)."""
    return sha256_digest(raw)


def parse_definition(document: Any, package_digest: str, source: str) -> FormDefinition:
    """Build a FormDefinition from a parsed definition document and its package digest."""
    if not isinstance(document, dict):
        raise CatalogError(f"{source}: a definition file must hold one mapping")
    unknown = sorted(set(document) - _TOP_KEYS - {"package"})
    if unknown:
        raise CatalogError(f"{source}: unknown top-level member(s) {unknown}")
    for key in ("apiVersion", "kind", "definitionVersion", "description", "fields"):
        if key not in document:
            raise CatalogError(f"{source}: missing {key!r}")
    api_version, kind, version = (
        document["apiVersion"],
        document["kind"],
        document["definitionVersion"],
    )
    digest = schema_digest(document)
    problems = form_ref_problems(api_version, kind, version, digest)
    if problems:
        raise CatalogError(f"{source}: " + "; ".join(problems))
    ref = FormRef(api_version, kind, version, digest)
    fields = _parse_fields(document["fields"], source, _FIELD_KEYS, "field")
    outputs = _parse_fields(document.get("outputs", []), source, _OUTPUT_KEYS, "output")
    return FormDefinition(
        ref=ref,
        description=str(document["description"]),
        fields=fields,
        outputs=outputs,
        package_digest=package_digest,
        schema=schema_of(document),
    )


def _parse_fields(items: Any, source: str, allowed: set[str], what: str) -> tuple[FieldSpec, ...]:
    if not isinstance(items, list):
        raise CatalogError(f"{source}: {what}s must be a list")
    specs: list[FieldSpec] = []
    seen: set[str] = set()
    for item in items:
        if not isinstance(item, dict) or "name" not in item:
            raise CatalogError(f"{source}: every {what} is a mapping with a name")
        name = item["name"]
        where = f"{source}: {what} {name!r}"
        if not isinstance(name, str) or not _FIELD_NAME.match(name):
            raise CatalogError(f"{where}: names are lowerCamelCase")
        if name in seen:
            raise CatalogError(f"{where}: declared twice")
        seen.add(name)
        unknown = sorted(set(item) - allowed)
        if unknown:
            raise CatalogError(f"{where}: unknown member(s) {unknown}")
        if not isinstance(item.get("description"), str) or not item["description"].strip():
            raise CatalogError(f"{where}: needs a description")
        kind = item.get("type")
        if kind not in FIELD_TYPES:
            raise CatalogError(f"{where}: type must be one of {', '.join(FIELD_TYPES)}")
        if kind == "array" and item.get("items") not in SCALAR_TYPES:
            raise CatalogError(f"{where}: an array needs items: one of {SCALAR_TYPES}")
        if kind == "map" and item.get("values") not in SCALAR_TYPES:
            raise CatalogError(f"{where}: a map needs values: one of {SCALAR_TYPES}")
        if not isinstance(item.get("sensitive", False), bool):
            raise CatalogError(f"{where}: sensitive is true or false")
        if item.get("sensitive") and item.get("type") != "string":
            # A Secret holds bytes: a sensitive value is text, written as is.
            raise CatalogError(f"{where}: a sensitive output is of type string")
        if "pattern" in item:
            try:
                re.compile(item["pattern"])
            except re.error as exc:
                raise CatalogError(f"{where}: pattern does not compile: {exc}") from None
        enum = item.get("enum")
        specs.append(
            FieldSpec(
                name=name,
                type=kind,
                description=item["description"].strip(),
                required=bool(item.get("required", False)),
                items=item.get("items"),
                values=item.get("values"),
                default=item.get("default"),
                unit=item.get("unit"),
                immutable=bool(item.get("immutable", False)),
                enum=tuple(enum) if enum is not None else None,
                pattern=item.get("pattern"),
                min_length=item.get("minLength"),
                max_length=item.get("maxLength"),
                minimum=item.get("minimum"),
                maximum=item.get("maximum"),
                max_items=item.get("maxItems"),
                sensitive=item.get("sensitive", False),
            )
        )
    return tuple(specs)


def check_compatibility(definitions: Iterable[FormDefinition]) -> None:
    """Enforce the Form compatibility rule within each major of each line.

    Every later minor (or patch) of a major must accept every document the earlier one accepted,
    with the same portable meaning: no field removed, retyped, re-meant (unit, default), made
    required, or constrained more tightly; a new field must be optional.
    """
    by_major: dict[tuple[FormLine, int], list[FormDefinition]] = {}
    for definition in definitions:
        by_major.setdefault((definition.line, definition.ref.major), []).append(definition)
    for (line, _major), group in sorted(by_major.items(), key=lambda kv: (str(kv[0][0]), kv[0][1])):
        group.sort(key=lambda d: d.version_tuple)
        for older, newer in itertools.pairwise(group):
            _check_pair(str(line), older, newer)


def _check_pair(line: str, older: FormDefinition, newer: FormDefinition) -> None:
    old_v, new_v = older.ref.definition_version, newer.ref.definition_version

    def fail(field: str, problem: str) -> CompatibilityError:
        return CompatibilityError(line, old_v, new_v, field, problem)

    for kind, old_specs, new_specs in (
        ("field", older.fields, newer.fields),
        ("output", older.outputs, newer.outputs),
    ):
        new_by_name = {spec.name: spec for spec in new_specs}
        for old in old_specs:
            new = new_by_name.get(old.name)
            if new is None:
                raise fail(old.name, f"({kind}) is removed")
            if old.type_label != new.type_label:
                raise fail(old.name, f"is retyped from {old.type_label} to {new.type_label}")
            if old.unit != new.unit:
                raise fail(old.name, f"is re-meant: unit {old.unit!r} became {new.unit!r}")
            if old.default != new.default:
                raise fail(old.name, f"is re-meant: default {old.default!r} became {new.default!r}")
            if old.sensitive != new.sensitive:
                # Where the value is delivered (status or the connection Secret) is its meaning
                # to every consumer: moving it is breaking, in either direction.
                raise fail(
                    old.name, f"is re-meant: sensitive {old.sensitive} became {new.sensitive}"
                )
            if kind == "field":
                narrowing = _narrowing(old, new)
                if narrowing:
                    raise fail(old.name, narrowing)
        if kind == "field":
            old_names = {spec.name for spec in old_specs}
            for new in new_specs:
                if new.name not in old_names and new.required:
                    raise fail(new.name, "is new and required, so earlier documents lose validity")


def _narrowing(old: FieldSpec, new: FieldSpec) -> str | None:
    """Say how `new` rejects a value `old` accepted, or None."""
    if new.required and not old.required:
        return "became required"
    if new.immutable and not old.immutable:
        return "became immutable"
    if new.enum is not None and (old.enum is None or not set(old.enum) <= set(new.enum)):
        return f"narrows its enum from {old.enum} to {new.enum}"
    if new.pattern is not None and new.pattern != old.pattern:
        return f"changes its pattern from {old.pattern!r} to {new.pattern!r}"
    lower_bounds = (
        ("minLength", old.min_length, new.min_length),
        ("minimum", old.minimum, new.minimum),
    )
    upper_bounds = (
        ("maxLength", old.max_length, new.max_length),
        ("maximum", old.maximum, new.maximum),
        ("maxItems", old.max_items, new.max_items),
    )
    for label, old_bound, new_bound in lower_bounds:
        if new_bound is not None and (old_bound is None or new_bound > old_bound):
            return f"tightens {label} from {old_bound} to {new_bound}"
    for label, old_bound, new_bound in upper_bounds:
        if new_bound is not None and (old_bound is None or new_bound < old_bound):
            return f"tightens {label} from {old_bound} to {new_bound}"
    return None
