"""Bounds no generated node goes without: the check every generated CRD passes, and the
admission policy for what no CRD schema can bound (the keys of a union's map shape).

`check_bounded` refuses any generated schema with a node left unbounded, so the generator fails
rather than ship one (issue #20).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from takoform_operator.core.tenancy import GROUP
from takoform_operator.generate.documents import admission_policy
from takoform_operator.generate.fields import FieldBounds, key_rule, merged_fields
from takoform_spec.bounds import Bounds
from takoform_spec.definitions import FormDefinition
from takoform_spec.errors import CatalogError
from takoform_spec.identity import FormLine, plural_of

# -- what no CRD schema can bound: the keys of a union's map shape ------------------------------


#: The file beside the CRDs (crds/ and the chart's crds/) that holds the bounds policy.
BOUNDS_POLICY_FILE = "form-bounds.yaml"
#: The name of that ValidatingAdmissionPolicy and of its binding.
BOUNDS_POLICY = f"form-bounds.{GROUP}"


@dataclass(frozen=True)
class KeyRule:
    """One admission rule of the bounds policy: the resource it guards and its CEL."""

    group: str
    resource: str
    expression: str
    message: str


def union_key_rules(
    line: FormLine, definitions: Sequence[FormDefinition], bounds: Bounds
) -> list[KeyRule]:
    """The admission rules bounding the keys of each desired field whose type differs between
    definitions and that one of them declares a map: a CRD's CEL rule cannot see a node
    without a type (the API server refuses such a CRD), an admission policy sees the object as
    it is. They ship with the CRDs as a ValidatingAdmissionPolicy (bounds_policy). Each rule
    ratchets: an update that leaves the field as stored passes, so an object stored before the
    rule (or under a looser one) can still lose its finalizer and be deleted."""
    rules = []
    resource = plural_of(line.kind)
    guard = (
        f"request.resource.group == {json.dumps(line.group)} && "
        f"request.resource.resource == {json.dumps(resource)}"
    )
    for field in merged_fields(definitions):
        if field.types_agree or not any(s.type == "map" for s in field.declarations.values()):
            continue
        sized = FieldBounds(field.name, field.declarations, bounds)
        _, key_length, key_pattern = sized.map_bounds()
        value = f"object.spec.parameters.{field.name}"
        old = f"oldObject.spec.parameters.{field.name}"
        unchanged = (
            "oldObject != null && has(oldObject.spec) && has(oldObject.spec.parameters) && "
            f"has({old}) && {old} == {value}"
        )
        keys = key_rule(key_length, key_pattern, f"{line.kind} spec.parameters.{field.name} keys")
        expression = (
            f"!({guard}) || !has(object.spec.parameters) || !has({value}) || "
            f"type({value}) != map || ({unchanged}) || "
            + keys["rule"].replace("self.", f"{value}.", 1)
        )
        rules.append(KeyRule(line.group, resource, expression, keys["message"]))
    return rules


def bounds_policy(rules: Sequence[KeyRule]) -> list[dict[str, Any]]:
    """The ValidatingAdmissionPolicy of `rules` and its binding (BOUNDS_POLICY_FILE), shipped
    with the CRDs: `make crds-upgrade` and a CRD-only install have it too, and the chart never
    renders it a second time."""
    return admission_policy(
        BOUNDS_POLICY,
        {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": sorted({rule.group for rule in rules}),
                        "apiVersions": ["*"],
                        "operations": ["CREATE", "UPDATE"],
                        "resources": sorted({rule.resource for rule in rules}),
                    }
                ]
            },
            "validations": [
                {"expression": rule.expression, "message": rule.message} for rule in rules
            ],
        },
    )


# -- the unbounded-node check -------------------------------------------------------------------


def unbounded_nodes(schema: Any, path: str = "") -> list[str]:
    """Where `schema` leaves a string without maxLength, a list without maxItems, a map without
    maxProperties (or its keys without a length rule), or a node free to nest."""
    if not isinstance(schema, dict):
        return [f"{path or '<root>'}: not a schema"]
    problems: list[str] = []
    here = path or "<root>"
    kind = schema.get("type")
    free = schema.get("x-kubernetes-preserve-unknown-fields") is True
    if kind is None:
        if not free and not schema.get("x-kubernetes-int-or-string"):
            problems.append(f"{here}: no type")
        if "maxLength" not in schema:
            problems.append(f"{here}: a node of any type without maxLength")
        if free:
            for key in ("maxItems", "maxProperties", "items", "additionalProperties"):
                if key not in schema and not schema.get("x-kubernetes-int-or-string"):
                    problems.append(f"{here}: a node of any type without {key}")
            for key in ("items", "additionalProperties"):
                child = schema.get(key)
                if isinstance(child, dict) and child.get("type") in ("object", "array", None):
                    problems.append(f"{here}.{key}: a node of any type must hold scalars")
    if kind == "string" and "maxLength" not in schema:
        problems.append(f"{here}: a string without maxLength")
    if kind == "array" and "maxItems" not in schema:
        problems.append(f"{here}: a list without maxItems")
    if kind == "object":
        if free:
            problems.append(f"{here}: an object keeping unknown fields (any depth, any size)")
        if "additionalProperties" in schema:
            if "maxProperties" not in schema:
                problems.append(f"{here}: a map without maxProperties")
            rules = [r.get("rule", "") for r in schema.get("x-kubernetes-validations", [])]
            if not any(rule.startswith("self.all(k, size(k) <= ") for rule in rules):
                problems.append(f"{here}: a map whose keys have no length rule")
    for name, child in (schema.get("properties") or {}).items():
        problems += unbounded_nodes(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        child = schema.get(key)
        if isinstance(child, dict):
            problems += unbounded_nodes(child, f"{path}.{key}" if path else key)
    return problems


def check_bounded(crd: dict[str, Any]) -> dict[str, Any]:
    """`crd` if every node of every version's schema is bounded (metadata is the API server's
    ObjectMeta, bounded by it); else a CatalogError naming each unbounded node."""
    name = crd.get("metadata", {}).get("name", "<crd>")
    problems = []
    for version in crd["spec"]["versions"]:
        root = dict(version["schema"]["openAPIV3Schema"])
        properties = {k: v for k, v in root.get("properties", {}).items() if k != "metadata"}
        problems += unbounded_nodes({**root, "properties": properties})
    if problems:
        raise CatalogError(
            f"{name}: the generated schema leaves {len(problems)} node(s) unbounded (every "
            "string needs maxLength, every list maxItems, every map maxProperties and a key "
            "rule; takoform_spec/catalog/bounds.yaml or core.limits give them):\n  "
            + "\n  ".join(problems)
        )
    return crd
