"""Builders of synthetic Form Definitions for unit tests.

Tests build definitions from plain dicts through the same `parse_definition` the catalog loader
uses, so every digest and codec in a test is computed exactly as in production.
"""

from __future__ import annotations

import copy
from typing import Any

from takoform_spec.definitions import FormDefinition, parse_definition

API_VERSION = "example.takoform.io/v1"
KIND = "Widget"
LINE = f"{API_VERSION} {KIND}"
PACKAGE_DIGEST = "sha256:" + "0" * 64


def field(name: str, type_: str = "string", **extra: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "description": f"The {name} of a widget.", **extra}


def base_fields() -> list[dict[str, Any]]:
    """A 1.0.0 field set exercising every kind of constraint the compatibility rule judges."""
    return [
        field("size", "integer", required=True, unit="GiB", minimum=1, maximum=100),
        field("tier", enum=["small", "medium", "large"], default="small"),
        field("note", maxLength=64),
        field("tags", "array", items="string", maxItems=10),
        field("enabled", "boolean", default=False),
        field("labels", "map", values="string"),
    ]


def base_outputs() -> list[dict[str, Any]]:
    return [field("endpoint"), field("port", "integer")]


def definition_doc(
    version: str = "1.0.0",
    fields: list[dict[str, Any]] | None = None,
    outputs: list[dict[str, Any]] | None = None,
    *,
    api_version: str = API_VERSION,
    kind: str = KIND,
    description: str = "A synthetic widget.",
) -> dict[str, Any]:
    return {
        "package": {"publisher": "tests.example", "source": "synthetic"},
        "apiVersion": api_version,
        "kind": kind,
        "definitionVersion": version,
        "description": description,
        "fields": copy.deepcopy(base_fields() if fields is None else fields),
        "outputs": copy.deepcopy(base_outputs() if outputs is None else outputs),
    }


def build(doc: Any, package_digest: str = PACKAGE_DIGEST) -> FormDefinition:
    version = doc.get("definitionVersion") if isinstance(doc, dict) else None
    return parse_definition(doc, package_digest, f"synthetic {version}")


def with_field(doc: dict[str, Any], name: str, **changes: Any) -> dict[str, Any]:
    """A copy of `doc` whose field `name` has `changes` applied (a value of None deletes a key)."""
    doc = copy.deepcopy(doc)
    for spec in doc["fields"]:
        if spec["name"] == name:
            for key, value in changes.items():
                if value is None:
                    spec.pop(key, None)
                else:
                    spec[key] = value
    return doc
