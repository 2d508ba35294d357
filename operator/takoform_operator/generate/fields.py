"""The schema of a Form line's desired fields (a CRD's spec.parameters), from its definitions.

`merged_fields` is the union of the fields every supported definition declares; `field_schema`
is the schema of one of them. Every string, list and map is bounded (issue #20: one tenant's CR
must not exhaust or crash the operator): by the definition's own constraint, else by the
catalog's bounds (takoform_spec/catalog/bounds.yaml). A field whose type differs between
definitions is a bounded union (`_union_schema`); the keys of its map shape, which no CRD schema
can bound, are the admission policy's (generate.bounds).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from takoform_spec.bounds import Bounds, Convention
from takoform_spec.definitions import FieldSpec, FormDefinition
from takoform_spec.errors import CatalogError

# -- merged field view across a line's definitions ---------------------------------------------


@dataclass(frozen=True)
class MergedField:
    """One Form field as the CRD sees it: the union over every supported definition."""

    name: str
    #: definitionVersion -> the declaration in that definition (only those declaring it).
    declarations: dict[str, FieldSpec]
    all_versions: tuple[str, ...]

    @property
    def types_agree(self) -> bool:
        return len({spec.type_label for spec in self.declarations.values()}) == 1

    @property
    def required_everywhere(self) -> bool:
        return len(self.declarations) == len(self.all_versions) and all(
            spec.required for spec in self.declarations.values()
        )


def merged_fields(definitions: Sequence[FormDefinition]) -> list[MergedField]:
    ordered = sorted(definitions, key=lambda d: d.version_tuple)
    versions = tuple(d.ref.definition_version for d in ordered)
    names: list[str] = []
    for definition in ordered:
        names.extend(spec.name for spec in definition.fields if spec.name not in names)
    result = []
    for name in names:
        declarations = {}
        for definition in ordered:
            spec = definition.field(name)
            if spec is not None:
                declarations[definition.ref.definition_version] = spec
        result.append(MergedField(name, declarations, versions))
    return result


# -- one field's schema ---------------------------------------------------------------------------


def _scalar_schema(kind: str) -> dict[str, Any]:
    return {"type": kind}


def typed_schema(spec: FieldSpec) -> dict[str, Any]:
    if spec.type == "array":
        return {"type": "array", "items": _scalar_schema(spec.items or "string")}
    if spec.type == "map":
        return {
            "type": "object",
            "additionalProperties": _scalar_schema(spec.values or "string"),
        }
    return _scalar_schema(spec.type)


def _loosest(values: list[Any], pick: Any) -> Any:
    """The loosest bound: none if any definition leaves it open, else min/max of them."""
    if any(v is None for v in values):
        return None
    return pick(values)


def key_rule(max_length: int, pattern: str | None, what: str = "keys") -> dict[str, str]:
    """The rule bounding a map's keys (a schema cannot): their length and, cheaply, syntax."""
    check = f"size(k) <= {max_length}"
    message = f"{what} are at most {max_length} characters long"
    if pattern is not None:
        check += " && k.matches(" + json.dumps(pattern) + ")"
        message = f"{what} are at most {max_length} characters long and match {pattern}"
    return {"rule": f"self.all(k, {check})", "message": message}


class FieldBounds:
    """The bounds of one desired field over the definitions declaring it: each declaration's
    own constraint, else the convention of its name, else the catalog default; the loosest of
    them (the CRD admits what any supported definition admits). A declaration above the
    catalog ceiling is refused."""

    def __init__(self, name: str, declarations: dict[str, FieldSpec], bounds: Bounds) -> None:
        self.name, self.declarations, self.bounds = name, declarations, bounds
        self.convention = bounds.conventions.get(name, Convention())

    def _fail(self, version: str, problem: str) -> CatalogError:
        return CatalogError(f"field {self.name!r} of definition {version}: {problem}")

    def string(self, spec: FieldSpec, version: str, default: int | None = None) -> int:
        """maxLength of the string a declaration holds (itself, its items or its values)."""
        if spec.enum is not None and spec.max_length is None:
            return max(len(str(value)) for value in spec.enum)
        own = spec.max_length
        ceiling = self.bounds.ceiling_string_max_length
        if own is not None and own > ceiling:
            raise self._fail(version, f"maxLength {own} is above the catalog ceiling {ceiling}")
        return own if own is not None else default or self.bounds.string_max_length

    def max_length(self, kind: str | None = None) -> int:
        """maxLength of the strings the declarations (of type `kind`, default all) hold."""
        result = 0
        for version, spec in self.declarations.items():
            if kind is not None and spec.type != kind:
                continue
            default = None
            if spec.type == "array" and self.convention.list is not None:
                default = self.convention.list.item_max_length
            if spec.type == "map" and self.convention.map is not None:
                default = self.convention.map.value_max_length
            result = max(result, self.string(spec, version, default))
        return result

    def max_items(self) -> int:
        result = 0
        for version, spec in self.declarations.items():
            if spec.type != "array":
                continue
            own, ceiling = spec.max_items, self.bounds.ceiling_list_max_items
            if own is not None and own > ceiling:
                raise self._fail(version, f"maxItems {own} is above the catalog ceiling {ceiling}")
            convention = self.convention.list
            default = convention.max_items if convention else self.bounds.list_max_items
            result = max(result, own if own is not None else default)
        return result

    def map_bounds(self) -> tuple[int, int, str | None]:
        """(maxProperties, key maxLength, key pattern) of a map declaration."""
        chosen = self.convention.map or self.bounds.map
        if chosen.max_properties > self.bounds.ceiling_map_max_properties:
            raise CatalogError(
                f"field {self.name!r}: maxProperties {chosen.max_properties} is above the "
                f"catalog ceiling {self.bounds.ceiling_map_max_properties}"
            )
        return chosen.max_properties, chosen.key_max_length, chosen.key_pattern


