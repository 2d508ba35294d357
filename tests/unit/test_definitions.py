"""Form Definitions: parsing, the computed schemaDigest, and the compatibility rule."""

from __future__ import annotations

import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from takoform_operator.core.registry import Registry
from takoform_spec.catalog import load_catalog, load_definition_file
from takoform_spec.definitions import check_compatibility, schema_digest
from takoform_spec.errors import CatalogError, CompatibilityError

from .synthetic import (
    API_VERSION,
    KIND,
    LINE,
    base_fields,
    build,
    definition_doc,
    field,
    with_field,
)

# -- schemaDigest -----------------------------------------------------------------------------


def test_schema_digest_is_sha256_of_canonical_json_without_package() -> None:
    doc = definition_doc()
    schema = {key: value for key, value in doc.items() if key != "package"}
    canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    expected = "sha256:" + hashlib.sha256(canonical.encode("utf-8")).hexdigest()
    assert build(doc).ref.schema_digest == expected == schema_digest(doc)


def test_changing_a_description_changes_the_schema_digest() -> None:
    doc = definition_doc()
    reworded = with_field(doc, "size", description="Quota of the widget in GiB.")
    assert build(doc).ref.schema_digest != build(reworded).ref.schema_digest
    retitled = {**doc, "description": "Another widget."}
    assert build(doc).ref.schema_digest != build(retitled).ref.schema_digest


def test_changing_only_the_package_block_keeps_the_schema_digest(tmp_path: Path) -> None:
    doc = definition_doc()
    other = copy.deepcopy(doc)
    other["package"] = {"publisher": "mirror.example", "source": "re-signed"}
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(yaml.safe_dump(doc), encoding="utf-8")
    second.write_text(yaml.safe_dump(other), encoding="utf-8")
    a, b = load_definition_file(first), load_definition_file(second)
    assert a.ref == b.ref
    assert a.package_digest != b.package_digest
    assert a.package_digest == "sha256:" + hashlib.sha256(first.read_bytes()).hexdigest()


def test_yaml_key_order_and_layout_do_not_change_the_schema_digest(tmp_path: Path) -> None:
    doc = definition_doc()
    shuffled = {key: doc[key] for key in reversed(list(doc))}
    shuffled["fields"] = [{k: f[k] for k in reversed(list(f))} for f in doc["fields"]]
    first, second = tmp_path / "a.yaml", tmp_path / "b.yaml"
    first.write_text(yaml.safe_dump(doc, sort_keys=True), encoding="utf-8")
    second.write_text(
        "# a comment changes the bytes, not the schema\n"
        + yaml.safe_dump(shuffled, sort_keys=False, default_flow_style=True),
        encoding="utf-8",
    )
    assert first.read_bytes() != second.read_bytes()
    a, b = load_definition_file(first), load_definition_file(second)
    assert a.ref.schema_digest == b.ref.schema_digest
    assert a.package_digest != b.package_digest


def test_field_order_is_part_of_the_schema() -> None:
    """Lists are ordered in canonical JSON: reordering fields is a schema change (documented)."""
    doc = definition_doc()
    reordered = {**doc, "fields": list(reversed(doc["fields"]))}
    assert build(doc).ref.schema_digest != build(reordered).ref.schema_digest


def test_every_catalog_file_digest_is_computed_not_typed() -> None:
    catalog = load_catalog()
    for definition in catalog.definitions:
        assert definition.ref.schema_digest == schema_digest(dict(definition.schema))
        assert "schemaDigest" not in definition.schema


# -- parsing ----------------------------------------------------------------------------------


def _mutated(mutate: Any) -> dict[str, Any]:
    doc = definition_doc()
    mutate(doc)
    return doc


