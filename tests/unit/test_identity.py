"""Identity vocabulary of decision 0011: FormRef, Form line, SpaceID, host resource names."""

from __future__ import annotations

import dataclasses

import pytest

from takoform_spec.errors import InvalidIdentity, InvalidName, InvalidSpaceId
from takoform_spec.identity import (
    FormLine,
    FormRef,
    parse_definition_version,
    validate_resource_name,
    validate_space_id,
)

API = "storage.takoform.io/v1"
DIGEST = "sha256:" + "ab" * 32


def rows(*table: tuple[object, ...]) -> list[object]:
    """Parametrise rows named by their last member, the reason."""
    return [pytest.param(*row, id=str(row[-1])) for row in table]


VALID = {
    "api_version": API,
    "kind": "Bucket",
    "definition_version": "1.0.0",
    "schema_digest": DIGEST,
}


# -- FormRef ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("member", "value", "reason"),
    rows(
        ("api_version", "storage.takoform.io", "no /VERSION part"),
        ("api_version", "Storage.takoform.io/v1", "groups are lowercase"),
        ("api_version", "storage.takoform.io/1", "a version starts with v"),
        ("api_version", "storage.takoform.io/v1/x", "more than GROUP/VERSION"),
        ("api_version", "", "empty"),
        ("api_version", "storage.takoform.io/v1\n", "a trailing newline is not part of a name"),
        ("kind", "bucket", "kinds are CamelCase"),
        ("kind", "Bucket-2", "kinds are alphanumeric"),
        ("kind", "", "empty"),
        ("kind", "Bucket\n", "a trailing newline is not part of a kind"),
        ("definition_version", "1.0", "not MAJOR.MINOR.PATCH"),
        ("definition_version", "v1.0.0", "no v prefix"),
        ("definition_version", "01.0.0", "no leading zeros"),
        ("definition_version", "1.0.0-rc1", "no pre-release suffix"),
        ("definition_version", "1.0.0\n", "a trailing newline is not part of a version"),
        ("schema_digest", "sha256:" + "AB" * 32, "hex is lowercase"),
        ("schema_digest", "sha256:" + "a" * 63, "63 hex digits"),
        ("schema_digest", "sha512:" + "a" * 64, "only sha256"),
        ("schema_digest", "a" * 64, "no algorithm prefix"),
        ("schema_digest", DIGEST + "\n", "a trailing newline is not part of a digest"),
        ("schema_digest", 42, "not a string"),
    ),
)
def test_form_ref_rejects_malformed_member(member: str, value: object, reason: str) -> None:
    with pytest.raises(ValueError):
        FormRef(**{**VALID, member: value})  # type: ignore[arg-type]