def _bound_typed(schema: dict[str, Any], field: FieldBounds) -> None:
    """Add the size bounds to the typed schema of a field (its types agree)."""
    target = schema
    if schema["type"] == "array":
        schema["maxItems"] = field.max_items()
        target = schema["items"]
    if schema["type"] == "object":
        max_properties, key_length, key_pattern = field.map_bounds()
        schema["maxProperties"] = max_properties
        schema.setdefault("x-kubernetes-validations", []).append(
            key_rule(key_length, key_pattern, f"{field.name} keys")
        )
        target = schema["additionalProperties"]
    if target["type"] == "string":
        target["maxLength"] = min(target.get("maxLength", field.max_length()), field.max_length())


def _union_schema(field: FieldBounds, description: str) -> dict[str, Any]:
    """A field whose type differs between definitions: one node without a type (the API server
    admits any JSON type there) whose value validations each bound their own type, so the node
    is one level deep and bounded whatever it holds: an object has at most maxProperties
    values of the scalar type its map declarations share, a list at most maxItems items of the
    scalar type its list declarations share, a string at most maxLength characters; numbers
    and booleans are of fixed size. (A CEL rule cannot see a node without a type.) The codec
    of the recorded FormRef judges which shape the document's definition declares."""
    specs = list(field.declarations.values())
    schema: dict[str, Any] = {
        "description": description,
        "x-kubernetes-preserve-unknown-fields": True,
        "maxLength": field.max_length(),
    }
    for kind, member in (("map", "values"), ("array", "items")):
        scalars = {getattr(s, member) for s in specs if s.type == kind}
        if len(scalars) > 1:
            raise CatalogError(
                f"field {field.name!r}: its {kind} declarations hold different types "
                f"({', '.join(sorted(scalars))}), which no CRD schema can bound"
            )
        scalar = scalars.pop() if scalars else "string"
        child: dict[str, Any] = {"type": scalar}
        if scalar == "string":
            child["maxLength"] = field.max_length(kind) or field.bounds.string_max_length
        if kind == "map":
            schema["maxProperties"] = field.map_bounds()[0]
            schema["additionalProperties"] = child
        else:
            schema["maxItems"] = field.max_items() or field.bounds.list_max_items
            schema["items"] = child
    return schema


def field_schema(field: MergedField, bounds: Bounds) -> dict[str, Any]:
    specs = list(field.declarations.values())
    newest = specs[-1]
    versions = ", ".join(field.declarations)
    sized = FieldBounds(field.name, field.declarations, bounds)
    if not field.types_agree:
        by_type = "; ".join(f"{v}: {s.type_label}" for v, s in field.declarations.items())
        return _union_schema(
            sized,
            f"{newest.description} Its type differs between definition versions ({by_type}); "
            "the schema admits each of those shapes, bounded (no nesting), and the codec of the "
            "recorded FormRef judges it.",
        )
    schema = typed_schema(newest)
    description = newest.description
    if newest.unit:
        description += f" Unit: {newest.unit}."
    if newest.default is not None:
        description += f" Host default: {json.dumps(newest.default)}."
    if len(field.declarations) != len(field.all_versions):
        description += f" Declared by definition versions {versions} only."
    schema = {"description": description, **schema}
    target = schema["items"] if newest.type == "array" else schema
    if newest.type == "map":
        target = schema["additionalProperties"]
    enums = [s.enum for s in specs]
    if all(e is not None for e in enums):
        union: list[Any] = []
        for enum in enums:
            union.extend(v for v in enum or () if v not in union)
        target["enum"] = union
    patterns = {s.pattern for s in specs}
    if len(patterns) == 1 and newest.pattern is not None:
        target["pattern"] = newest.pattern
    for key, attr, pick in (
        ("minLength", "min_length", min),
        ("maxLength", "max_length", max),
        ("minimum", "minimum", min),
        ("maximum", "maximum", max),
    ):
        bound = _loosest([getattr(s, attr) for s in specs], pick)
        if bound is not None:
            target[key] = bound
    max_items = _loosest([s.max_items for s in specs], max)
    if max_items is not None:
        schema["maxItems"] = max_items
    _bound_typed(schema, sized)
    if all(s.immutable for s in specs) and len(specs) == len(field.all_versions):
        schema.setdefault("x-kubernetes-validations", []).append(
            {"rule": "self == oldSelf", "message": f"{field.name} is immutable"}
        )
    return schema


def map_key_bounds(field: MergedField, bounds: Bounds) -> tuple[int, str | None]:
    """(maxLength, pattern) of the keys of a field's map shape."""
    _, length, pattern = FieldBounds(field.name, field.declarations, bounds).map_bounds()
    return length, pattern