@pytest.mark.parametrize(
    "doc",
    [
        pytest.param(["not", "a", "mapping"], id="not a mapping"),
        pytest.param(_mutated(lambda d: d.pop("kind")), id="missing kind"),
        pytest.param(_mutated(lambda d: d.pop("fields")), id="missing fields"),
        pytest.param(_mutated(lambda d: d.pop("description")), id="missing description"),
        pytest.param(
            _mutated(lambda d: d.update(schemaDigest="sha256:" + "0" * 64)),
            id="a hand-typed schemaDigest is an unknown member",
        ),
        pytest.param(_mutated(lambda d: d.update(definitionVersion="1.0")), id="bad version"),
        pytest.param(_mutated(lambda d: d.update(kind="widget")), id="bad kind"),
        pytest.param(_mutated(lambda d: d.update(fields={})), id="fields not a list"),
        pytest.param(
            _mutated(lambda d: d["fields"].append(field("Size"))), id="field not lowerCamelCase"
        ),
        pytest.param(_mutated(lambda d: d["fields"].append(field("size"))), id="field twice"),
        pytest.param(
            _mutated(lambda d: d["fields"].append({"name": "x", "type": "string"})),
            id="field without description",
        ),
        pytest.param(
            _mutated(lambda d: d["fields"].append(field("x", description="  "))),
            id="field with a blank description",
        ),
        pytest.param(
            _mutated(lambda d: d["fields"].append(field("x", "object"))), id="unknown type"
        ),
        pytest.param(
            _mutated(lambda d: d["fields"].append(field("x", "array"))), id="array without items"
        ),
        pytest.param(
            _mutated(lambda d: d["fields"].append(field("x", "map", values="map"))),
            id="map of a non-scalar",
        ),
        pytest.param(
            _mutated(lambda d: d["fields"].append(field("x", pattern="("))),
            id="pattern that does not compile",
        ),
        pytest.param(
            _mutated(lambda d: d["fields"].append(field("x", format="email"))),
            id="unknown field member",
        ),
        pytest.param(
            _mutated(lambda d: d["outputs"].append(field("y", required=True))),
            id="outputs cannot be required",
        ),
    ],
)
def test_malformed_definitions_are_catalog_errors(doc: Any) -> None:
    with pytest.raises(CatalogError):
        build(doc)


def test_parsed_definition_carries_its_declarations() -> None:
    definition = build(definition_doc())
    size = definition.field("size")
    assert size is not None
    assert (size.type, size.required, size.unit, size.minimum, size.maximum) == (
        "integer",
        True,
        "GiB",
        1,
        100,
    )
    tags = definition.field("tags")
    assert tags is not None and tags.type_label == "array of string"
    assert definition.field("nope") is None
    assert [o.name for o in definition.outputs] == ["endpoint", "port"]
    assert definition.ref.api_version == API_VERSION and definition.ref.kind == KIND


# -- the compatibility rule -------------------------------------------------------------------


