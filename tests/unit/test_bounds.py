"""Size bounds of the generated CRDs (issue #20) and the message caps of the operator.

Every string of every generated CRD has a maxLength, every list a maxItems, every map a
maxProperties and a key rule, spec and status alike; the bounds come from the catalog's
bounds.yaml (a definition's own constraint wins), and the generator refuses a schema with a node
left unbounded. Conditions and Event messages are cut below what the CRDs admit.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from takoform_operator import generate
from takoform_operator.core import limits
from takoform_operator.core.registry import Registry
from takoform_operator.generate import tenancy
from takoform_operator.generate.bounds import BOUNDS_POLICY_FILE, check_bounded
from takoform_operator.generate.crd import render_crd
from takoform_spec.bounds import parse_bounds
from takoform_spec.catalog import BOUNDS_FILE, load_catalog
from takoform_spec.errors import CatalogError
from takoform_spec.identity import FormLine

from .synthetic import API_VERSION, KIND, build, definition_doc, field

CATALOG = load_catalog()
FILES = generate.render(CATALOG, with_chart=False)
CRDS = {
    path: yaml.safe_load(text)
    for path, text in FILES.items()
    if path.startswith(f"{generate.CRD_DIR}/")
    # beside them, not CRDs: the admission policies
    and not path.endswith((tenancy.PROTECTION_FILE, BOUNDS_POLICY_FILE))
}
LINE = FormLine(API_VERSION, KIND)


def _nodes(schema: dict[str, Any], path: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node with its path (written apart from the generator's own check)."""
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from _nodes(child, f"{path}.{name}")
    for key in ("items", "additionalProperties"):
        if isinstance(schema.get(key), dict):
            yield from _nodes(schema[key], f"{path}[{key}]")


def _schema(crd: dict[str, Any]) -> dict[str, Any]:
    (version,) = crd["spec"]["versions"]
    root: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return root


def _unbounded(crd: dict[str, Any]) -> list[str]:
    problems = []
    for path, node in _nodes(_schema(crd), ""):
        if path == ".metadata":  # ObjectMeta: the API server bounds it itself
            continue
        kind = node.get("type")
        if kind == "string" and "maxLength" not in node:
            problems.append(f"{path}: string")
        if kind == "array" and "maxItems" not in node:
            problems.append(f"{path}: list")
        if kind == "object" and "additionalProperties" in node:
            rules = " ".join(r["rule"] for r in node.get("x-kubernetes-validations", []))
            if "maxProperties" not in node or "size(k) <=" not in rules:
                problems.append(f"{path}: map")
        if kind == "object" and node.get("x-kubernetes-preserve-unknown-fields"):
            problems.append(f"{path}: free object")
        if kind is None:
            for key in ("maxLength", "maxItems", "maxProperties"):
                if key not in node:
                    problems.append(f"{path}: any type without {key}")
            for key in ("items", "additionalProperties"):
                if node.get(key, {}).get("type") not in ("string", "integer", "number", "boolean"):
                    problems.append(f"{path}: any type whose {key} are not scalars")
    return problems


# -- every node bounded, for every line ----------------------------------------------------------


@pytest.mark.parametrize("path", sorted(CRDS), ids=lambda p: p.split("/")[-1])
def test_every_node_of_every_generated_crd_is_bounded(path: str) -> None:
    crd = CRDS[path]
    assert _unbounded(crd) == []
    assert check_bounded(crd) is crd


def test_the_crds_cover_every_line_and_the_operators_own() -> None:
    kinds = {crd["spec"]["names"]["kind"] for crd in CRDS.values()}
    lines = {d.ref.kind for d in CATALOG.definitions}
    assert lines | {"TakoformHost", "TakoformSpaceGrant", "TakoformBinding"} == kinds


def _parameters(crd: dict[str, Any]) -> dict[str, Any]:
    props: dict[str, Any] = _schema(crd)["properties"]["spec"]["properties"]["parameters"]
    return props["properties"]  # type: ignore[no-any-return]


def _crd_of(kind: str) -> dict[str, Any]:
    return next(c for c in CRDS.values() if c["spec"]["names"]["kind"] == kind)


def test_a_string_without_its_own_bound_gets_the_catalog_default() -> None:
    region = _parameters(_crd_of("Bucket"))["region"]
    assert region["maxLength"] == CATALOG.bounds.string_max_length == 1024


