"""Known answers for canonical JSON and the digests, computed outside the code under test.

The operator, the reference host and the conformance suite all use `takoform_spec`, so a bug in
canonical JSON or a digest would agree with itself on every side. These literals do not come from
that code: every canonical byte string is written by hand from docs/schema-digest.md, and every hex
value was computed in a shell, e.g.

    printf '%s' '{"Z":0,"_":0,"a":0,"aa":0}' | sha256sum
    yq 'del(.package)' bucket-1.0.0.yaml | jq -cS . | tr -d '\\n' | sha256sum   # schemaDigest
    sha256sum < bucket-1.0.0.yaml                                                # package digest
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import yaml

from takoform_spec.canonical import canonical_json, sha256_digest
from takoform_spec.catalog import DEFINITIONS_DIR, load_definition_file
from takoform_spec.definitions import package_digest_of, parse_definition, schema_digest

#: (document, its canonical bytes written by hand, sha256 hex of those bytes, why).
CANONICAL = [
    (
        {"b": 1, "a": [True, None, "x"], "é": "ü"},
        '{"a":[true,null,"x"],"b":1,"é":"ü"}'.encode(),
        "35858222abfc6347a985e7a67a14d40bde87950d437a258b483438bdf4d08556",
        "sorted keys, JSON literals, non-ASCII written as itself",
    ),
    (
        {"aa": 0, "a": 0, "_": 0, "Z": 0},
        b'{"Z":0,"_":0,"a":0,"aa":0}',
        "adda5a6a76ee8a27b2df285f4fad7d1c09d98f4c13765238d614c411397b0c47",
        "keys sorted by code point, a prefix before its extensions",
    ),
    (
        {"z": {"y": 1.5, "x": 'q"t\nb'}},
        b'{"z":{"x":"q\\"t\\nb","y":1.5}}',
        "71bf8a4da7463ebfee21aa8a87ff803b59aa26d210fef9d6c03bedc0665258ed",
        "sorted at every depth, quote and control characters escaped, shortest float",
    ),
    (
        {"s": "\U0001f600"},
        b'{"s":"\xf0\x9f\x98\x80"}',
        "f9949e1006d1ca22bc0b60ea94f09779f11a8f0a29bae250fc7ab313d879f5e7",
        "a character beyond the BMP as four UTF-8 bytes, not a surrogate pair",
    ),
]


@pytest.mark.parametrize(
    ("document", "canonical", "hex_digest"),
    [pytest.param(*row[:3], id=row[3]) for row in CANONICAL],
)
def test_canonical_json_and_its_digest(document: Any, canonical: bytes, hex_digest: str) -> None:
    assert canonical_json(document) == canonical
    assert sha256_digest(canonical) == "sha256:" + hex_digest


def test_the_digest_of_nothing() -> None:
    assert sha256_digest(b"") == (
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    )


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_canonical_json_refuses_what_json_cannot_say(number: float) -> None:
    with pytest.raises(ValueError):
        canonical_json({"n": number})


#: A definition file, byte for byte, and what its digests must be.
WIDGET_FILE = (
    b"package:\n"
    b"  publisher: example\n"
    b"apiVersion: example.takoform.io/v1\n"
    b"kind: Widget\n"
    b"definitionVersion: 1.0.0\n"
    b"description: A widget.\n"
    b"fields:\n"
    b"  - name: size\n"
    b"    type: integer\n"
    b"    description: Size.\n"
)
#: Its schema (all but `package`) in canonical form, written by hand.
WIDGET_SCHEMA = (
    b'{"apiVersion":"example.takoform.io/v1","definitionVersion":"1.0.0",'
    b'"description":"A widget.","fields":[{"description":"Size.","name":"size",'
    b'"type":"integer"}],"kind":"Widget"}'
)
WIDGET_SCHEMA_DIGEST = "sha256:a3d1b6b9e5d98ff9cb660e2dbf363ecd933bed9c95fb16708592b7a2027ca56e"
WIDGET_PACKAGE_DIGEST = "sha256:73452393049a94320a78b529672e90ddd9a2849d4cb0552c4b1f532588b26d89"


def test_schema_digest_covers_all_but_the_package() -> None:
    document = yaml.safe_load(WIDGET_FILE)
    assert canonical_json({k: v for k, v in document.items() if k != "package"}) == WIDGET_SCHEMA
    assert schema_digest(document) == WIDGET_SCHEMA_DIGEST
    assert package_digest_of(WIDGET_FILE) == WIDGET_PACKAGE_DIGEST
    definition = parse_definition(document, package_digest_of(WIDGET_FILE), "widget")
    assert definition.ref.schema_digest == WIDGET_SCHEMA_DIGEST
    assert definition.package_digest == WIDGET_PACKAGE_DIGEST


#: Shipped catalog files: (file, schemaDigest, package digest), from yq | jq -cS and sha256sum.
CATALOG = [
    (
        "storage.takoform.io/bucket-1.0.0.yaml",
        "c258de1d884e01245becfc8d76eefe72c2bbe18d4d36a98444462c1fe2641af9",
        "85dc600eecbc7617bdba43cd3c984c12d1b53542557a4c20036e6cb02789caa4",
    ),
    (
        "storage.takoform.io/bucket-1.1.0.yaml",
        "9c8caa2ad1af7c283aed03ab4289c727f40d98fc69c8c6f5a2ac024a129309b5",
        "4bf77019a1af61d6e4131707b10f863c0c866eb53f9fab3302280e8d67624dcf",
    ),
    (
        "storage.takoform.io/bucket-2.0.0.yaml",
        "81b3fc4357931718f6e92674612ff3c15fa6c1ceacf5d5782fb0f5d25bc9c6a3",
        "c1a2468862d0de8d59b480534033f5aeaf058588a09278cab266a40b3f4c7cb0",
    ),
]


@pytest.mark.parametrize(("relative", "schema_hex", "package_hex"), CATALOG)
def test_catalog_digests_match_an_independent_computation(
    relative: str, schema_hex: str, package_hex: str
) -> None:
    definition = load_definition_file(DEFINITIONS_DIR / relative)
    assert definition.ref.schema_digest == "sha256:" + schema_hex
    assert definition.package_digest == "sha256:" + package_hex


def test_the_operator_writes_exactly_the_closed_set_of_condition_types() -> None:
    """0011's closed set is stated once (takoform_spec); the operator's enum is that set, plus
    kstatus's Stalled, which only mirrors Blocked for generic status readers."""
    from takoform_operator.core.conditions import ConditionType
    from takoform_spec.host_api import CONDITION_TYPES

    assert tuple(c for c in ConditionType if c is not ConditionType.STALLED) == CONDITION_TYPES
    assert CONDITION_TYPES == ("Ready", "Reconciling", "Degraded", "Drifted", "Blocked", "Deleting")