def _drop_field(doc: dict[str, Any], name: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["fields"] = [f for f in doc["fields"] if f["name"] != name]
    return doc


def _add_field(doc: dict[str, Any], spec: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["fields"].append(spec)
    return doc


def _drop_output(doc: dict[str, Any], name: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    doc["outputs"] = [o for o in doc["outputs"] if o["name"] != name]
    return doc


def _retype_output(doc: dict[str, Any], name: str, type_: str) -> dict[str, Any]:
    doc = copy.deepcopy(doc)
    for output in doc["outputs"]:
        if output["name"] == name:
            output["type"] = type_
    return doc


BREAKING_CHANGES = [
    pytest.param(lambda d: _drop_field(d, "note"), "note", id="field removed"),
    pytest.param(lambda d: with_field(d, "size", type="number"), "size", id="retyped"),
    pytest.param(
        lambda d: with_field(d, "tags", items="integer"), "tags", id="array items retyped"
    ),
    pytest.param(
        lambda d: with_field(d, "labels", type="array", items="string", values=None),
        "labels",
        id="map retyped to array",
    ),
    pytest.param(lambda d: with_field(d, "size", unit="MiB"), "size", id="unit changed"),
    pytest.param(lambda d: with_field(d, "size", unit=None), "size", id="unit dropped"),
    pytest.param(lambda d: with_field(d, "tier", default="large"), "tier", id="default changed"),
    pytest.param(lambda d: with_field(d, "note", default="hi"), "note", id="default added"),
    pytest.param(lambda d: with_field(d, "note", required=True), "note", id="became required"),
    pytest.param(lambda d: with_field(d, "note", immutable=True), "note", id="became immutable"),
    pytest.param(
        lambda d: with_field(d, "tier", enum=["small", "medium"]), "tier", id="enum narrowed"
    ),
    pytest.param(lambda d: with_field(d, "note", enum=["a"]), "note", id="enum introduced"),
    pytest.param(lambda d: with_field(d, "note", pattern="^[a-z]*$"), "note", id="pattern added"),
    pytest.param(lambda d: with_field(d, "size", minimum=2), "size", id="minimum raised"),
    pytest.param(lambda d: with_field(d, "size", maximum=50), "size", id="maximum lowered"),
    pytest.param(lambda d: with_field(d, "note", maxLength=32), "note", id="maxLength lowered"),
    pytest.param(lambda d: with_field(d, "note", minLength=1), "note", id="minLength introduced"),
    pytest.param(lambda d: with_field(d, "tags", maxItems=5), "tags", id="maxItems lowered"),
    pytest.param(
        lambda d: _add_field(d, field("zone", required=True)), "zone", id="new required field"
    ),
    pytest.param(lambda d: _drop_output(d, "port"), "port", id="output removed"),
    pytest.param(lambda d: _retype_output(d, "port", "string"), "port", id="output retyped"),
]


@pytest.mark.parametrize(("change", "field_name"), BREAKING_CHANGES)
def test_a_bad_minor_is_rejected_naming_line_versions_and_field(
    change: Any, field_name: str
) -> None:
    base = definition_doc("1.0.0")
    minor = change(definition_doc("1.1.0"))
    with pytest.raises(CompatibilityError) as caught:
        check_compatibility([build(base), build(minor)])
    error = caught.value
    assert (error.line, error.older, error.newer, error.field) == (
        LINE,
        "1.0.0",
        "1.1.0",
        field_name,
    )
    # The issue asks for an error naming these, so a reader sees them in the text too.
    for part in (LINE, "1.0.0", "1.1.0", repr(field_name)):
        assert part in str(error)


@pytest.mark.parametrize(("change", "field_name"), BREAKING_CHANGES)
def test_the_same_change_as_a_major_passes(change: Any, field_name: str) -> None:
    definitions = [build(definition_doc("1.0.0")), build(change(definition_doc("2.0.0")))]
    check_compatibility(definitions)
    registry = Registry.from_definitions(definitions, {})
    codec_ids = {registry.codec_for(d.ref).codec_id for d in definitions}
    assert codec_ids == {f"{API_VERSION}/{KIND}@1", f"{API_VERSION}/{KIND}@2"}


def test_a_bad_patch_is_rejected_too() -> None:
    patch = _drop_field(definition_doc("1.0.1"), "note")
    with pytest.raises(CompatibilityError) as caught:
        check_compatibility([build(definition_doc("1.0.0")), build(patch)])
    assert (caught.value.older, caught.value.newer, caught.value.field) == (
        "1.0.0",
        "1.0.1",
        "note",
    )


def test_the_rule_compares_each_minor_with_the_one_before_it() -> None:
    """1.1.0 is fine over 1.0.0, but 1.2.0 removes what 1.1.0 added: 1.1.0 -> 1.2.0 is named."""
    v1 = definition_doc("1.0.0")
    v11 = _add_field(definition_doc("1.1.0"), field("colour"))
    v12 = definition_doc("1.2.0")
    with pytest.raises(CompatibilityError) as caught:
        check_compatibility([build(v12), build(v1), build(v11)])  # any input order
    assert (caught.value.older, caught.value.newer, caught.value.field) == (
        "1.1.0",
        "1.2.0",
        "colour",
    )


def test_a_good_additive_minor_passes() -> None:
    minor = definition_doc("1.1.0")
    minor = _add_field(minor, field("colour", enum=["red", "blue"], default="red"))
    minor = _add_field(minor, field("replicas", "integer", minimum=0))
    minor = with_field(minor, "tier", enum=["small", "medium", "large", "xlarge"])
    minor = with_field(minor, "size", maximum=1000, description="Quota in GiB, now larger.")
    minor = with_field(minor, "note", maxLength=None)
    minor = with_field(minor, "tags", maxItems=20)
    minor["outputs"].append(field("region"))
    definitions = [build(definition_doc("1.0.0")), build(minor)]
    check_compatibility(definitions)
    registry = Registry.from_definitions(definitions, {})
    assert registry.codec_for(definitions[0].ref) is registry.codec_for(definitions[1].ref)


def test_the_catalog_passes_the_compatibility_rule() -> None:
    check_compatibility(load_catalog().definitions)


def test_the_generator_rejects_a_bad_minor_in_a_catalog_directory(tmp_path: Path) -> None:
    """A catalog directory loaded through the production loader refuses a breaking "minor"."""
    folder = tmp_path / "definitions" / "example.takoform.io"
    folder.mkdir(parents=True)
    base = definition_doc("1.0.0", base_fields())
    bad = _drop_field(definition_doc("1.1.0", base_fields()), "size")
    (folder / "widget-1.0.0.yaml").write_text(yaml.safe_dump(base), encoding="utf-8")
    (folder / "widget-1.1.0.yaml").write_text(yaml.safe_dump(bad), encoding="utf-8")
    (tmp_path / "default-creates.yaml").write_text(
        yaml.safe_dump(
            {
                "defaultCreates": [
                    {"apiVersion": API_VERSION, "kind": KIND, "definitionVersion": "1.0.0"}
                ]
            }
        ),
        encoding="utf-8",
    )
    catalog = load_catalog(tmp_path)
    with pytest.raises(CompatibilityError) as caught:
        Registry.from_definitions(catalog.definitions, catalog.default_creates)
    assert caught.value.field == "size"