def test_a_definitions_own_tighter_constraint_wins() -> None:
    record = _parameters(_crd_of("Record"))
    assert record["recordName"]["maxLength"] == 253  # declared by the definition
    assert _parameters(_crd_of("Certificate"))["commonName"]["maxLength"] == 64
    # declared maxItems, above and below the default of 64: the definition's own contract
    assert record["values"]["maxItems"] == 100
    assert _parameters(_crd_of("FirewallRule"))["sourceRanges"]["maxItems"] == 256


def test_an_enum_string_is_bounded_by_its_longest_value() -> None:
    access = _parameters(_crd_of("Bucket"))["access"]
    assert access["maxLength"] == len("public-read")


def test_labels_are_kubernetes_labels() -> None:
    labels = _parameters(_crd_of("Volume"))["labels"]
    assert labels["type"] == "object"
    assert labels["maxProperties"] == 64
    assert labels["additionalProperties"] == {"type": "string", "maxLength": 63}
    (rule,) = labels["x-kubernetes-validations"]
    assert rule["rule"].startswith("self.all(k, size(k) <= 317 && k.matches(")


def test_a_field_whose_type_differs_is_a_bounded_union_one_level_deep() -> None:
    labels = _parameters(_crd_of("Bucket"))["labels"]
    assert "type" not in labels and labels["x-kubernetes-preserve-unknown-fields"] is True
    assert labels["maxProperties"] == 64 and labels["maxItems"] == 64
    assert labels["additionalProperties"] == {"type": "string", "maxLength": 63}
    assert labels["items"] == {"type": "string", "maxLength": 381}
    assert labels["maxLength"] == 381


def test_status_is_bounded_too() -> None:
    status = _schema(_crd_of("Bucket"))["properties"]["status"]["properties"]
    message = status["conditions"]["items"]["properties"]["message"]
    assert message["maxLength"] == limits.CONDITION_MESSAGE_MAX_LENGTH
    assert status["conditions"]["maxItems"] == limits.CONDITIONS_MAX_ITEMS
    assert status["remedies"]["maxItems"] == limits.REMEDIES_MAX_ITEMS
    endpoint = status["outputs"]["properties"]["endpoint"]
    assert endpoint["maxLength"] == limits.OUTPUT_STRING_MAX_LENGTH


# -- synthetic definitions: defaults, tighter wins, ceilings, failures ---------------------------


def _render(fields: list[dict[str, Any]], bounds: Any = None) -> dict[str, Any]:
    definition = build(definition_doc(fields=fields))
    registry = Registry.from_definitions([definition], {LINE: "1.0.0"})
    text = render_crd(LINE, [definition], registry, bounds or CATALOG.bounds)
    return yaml.safe_load(text)  # type: ignore[no-any-return]


def test_defaults_apply_and_a_tighter_definition_wins_for_each_kind() -> None:
    params = _parameters(
        _render(
            [
                field("loose"),
                field("tight", maxLength=10),
                field("tags", "array", items="string"),
                field("few", "array", items="string", maxItems=3, maxLength=5),
                field("meta", "map", values="string"),
                field("sizes", "map", values="integer"),
            ]
        )
    )
    bounds = CATALOG.bounds
    assert params["loose"]["maxLength"] == bounds.string_max_length
    assert params["tight"]["maxLength"] == 10
    assert params["tags"]["maxItems"] == bounds.list_max_items
    assert params["tags"]["items"]["maxLength"] == bounds.string_max_length
    assert (params["few"]["maxItems"], params["few"]["items"]["maxLength"]) == (3, 5)
    assert params["meta"]["maxProperties"] == bounds.map.max_properties
    assert params["meta"]["additionalProperties"]["maxLength"] == bounds.string_max_length
    (rule,) = params["sizes"]["x-kubernetes-validations"]
    assert rule["rule"] == f"self.all(k, size(k) <= {bounds.map.key_max_length})"


def test_the_bounds_come_from_the_catalog_file() -> None:
    tighter = dataclasses.replace(CATALOG.bounds, string_max_length=7, list_max_items=2)
    params = _parameters(_render([field("note"), field("tags", "array", items="string")], tighter))
    assert params["note"]["maxLength"] == 7 and params["tags"]["maxItems"] == 2


def test_a_definition_above_the_ceiling_fails_generation() -> None:
    with pytest.raises(CatalogError, match="maxLength 100000 is above the catalog ceiling"):
        _render([field("essay", maxLength=100_000)])
    with pytest.raises(CatalogError, match="maxItems 5000 is above the catalog ceiling"):
        _render([field("many", "array", items="string", maxItems=5000)])


