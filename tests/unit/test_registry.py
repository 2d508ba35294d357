"""The registry (decision 0017 rule 2) and its generated data; fail closed (rule 4)."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from takoform_operator.core.errors import UndeclaredField, UnknownFormRef
from takoform_operator.core.registry import Registry, SupportedForm
from takoform_operator.registry_data import (
    REGISTRY_DATA_FILE,
    load_registry,
    registry_document,
    registry_from_document,
)
from takoform_spec.catalog import load_catalog
from takoform_spec.definitions import FormDefinition, parse_definition
from takoform_spec.errors import CatalogError
from takoform_spec.identity import FormLine, FormRef

from .synthetic import build, definition_doc

BUCKET = FormLine("storage.takoform.io/v1", "Bucket")
OTHER_PACKAGE = "sha256:" + "f" * 64


@pytest.fixture(scope="module")
def production() -> Registry:
    return load_registry()


def bucket(registry: Registry, version: str) -> FormRef:
    (ref,) = [r for r in registry.known_refs(BUCKET) if r.definition_version == version]
    return ref


def bucket_minor(registry: Registry, version: str = "1.2.0", **extra_field: Any) -> FormDefinition:
    """A synthetic additive minor of Bucket 1.1.0: one more optional field."""
    schema = copy.deepcopy(dict(registry.lookup(bucket(registry, "1.1.0")).definition.schema))
    schema["definitionVersion"] = version
    schema["fields"].append(
        {
            "name": "storageClass",
            "type": "string",
            "enum": ["standard", "archive"],
            "description": "Storage class objects are written with.",
            **extra_field,
        }
    )
    return parse_definition(schema, "sha256:" + "5" * 64, f"synthetic bucket {version}")


# -- keys -------------------------------------------------------------------------------------


def test_supported_is_keyed_by_the_whole_form_ref() -> None:
    one = build(definition_doc("1.0.0"))
    reworded = definition_doc("1.0.0", description="Same version, different schema.")
    two = build(reworded)
    assert one.ref.definition_version == two.ref.definition_version
    assert one.ref.schema_digest != two.ref.schema_digest
    registry = Registry.from_definitions([one], {})
    assert registry.is_supported(one.ref)
    assert not registry.is_supported(two.ref)
    with pytest.raises(UnknownFormRef):
        registry.lookup(two.ref)


def test_default_creates_is_keyed_by_the_form_line(production: Registry) -> None:
    assert all(isinstance(line, FormLine) for line in production.default_creates)
    for line, ref in production.default_creates.items():
        assert ref.line == line
        assert production.is_supported(ref)
    assert production.default_create_ref(BUCKET) == bucket(production, "1.1.0")
    assert production.default_create_ref(FormLine("storage.takoform.io/v1", "Nope")) is None


def test_every_supported_value_names_its_own_key(production: Registry) -> None:
    for ref, form in production.supported.items():
        assert isinstance(form, SupportedForm)
        assert form.ref == ref == form.definition.ref


def test_the_package_digest_is_evidence_in_the_value_never_in_the_key() -> None:
    doc = definition_doc("1.0.0")
    ours, theirs = build(doc), build(doc, package_digest=OTHER_PACKAGE)
    assert ours.ref == theirs.ref
    assert ours.package_digest != theirs.package_digest
    registry = Registry.from_definitions([ours], {})
    assert registry.lookup(theirs.ref).package_digest == ours.package_digest
    replaced = registry.register(theirs)
    assert list(replaced.supported) == [ours.ref]
    assert replaced.lookup(ours.ref).package_digest == OTHER_PACKAGE


# -- immutable snapshots ----------------------------------------------------------------------


def test_snapshots_are_read_only_mappings(production: Registry) -> None:
    ref = next(iter(production.supported))
    with pytest.raises(TypeError):
        production.supported[ref] = production.supported[ref]  # type: ignore[index]
    with pytest.raises(TypeError):
        del production.default_creates[BUCKET]  # type: ignore[attr-defined]


def test_a_registry_copies_the_maps_it_is_given() -> None:
    definition = build(definition_doc("1.0.0"))
    form = Registry.from_definitions([definition], {}).lookup(definition.ref)
    supported = {definition.ref: form}
    registry = Registry(supported, {})
    supported.clear()
    assert registry.is_supported(definition.ref)


def test_register_returns_a_new_registry_and_leaves_the_original_unchanged(
    production: Registry,
) -> None:
    before_supported = dict(production.supported)
    before_defaults = dict(production.default_creates)
    minor = bucket_minor(production)
    extended = production.register(minor)
    assert extended is not production
    assert extended.is_supported(minor.ref)
    assert not production.is_supported(minor.ref)
    assert dict(production.supported) == before_supported
    assert dict(production.default_creates) == before_defaults
    assert load_registry().is_supported(minor.ref) is False


# -- a synthetic second definition version through the production registry type ----------------


def test_a_synthetic_additive_minor_shares_the_codec_of_its_major(production: Registry) -> None:
    minor = bucket_minor(production)
    extended = production.register(minor)
    v100, v110, v200 = (bucket(production, v) for v in ("1.0.0", "1.1.0", "2.0.0"))
    codec = extended.codec_for(minor.ref)
    assert codec is extended.codec_for(v100) is extended.codec_for(v110)
    assert codec.codec_id == "storage.takoform.io/v1/Bucket@1"
    assert extended.codec_for(v200) is not codec
    assert extended.known_refs(BUCKET) == sorted([v100, v110, v200, minor.ref])
    # The new field is the minor's alone: 1.1.0 state still decodes by 1.1.0's declarations.
    doc = {"region": "eu-west-1", "sizeGiB": 5, "storageClass": "archive"}
    assert codec.decode(minor.ref, doc) == doc
    with pytest.raises(UndeclaredField) as caught:
        codec.decode(v110, doc)
    assert (caught.value.field, caught.value.ref) == ("storageClass", v110)
    # The snapshot we started from keeps its own codec, which knows nothing of 1.2.0.
    assert minor.ref not in production.codec_for(v110).refs


def test_registering_only_adds_to_supported_and_keeps_the_default_create(
    production: Registry,
) -> None:
    minor = bucket_minor(production)
    extended = production.register(minor)
    assert extended.default_creates == production.default_creates
    assert set(extended.supported) == {*production.supported, minor.ref}


def test_moving_default_creates_changes_only_the_default_create_ref(
    production: Registry,
) -> None:
    extended = production.register(bucket_minor(production))
    minor_ref = bucket(extended, "1.2.0")
    moved = extended.with_default_create(minor_ref)
    assert moved.default_create_ref(BUCKET) == minor_ref
    assert extended.default_create_ref(BUCKET) == bucket(production, "1.1.0")
    assert dict(moved.supported) == dict(extended.supported)
    others = {line: ref for line, ref in moved.default_creates.items() if line != BUCKET}
    assert others == {line: ref for line, ref in extended.default_creates.items() if line != BUCKET}
    # register(..., default_create=True) is the same two acts at once.
    at_once = production.register(bucket_minor(production), default_create=True)
    assert at_once.default_create_ref(BUCKET) == minor_ref


def test_a_breaking_synthetic_minor_cannot_be_registered(production: Registry) -> None:
    breaking = bucket_minor(production, required=True)
    with pytest.raises(CatalogError):
        production.register(breaking)


def test_the_default_create_must_be_a_supported_ref_of_its_line(production: Registry) -> None:
    unknown = FormRef(BUCKET.api_version, BUCKET.kind, "9.0.0", "sha256:" + "9" * 64)
    with pytest.raises(UnknownFormRef):
        production.with_default_create(unknown)
    volume = production.default_create_ref(FormLine("storage.takoform.io/v1", "Volume"))
    assert volume is not None
    with pytest.raises(CatalogError):
        Registry(production.supported, {BUCKET: volume})
    with pytest.raises(CatalogError):
        Registry({}, {BUCKET: bucket(production, "1.0.0")})


# -- fail closed (rule 4) ---------------------------------------------------------------------


def test_an_unknown_ref_fails_closed_naming_it_and_every_known_ref_of_its_kind(
    production: Registry,
) -> None:
    recorded = FormRef(BUCKET.api_version, BUCKET.kind, "1.1.0", "sha256:" + "e" * 64)
    known = production.known_refs(BUCKET)
    assert len(known) == 3
    with pytest.raises(UnknownFormRef) as caught:
        production.lookup(recorded)
    error = caught.value
    assert error.recorded == recorded
    assert error.known == known
    text = str(error)
    assert str(recorded) in text
    for ref in known:
        assert str(ref) in text
    # Only refs of that kind: nothing of another line is listed.
    for ref in production.supported:
        if ref.line != BUCKET:
            assert str(ref) not in text


def test_fail_closed_also_guards_codec_for(production: Registry) -> None:
    recorded = FormRef(BUCKET.api_version, BUCKET.kind, "3.0.0", "sha256:" + "3" * 64)
    with pytest.raises(UnknownFormRef) as caught:
        production.codec_for(recorded)
    assert caught.value.known == production.known_refs(BUCKET)


def test_fail_closed_on_a_line_the_build_does_not_know(production: Registry) -> None:
    recorded = FormRef("storage.takoform.io/v1", "Tape", "1.0.0", "sha256:" + "1" * 64)
    with pytest.raises(UnknownFormRef) as caught:
        production.lookup(recorded)
    assert caught.value.known == []
    assert str(recorded) in str(caught.value)


def test_a_synthetic_version_is_listed_once_registered(production: Registry) -> None:
    minor = bucket_minor(production)
    recorded = FormRef(BUCKET.api_version, BUCKET.kind, "1.3.0", "sha256:" + "d" * 64)
    with pytest.raises(UnknownFormRef) as caught:
        production.register(minor).lookup(recorded)
    assert minor.ref in caught.value.known
    assert str(minor.ref) in str(caught.value)


# -- the generated registry data --------------------------------------------------------------


def test_the_generated_data_matches_the_catalog(production: Registry) -> None:
    catalog = load_catalog()
    from_catalog = Registry.from_definitions(catalog.definitions, catalog.default_creates)
    assert set(production.supported) == set(from_catalog.supported)
    assert dict(production.default_creates) == dict(from_catalog.default_creates)


def test_registry_document_round_trip(production: Registry) -> None:
    catalog = load_catalog()
    document = registry_document(production, catalog.sources)
    again = registry_from_document(json.loads(json.dumps(document)))
    assert set(again.supported) == set(production.supported)
    assert dict(again.default_creates) == dict(production.default_creates)
    for ref, form in production.supported.items():
        assert again.codec_for(ref).codec_id == form.codec.codec_id
        assert again.lookup(ref).package_digest == form.package_digest


def test_registry_document_round_trip_with_a_synthetic_version(production: Registry) -> None:
    extended = production.register(bucket_minor(production), default_create=True)
    again = registry_from_document(registry_document(extended, {}))
    assert set(again.supported) == set(extended.supported)
    assert dict(again.default_creates) == dict(extended.default_creates)


def _committed_document() -> dict[str, Any]:
    document: dict[str, Any] = json.loads(REGISTRY_DATA_FILE.read_text(encoding="utf-8"))
    return document


def _bucket_entry(document: dict[str, Any], version: str) -> dict[str, Any]:
    (entry,) = [
        e
        for e in document["supported"]
        if e["formRef"]["kind"] == "Bucket" and e["formRef"]["definitionVersion"] == version
    ]
    return entry


def _edit_schema(document: dict[str, Any]) -> None:
    _bucket_entry(document, "1.0.0")["schema"]["fields"][0]["description"] = "Edited by hand."


def _edit_digest(document: dict[str, Any]) -> None:
    _bucket_entry(document, "1.0.0")["formRef"]["schemaDigest"] = "sha256:" + "0" * 64


def _edit_codec(document: dict[str, Any]) -> None:
    _bucket_entry(document, "2.0.0")["codec"] = "storage.takoform.io/v1/Bucket@1"


def _edit_default_digest(document: dict[str, Any]) -> None:
    for entry in document["defaultCreates"]:
        if entry["kind"] == "Bucket":
            entry["schemaDigest"] = "sha256:" + "0" * 64


def _edit_default_to_unknown_version(document: dict[str, Any]) -> None:
    for entry in document["defaultCreates"]:
        if entry["kind"] == "Bucket":
            entry["definitionVersion"] = "1.9.0"


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(_edit_schema, id="schema edited, recorded digest not"),
        pytest.param(_edit_digest, id="digest edited, schema not"),
        pytest.param(_edit_codec, id="codec grouping edited"),
        pytest.param(_edit_default_digest, id="default create names a digest nobody has"),
        pytest.param(_edit_default_to_unknown_version, id="default create names no definition"),
    ],
)
def test_a_tampered_registry_document_is_rejected(tamper: Any) -> None:
    document = _committed_document()
    registry_from_document(copy.deepcopy(document))  # the committed data itself loads
    tamper(document)
    with pytest.raises(CatalogError):
        registry_from_document(document)


def test_repr_is_short(production: Registry) -> None:
    assert repr(production).startswith("<Registry ")
