"""The catalog's size bounds (catalog/bounds.yaml) as data: defaults, ceilings, conventions.

Every string, list and map of a Form's desired fields gets a bound in the generated CRD: the
definition's own constraint when it declares one, else the catalog default; a definition whose
own constraint is above the catalog ceiling is refused. A convention names a field that means
the same wherever it is declared (`labels`: Kubernetes labels) and bounds it as such.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from .errors import CatalogError


@dataclass(frozen=True)
class MapBounds:
    max_properties: int
    key_max_length: int
    key_pattern: str | None = None
    #: Bounds the values when they are strings (else the string default applies).
    value_max_length: int | None = None


@dataclass(frozen=True)
class ListBounds:
    max_items: int
    #: Bounds the items when they are strings (else the string default applies).
    item_max_length: int | None = None


@dataclass(frozen=True)
class Convention:
    """How a field of this name is bounded in every line that declares it."""

    map: MapBounds | None = None
    list: ListBounds | None = None


@dataclass(frozen=True)
class Bounds:
    string_max_length: int
    list_max_items: int
    map: MapBounds
    ceiling_string_max_length: int
    ceiling_list_max_items: int
    ceiling_map_max_properties: int
    conventions: dict[str, Convention]


def _positive(document: Any, path: str, source: str) -> int:
    value: Any = document
    for key in path.split("."):
        if not isinstance(value, dict) or key not in value:
            raise CatalogError(f"{source}: missing {path}")
        value = value[key]
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise CatalogError(f"{source}: {path} must be a positive integer, got {value!r}")
    return value


def _optional_positive(document: dict[str, Any], key: str, where: str) -> int | None:
    if key not in document:
        return None
    return _positive(document, key, where)


def _map_bounds(document: Any, where: str) -> MapBounds:
    if not isinstance(document, dict):
        raise CatalogError(f"{where}: must be a mapping")
    unknown = sorted(
        set(document) - {"maxProperties", "keyMaxLength", "keyPattern", "valueMaxLength"}
    )
    if unknown:
        raise CatalogError(f"{where}: unknown member(s) {unknown}")
    pattern = document.get("keyPattern")
    if pattern is not None:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as exc:
            raise CatalogError(f"{where}: keyPattern does not compile: {exc}") from None
    return MapBounds(
        max_properties=_positive(document, "maxProperties", where),
        key_max_length=_positive(document, "keyMaxLength", where),
        key_pattern=pattern,
        value_max_length=_optional_positive(document, "valueMaxLength", where),
    )


def _list_bounds(document: Any, where: str) -> ListBounds:
    if not isinstance(document, dict):
        raise CatalogError(f"{where}: must be a mapping")
    unknown = sorted(set(document) - {"maxItems", "itemMaxLength"})
    if unknown:
        raise CatalogError(f"{where}: unknown member(s) {unknown}")
    return ListBounds(
        max_items=_positive(document, "maxItems", where),
        item_max_length=_optional_positive(document, "itemMaxLength", where),
    )


def parse_bounds(document: Any, source: str = "bounds.yaml") -> Bounds:
    if not isinstance(document, dict):
        raise CatalogError(f"{source}: must hold one mapping")
    unknown = sorted(set(document) - {"defaults", "ceilings", "conventions"})
    if unknown:
        raise CatalogError(f"{source}: unknown top-level member(s) {unknown}")
    conventions: dict[str, Convention] = {}
    for name, entry in (document.get("conventions") or {}).items():
        where = f"{source}: conventions.{name}"
        if not isinstance(entry, dict) or not set(entry) <= {"map", "list"} or not entry:
            raise CatalogError(f"{where}: must hold map and/or list bounds")
        conventions[str(name)] = Convention(
            map=_map_bounds(entry["map"], f"{where}.map") if "map" in entry else None,
            list=_list_bounds(entry["list"], f"{where}.list") if "list" in entry else None,
        )
    defaults = document.get("defaults")
    bounds = Bounds(
        string_max_length=_positive(document, "defaults.string.maxLength", source),
        list_max_items=_positive(document, "defaults.list.maxItems", source),
        map=_map_bounds(
            defaults.get("map") if isinstance(defaults, dict) else None, f"{source}: defaults.map"
        ),
        ceiling_string_max_length=_positive(document, "ceilings.string.maxLength", source),
        ceiling_list_max_items=_positive(document, "ceilings.list.maxItems", source),
        ceiling_map_max_properties=_positive(document, "ceilings.map.maxProperties", source),
        conventions=conventions,
    )
    for label, default, ceiling in (
        ("string maxLength", bounds.string_max_length, bounds.ceiling_string_max_length),
        ("list maxItems", bounds.list_max_items, bounds.ceiling_list_max_items),
        ("map maxProperties", bounds.map.max_properties, bounds.ceiling_map_max_properties),
    ):
        if default > ceiling:
            raise CatalogError(f"{source}: the default {label} {default} is above its ceiling")
    return bounds