def test_an_unbounded_node_fails_generation_naming_it() -> None:
    crd = copy.deepcopy(_crd_of("Bucket"))
    spec = _schema(crd)["properties"]["spec"]["properties"]
    del spec["parameters"]["properties"]["region"]["maxLength"]
    spec["parameters"]["properties"]["extra"] = {
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": True,
    }
    del spec["parameters"]["properties"]["labels"]["items"]
    with pytest.raises(CatalogError) as caught:
        check_bounded(crd)
    message = str(caught.value)
    assert "buckets.storage.takoform.io" in message and "3 node(s) unbounded" in message
    assert ".spec.parameters.region: a string without maxLength" in message
    assert ".spec.parameters.extra: an object keeping unknown fields" in message
    assert ".spec.parameters.labels: a node of any type without items" in message


def test_a_union_whose_maps_disagree_on_their_values_fails_generation() -> None:
    one = build(definition_doc(fields=[field("knobs", "map", values="string")]))
    two = build(definition_doc(version="2.0.0", fields=[field("knobs", "map", values="integer")]))
    registry = Registry.from_definitions([one, two], {LINE: "2.0.0"})
    with pytest.raises(CatalogError, match="no CRD schema can bound"):
        render_crd(LINE, [one, two], registry, CATALOG.bounds)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda d: d["defaults"]["string"].update(maxLength=0), "positive integer"),
        (lambda d: d["defaults"]["list"].pop("maxItems"), "missing defaults.list.maxItems"),
        (lambda d: d["ceilings"]["string"].update(maxLength=10), "above its ceiling"),
        (lambda d: d.update(extra=1), "unknown top-level"),
        (lambda d: d["conventions"]["labels"]["map"].update(keyPattern="("), "does not compile"),
    ],
)
def test_a_malformed_bounds_file_is_a_catalog_error(change: Any, problem: str) -> None:
    document = yaml.safe_load(BOUNDS_FILE.read_text(encoding="utf-8"))
    change(document)
    with pytest.raises(CatalogError, match=problem):
        parse_bounds(document)


# -- the message caps fit the CRDs ----------------------------------------------------------


def test_the_caps_are_below_what_every_crd_admits_for_a_condition_message() -> None:
    for crd in CRDS.values():
        status = _schema(crd)["properties"].get("status")
        if status is None:
            continue
        message = status["properties"]["conditions"]["items"]["properties"]["message"]
        assert message["maxLength"] > limits.CONDITION_MESSAGE_CAP


def test_every_union_map_has_its_keys_bounded_by_the_policy_beside_the_crds() -> None:
    files = generate.render(CATALOG, with_chart=True)
    policy, _binding = yaml.safe_load_all(files[f"{generate.CRD_DIR}/{BOUNDS_POLICY_FILE}"])
    policy = policy["spec"]
    expressions = [v["expression"] for v in policy["validations"]]
    (match,) = policy["matchConstraints"]["resourceRules"]
    unions = 0
    for crd in CRDS.values():
        if crd["spec"]["group"] == "operator.takoform.io":
            continue
        plural, group = crd["spec"]["names"]["plural"], crd["spec"]["group"]
        for name, node in _parameters(crd).items():
            if "type" in node or "additionalProperties" not in node:
                continue
            unions += 1
            assert plural in match["resources"] and group in match["apiGroups"]
            assert any(
                f'request.resource.resource == "{plural}"' in e
                and f"object.spec.parameters.{name}.all(k, size(k) <= 317" in e
                for e in expressions
            ), (plural, name)
    assert unions == len(expressions) == 1  # a Bucket's labels, today


def test_docs_operator_states_the_limits_the_code_has() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "operator.md").read_text()
    section = text.split("### Size limits", 1)[1].split("\n## ", 1)[0]
    labels = CATALOG.bounds.conventions["labels"].map
    assert labels is not None
    for value in (
        CATALOG.bounds.string_max_length,
        CATALOG.bounds.list_max_items,
        CATALOG.bounds.map.max_properties,
        labels.key_max_length,
        labels.value_max_length,
        limits.SPACE_MAX_LENGTH,
        limits.IMPORT_ID_MAX_LENGTH,
    ):
        assert f"{value:,}" in section, value
    events = text.split("\n## Events", 1)[1].split("\n## ", 1)[0]
    for value in (
        limits.EVENT_MESSAGE_CAP,
        limits.CONDITION_MESSAGE_CAP,
        limits.CONDITION_MESSAGE_MAX_LENGTH,
    ):
        assert f"{value:,}" in events, value