def test_form_ref_is_a_frozen_value_keyed_by_all_four_members() -> None:
    ref = FormRef(**VALID)
    assert ref == FormRef(**VALID)
    assert hash(ref) == hash(FormRef(**VALID))
    assert ref != FormRef(**{**VALID, "schema_digest": "sha256:" + "cd" * 32})
    assert ref != FormRef(**{**VALID, "definition_version": "1.0.1"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        ref.kind = "Volume"  # type: ignore[misc]


def test_form_ref_json_round_trip_and_line() -> None:
    ref = FormRef(**VALID)
    assert ref.to_json() == {
        "apiVersion": API,
        "kind": "Bucket",
        "definitionVersion": "1.0.0",
        "schemaDigest": DIGEST,
    }
    assert FormRef.from_json(ref.to_json()) == ref
    assert ref.line == FormLine(API, "Bucket")
    assert ref.major == 1
    assert FormRef(**{**VALID, "definition_version": "12.3.4"}).major == 12


def test_form_ref_has_no_package_digest_member() -> None:
    """0011: the package digest is audit evidence, never part of the exact identity."""
    names = {f.name for f in dataclasses.fields(FormRef)}
    assert names == {"api_version", "kind", "definition_version", "schema_digest"}


def test_form_ref_str_names_every_member() -> None:
    text = str(FormRef(**VALID))
    for part in (API, "Bucket", "1.0.0", DIGEST):
        assert part in text


# -- Form line --------------------------------------------------------------------------------


def test_form_line_splits_group_and_version() -> None:
    line = FormLine("dns.takoform.io/v1beta2", "Record")
    assert line.group == "dns.takoform.io"
    assert line.version == "v1beta2"
    assert str(line) == "dns.takoform.io/v1beta2 Record"


def test_form_lines_differ_by_kind_and_api_version() -> None:
    assert FormLine(API, "Bucket") == FormLine(API, "Bucket")
    assert FormLine(API, "Bucket") != FormLine(API, "Volume")
    assert FormLine(API, "Bucket") != FormLine("storage.takoform.io/v2", "Bucket")
    assert len({FormLine(API, "Bucket"), FormLine(API, "Bucket")}) == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [("0.0.0", (0, 0, 0)), ("1.2.3", (1, 2, 3)), ("10.20.30", (10, 20, 30))],
)
def test_parse_definition_version(text: str, expected: tuple[int, int, int]) -> None:
    assert parse_definition_version(text) == expected


@pytest.mark.parametrize("text", ["1", "1.2", "1.2.3.4", "a.b.c", "1.2.3\n"], ids=repr)
def test_parse_definition_version_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_definition_version(text)


# -- SpaceID ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("space", "reason"),
    rows(
        ("team-a", "plain ascii"),
        ("Team-A", "case is significant, uppercase allowed"),
        ("équipe données", "unicode and a space inside"),
        ("東京", "non-latin script"),
        ("🐙", "astral-plane character"),
        (" leading and trailing ", "whitespace is opaque content"),
        ("a.b:c@d+e%f", "punctuation other than /"),
        ("{json-looking}", "braces"),
        ("x" * 1000, "no length limit in the identity rule"),
    ),
)
def test_space_id_accepts_opaque_utf8(space: str, reason: str) -> None:
    assert validate_space_id(space) == space


def test_space_id_is_case_sensitive() -> None:
    assert validate_space_id("Team") != validate_space_id("team")


@pytest.mark.parametrize(
    ("space", "reason"),
    rows(
        ("", "empty"),
        ("team/a", "a forbidden character"),
        ("/", "only a forbidden character"),
        (".", "a dot segment: a client would collapse it"),
        ("..", "a dot segment: a client would collapse it into the parent path"),
        ("team\x1b[2J", "a control character"),
        ("team\n", "a newline"),
        ("team\x85", "a C1 control character"),
        ("team/", "trailing slash"),
        ("\ud800", "a lone surrogate is not UTF-8"),
        (None, "not a string"),
        (42, "not a string"),
        (b"team-a", "bytes are not a string"),
    ),
)
def test_space_id_rejects(space: object, reason: str) -> None:
    with pytest.raises(InvalidSpaceId):
        validate_space_id(space)


def test_invalid_space_is_an_invalid_identity_and_a_value_error() -> None:
    with pytest.raises(InvalidIdentity):
        validate_space_id("a/b")
    with pytest.raises(ValueError):
        validate_space_id("")


# -- host resource names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "reason"),
    rows(
        ("logs", "lowercase letters"),
        ("a", "one character"),
        ("0", "a digit alone"),
        ("logs-2024.eu", "dashes and dots inside"),
        ("a" * 253, "the longest allowed"),
    ),
)
def test_resource_name_accepts(name: str, reason: str) -> None:
    assert validate_resource_name(name) == name


@pytest.mark.parametrize(
    ("name", "reason"),
    rows(
        ("", "empty"),
        ("Logs", "uppercase"),
        ("-logs", "starts with a dash"),
        ("logs-", "ends with a dash"),
        (".logs", "starts with a dot"),
        ("lo gs", "space inside"),
        ("lo_gs", "underscore"),
        ("a" * 254, "longer than 253"),
        ("logs\n", "a trailing newline is not part of a name"),
        ("ünicode", "non-ascii"),
        (None, "not a string"),
        (7, "not a string"),
    ),
)
def test_resource_name_rejects(name: object, reason: str) -> None:
    with pytest.raises(InvalidName):
        validate_resource_name(name)
