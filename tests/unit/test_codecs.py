"""Codecs (decision 0017 rule 3): one per supported ref, judged by the exact definition."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from takoform_operator.core.codecs import Codec
from takoform_operator.core.errors import (
    CodecError,
    MissingRequiredField,
    UndeclaredField,
    WrongFieldType,
)
from takoform_operator.registry_data import load_registry
from takoform_spec.definitions import FormDefinition
from takoform_spec.identity import FormLine, FormRef

from .strategies import document_strategy

REGISTRY = load_registry()
ALL_REFS = sorted(REGISTRY.supported)
BUCKET = FormLine("storage.takoform.io/v1", "Bucket")


def ref_id(ref: FormRef) -> str:
    return f"{ref.kind}-{ref.definition_version}"


def bucket(version: str) -> FormRef:
    (ref,) = [r for r in REGISTRY.known_refs(BUCKET) if r.definition_version == version]
    return ref


ROUND_TRIP = settings(max_examples=25, suppress_health_check=[HealthCheck.filter_too_much])


# -- round trips for every supported ref -------------------------------------------------------


def test_the_production_registry_has_a_codec_for_every_supported_ref() -> None:
    assert len(ALL_REFS) >= 12
    for ref in ALL_REFS:
        codec = REGISTRY.codec_for(ref)
        assert ref in codec.refs
        assert codec.fields_for(ref) == REGISTRY.lookup(ref).definition.fields


@pytest.mark.parametrize("ref", ALL_REFS, ids=ref_id)
@ROUND_TRIP
@given(data=st.data())
def test_encode_then_decode_round_trips_for_every_ref(ref: FormRef, data: st.DataObject) -> None:
    codec = REGISTRY.codec_for(ref)
    doc = data.draw(document_strategy(codec.fields_for(ref)), label="document")
    encoded = codec.encode(ref, doc)
    assert encoded == doc
    assert codec.decode(ref, encoded) == doc


@pytest.mark.parametrize("ref", ALL_REFS, ids=ref_id)
@ROUND_TRIP
@given(data=st.data())
def test_outputs_decode_for_every_ref(ref: FormRef, data: st.DataObject) -> None:
    codec = REGISTRY.codec_for(ref)
    outputs = data.draw(document_strategy(codec.outputs_for(ref), all_optional=True))
    # Sensitive outputs are split off: never in what goes to status, only in the Secret's part.
    sensitive = {spec.name for spec in codec.outputs_for(ref) if spec.sensitive}
    shown = {name: value for name, value in outputs.items() if name not in sensitive}
    assert codec.decode_outputs(ref, outputs) == shown
    assert codec.decode_sensitive_outputs(ref, outputs) == {
        name: value for name, value in outputs.items() if name in sensitive
    }


@pytest.mark.parametrize("ref", ALL_REFS, ids=ref_id)
@settings(max_examples=5, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_every_required_field_is_required_for_every_ref(ref: FormRef, data: st.DataObject) -> None:
    codec = REGISTRY.codec_for(ref)
    doc = data.draw(document_strategy(codec.fields_for(ref)))
    required = [s.name for s in codec.fields_for(ref) if s.required]
    assert required, f"{ref} declares no required field"
    for name in required:
        partial = {k: v for k, v in doc.items() if k != name}
        for operation in (codec.encode, codec.decode):
            with pytest.raises(MissingRequiredField) as caught:
                operation(ref, partial)
            assert (caught.value.field, caught.value.ref) == (name, ref)


def test_encode_leaves_out_unset_fields_and_decode_treats_null_as_absent() -> None:
    ref = bucket("1.1.0")
    codec = REGISTRY.codec_for(ref)
    doc = {"region": "eu-west-1", "sizeGiB": 10, "versioning": None}
    assert codec.encode(ref, doc) == {"region": "eu-west-1", "sizeGiB": 10}
    assert codec.decode(ref, doc) == {"region": "eu-west-1", "sizeGiB": 10}


# -- one codec per major, shared by additive minors -------------------------------------------


def test_an_additive_minor_shares_its_base_codec_and_a_major_has_its_own() -> None:
    v100, v110, v200 = bucket("1.0.0"), bucket("1.1.0"), bucket("2.0.0")
    shared = REGISTRY.codec_for(v100)
    assert REGISTRY.codec_for(v110) is shared
    assert shared.codec_id == "storage.takoform.io/v1/Bucket@1"
    assert shared.refs == (v100, v110)
    major = REGISTRY.codec_for(v200)
    assert major is not shared
    assert major.codec_id == "storage.takoform.io/v1/Bucket@2"
    assert major.refs == (v200,)


def test_a_shared_codec_judges_each_ref_by_its_exact_definition() -> None:
    v100, v110 = bucket("1.0.0"), bucket("1.1.0")
    codec = REGISTRY.codec_for(v100)
    doc = {"region": "eu-west-1", "sizeGiB": 10, "versioning": True}
    assert codec.decode(v110, doc) == doc
    for operation in (codec.encode, codec.decode):
        with pytest.raises(UndeclaredField) as caught:
            operation(v100, doc)
        assert (caught.value.field, caught.value.ref) == ("versioning", v100)


def test_a_field_the_major_removed_is_undeclared_for_it() -> None:
    v200 = bucket("2.0.0")
    doc = {"region": "eu-west-1", "quota": "500Gi", "sizeGiB": 10}
    with pytest.raises(UndeclaredField) as caught:
        REGISTRY.codec_for(v200).encode(v200, doc)
    assert (caught.value.field, caught.value.ref) == ("sizeGiB", v200)


def test_a_codec_refuses_a_ref_it_does_not_serve() -> None:
    v100, v200 = bucket("1.0.0"), bucket("2.0.0")
    codec: Codec = REGISTRY.codec_for(v100)
    same_version_other_digest = FormRef(v100.api_version, v100.kind, "1.0.0", "sha256:" + "0" * 64)
    for ref in (v200, same_version_other_digest):
        with pytest.raises(KeyError):
            codec.decode(ref, {"region": "eu-west-1", "sizeGiB": 1})


# -- typed errors naming the field and the exact FormRef ---------------------------------------

GOOD_BUCKET_1 = {"region": "eu-west-1", "sizeGiB": 10}
GOOD_BUCKET_2 = {"region": "eu-west-1", "quota": "500Gi"}


def _ref_of(kind: str, version: str) -> FormRef:
    (ref,) = [r for r in ALL_REFS if r.kind == kind and r.definition_version == version]
    return ref


def _definition(ref: FormRef) -> FormDefinition:
    return REGISTRY.lookup(ref).definition


WRONG_VALUES = [
    # (kind, version, base document, field, bad value, reason)
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "sizeGiB", "10", "string for integer"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "sizeGiB", True, "bool is not an integer"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "sizeGiB", 1.5, "float for integer"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "sizeGiB", 0, "below minimum"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "sizeGiB", 1048577, "above maximum"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "region", "EU-WEST-1", "pattern mismatch"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "region", "eu-west-1\n", "pattern is a full match"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "region", 1, "number for string"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "public", "yes", "string for boolean"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "public", 1, "integer for boolean"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "labels", ["team=data"], "array for map (1.x)"),
    ("Bucket", "1.0.0", GOOD_BUCKET_1, "labels", {"team": 1}, "map value of the wrong type"),
    ("Bucket", "2.0.0", GOOD_BUCKET_2, "labels", {"team": "data"}, "map for array (2.x)"),
    ("Bucket", "2.0.0", GOOD_BUCKET_2, "labels", ["x"] * 65, "more than maxItems"),
    ("Bucket", "2.0.0", GOOD_BUCKET_2, "labels", [1], "array item of the wrong type"),
    ("Bucket", "2.0.0", GOOD_BUCKET_2, "access", "everyone", "outside the enum"),
    ("Bucket", "2.0.0", GOOD_BUCKET_2, "quota", "500GB", "pattern mismatch"),
    ("Certificate", "1.0.0", None, "commonName", "", "below minLength"),
    ("Certificate", "1.0.0", None, "commonName", "x" * 65, "above maxLength"),
    ("FirewallRule", "1.0.0", None, "ports", [0], "array item below minimum"),
    ("FirewallRule", "1.0.0", None, "ports", [True], "bool item in an integer array"),
]


@pytest.mark.parametrize(
    ("kind", "version", "base", "field", "value"),
    [pytest.param(*row[:5], id=f"{row[0]}-{row[1]}-{row[3]}: {row[5]}") for row in WRONG_VALUES],
)
def test_wrong_values_are_wrong_field_type_naming_field_and_ref(
    kind: str, version: str, base: dict[str, Any] | None, field: str, value: Any
) -> None:
    ref = _ref_of(kind, version)
    codec = REGISTRY.codec_for(ref)
    doc = {**(base or {}), field: value}
    required = [s.name for s in _definition(ref).fields if s.required and s.name not in doc]
    doc.update(_minimal_required(ref, required))
    for operation in (codec.encode, codec.decode):
        with pytest.raises(WrongFieldType) as caught:
            operation(ref, doc)
        assert (caught.value.field, caught.value.ref) == (field, ref)


def _minimal_required(ref: FormRef, names: list[str]) -> dict[str, Any]:
    known = {
        "commonName": "example.com",
        "issuer": "letsencrypt",
        "network": "main",
        "direction": "ingress",
    }
    return {name: known[name] for name in names}


@pytest.mark.parametrize("doc", [["region"], "region=eu", None, 3], ids=repr)
def test_a_document_that_is_not_an_object_is_wrong_field_type(doc: Any) -> None:
    ref = bucket("1.0.0")
    with pytest.raises(WrongFieldType) as caught:
        REGISTRY.codec_for(ref).decode(ref, doc)
    assert caught.value.ref == ref


def test_codec_errors_share_one_base_type() -> None:
    for error in (UndeclaredField, MissingRequiredField, WrongFieldType):
        assert issubclass(error, CodecError)
