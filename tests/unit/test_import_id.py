"""The import id of decision 0017 rule 5, as a table of valid and invalid inputs."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from takoform_operator.core.errors import InvalidImportId
from takoform_operator.core.import_id import (
    VALID_IMPORT_ID_HELP,
    ImportTarget,
    canonical_import_id,
    parse_import_id,
)
from takoform_spec.errors import InvalidSpaceId
from takoform_spec.identity import FormRef, validate_space_id

DEFAULT = FormRef("storage.takoform.io/v1", "Bucket", "1.1.0", "sha256:" + "11" * 32)
OLDER = FormRef("storage.takoform.io/v1", "Bucket", "1.0.0", "sha256:" + "10" * 32)
OLDER_MEMBERS = OLDER.to_json()


def obj(**members: object) -> str:
    return json.dumps(members, ensure_ascii=False)


def canonical(**extra: object) -> str:
    return obj(**{**OLDER_MEMBERS, **extra})


def without(member: str, **extra: object) -> str:
    members = {**OLDER_MEMBERS, **extra}
    del members[member]
    return obj(**members)


def exact(space: str | None, name: str) -> ImportTarget:
    """The target of an id that names the exact (older) FormRef."""
    return ImportTarget(space, name, OLDER, resolved_to_default=False)


def defaulted(space: str | None, name: str) -> ImportTarget:
    """The target of an id without a FormRef: the default create ref."""
    return ImportTarget(space, name, DEFAULT, resolved_to_default=True)


VALID_CASES = [
    pytest.param(
        canonical(space="team-a", name="logs"),
        exact("team-a", "logs"),
        id="canonical JSON with space names the exact (older) ref, never the default",
    ),
    pytest.param(
        canonical(name="logs"),
        exact(None, "logs"),
        id="canonical JSON without space",
    ),
    pytest.param(
        canonical(space="équipe données", name="logs"),
        exact("équipe données", "logs"),
        id="canonical JSON with a unicode space containing a blank",
    ),
    pytest.param(
        '  {"name":"logs","schemaDigest":"' + OLDER.schema_digest + '","definitionVersion":'
        '"1.0.0","kind":"Bucket","apiVersion":"storage.takoform.io/v1"}  ',
        exact(None, "logs"),
        id="member order and surrounding whitespace do not matter",
    ),
    pytest.param(
        "logs",
        defaulted(None, "logs"),
        id="short NAME resolves to the default create ref",
    ),
    pytest.param(
        "team-a/logs",
        defaulted("team-a", "logs"),
        id="short SPACE/NAME resolves to the default create ref",
    ),
    pytest.param(
        "Équipe Données/logs",
        defaulted("Équipe Données", "logs"),
        id="short form with a unicode, case-sensitive space containing a blank",
    ),
    pytest.param(
        obj(name="logs"),
        defaulted(None, "logs"),
        id="JSON form with none of the four FormRef members: the default create ref",
    ),
    pytest.param(
        obj(space="team-a", name="logs"),
        defaulted("team-a", "logs"),
        id="JSON form with space and name only: the default create ref",
    ),
]


def test_json_form_without_formref_needs_a_default_create_ref() -> None:
    with pytest.raises(InvalidImportId, match="no default create ref"):
        parse_import_id(obj(name="logs"), None)


@pytest.mark.parametrize(("text", "expected"), VALID_CASES)
def test_valid_import_ids(text: str, expected: ImportTarget) -> None:
    assert parse_import_id(text, DEFAULT) == expected


INVALID_CASES = [
    # -- the canonical JSON form ---------------------------------------------------------------
    pytest.param(without("apiVersion", name="logs"), id="3 of 4 FormRef members: no apiVersion"),
    pytest.param(without("kind", name="logs"), id="3 of 4 FormRef members: no kind"),
    pytest.param(
        without("definitionVersion", name="logs"), id="3 of 4 FormRef members: no version"
    ),
    pytest.param(without("schemaDigest", name="logs"), id="3 of 4 FormRef members: no digest"),
    pytest.param(
        obj(apiVersion=OLDER.api_version, kind="Bucket", name="logs"),
        id="2 of 4 FormRef members",
    ),
    pytest.param(obj(kind="Bucket", name="logs"), id="1 of 4 FormRef members"),
    pytest.param(canonical(), id="no name"),
    pytest.param(canonical(name="logs", uid="abc"), id="unknown member uid"),
    pytest.param(
        canonical(name="logs", packageDigest="sha256:" + "0" * 64),
        id="unknown member packageDigest (audit evidence is not identity)",
    ),
    pytest.param(canonical(name=7), id="name is a number"),
    pytest.param(canonical(name=None), id="name is null"),
    pytest.param(canonical(name=["logs"]), id="name is an array"),
    pytest.param(canonical(name={"n": "logs"}), id="name is an object"),
    pytest.param(canonical(name=True), id="name is a boolean"),
    pytest.param(canonical(space=1, name="logs"), id="space is a number"),
    pytest.param(canonical(space=None, name="logs"), id="space is null, not omitted"),
    pytest.param(canonical(definitionVersion=1, name="logs"), id="definitionVersion is a number"),
    pytest.param(canonical(schemaDigest=None, name="logs"), id="schemaDigest is null"),
    pytest.param(canonical(kind=["Bucket"], name="logs"), id="kind is an array"),
    pytest.param(canonical(name="logs")[:-1] + ',"name":"other"}', id="duplicate name"),
    pytest.param(canonical(name="logs")[:-1] + ',"kind":"Bucket"}', id="duplicate FormRef member"),
    pytest.param(canonical(name="logs") + "x", id="trailing garbage"),
    pytest.param(canonical(name="logs") + "{}", id="a second object after the first"),
    pytest.param(canonical(name="logs")[:-1], id="unterminated object"),
    pytest.param("{}", id="empty object"),
    pytest.param(
        canonical(name="logs").replace('"name"', "'name'"), id="single quotes are not JSON"
    ),
    pytest.param(canonical(definitionVersion="1.0", name="logs"), id="malformed version"),
    pytest.param(canonical(schemaDigest="sha256:abc", name="logs"), id="malformed digest"),
    pytest.param(canonical(kind="bucket", name="logs"), id="malformed kind"),
    pytest.param(canonical(space="", name="logs"), id="empty space"),
    pytest.param(canonical(space="a/b", name="logs"), id="space containing /"),
    pytest.param(canonical(name="Logs"), id="invalid resource name"),
    pytest.param(canonical(name="logs\n"), id="resource name with a trailing newline"),
    pytest.param(json.dumps([OLDER_MEMBERS]), id="a JSON array, not an object"),
    pytest.param(json.dumps("logs"), id="a JSON string, not an object"),
    pytest.param('{"name": 1' + "0" * 5000 + "}", id="an integer too long to convert"),
    pytest.param("{" + '"a":{' * 50_000, id="nesting deeper than the parser's recursion limit"),
    # -- empty and the short forms -------------------------------------------------------------
    pytest.param("", id="empty"),
    pytest.param("   ", id="blank"),
    pytest.param("a/b/logs", id="SPACE/NAME with more than one /"),
    pytest.param("/logs", id="SPACE/NAME with an empty space"),
    pytest.param("team-a/", id="SPACE/NAME with an empty name"),
    pytest.param("/", id="only a slash"),
    pytest.param("Logs", id="short NAME that is not a valid resource name"),
    pytest.param("logs\n", id="short NAME with a trailing newline"),
    pytest.param("team-a/lo gs", id="short name with a blank"),
]


@pytest.mark.parametrize("text", INVALID_CASES)
def test_invalid_import_ids_are_rejected_with_help(text: str) -> None:
    with pytest.raises(InvalidImportId) as caught:
        parse_import_id(text, DEFAULT)
    assert VALID_IMPORT_ID_HELP in str(caught.value)


@pytest.mark.parametrize("text", ["logs", "team-a/logs"])
def test_short_form_needs_a_default_create_ref(text: str) -> None:
    with pytest.raises(InvalidImportId) as caught:
        parse_import_id(text, None)
    assert VALID_IMPORT_ID_HELP in str(caught.value)


def test_canonical_form_needs_no_default_create_ref() -> None:
    target = parse_import_id(canonical(name="logs"), None)
    assert target.form_ref == OLDER
    assert not target.resolved_to_default


@pytest.mark.parametrize("text", [None, 7, b"logs"])
def test_non_string_import_id_is_rejected(text: object) -> None:
    with pytest.raises(InvalidImportId):
        parse_import_id(text, DEFAULT)  # type: ignore[arg-type]


def test_help_says_what_a_valid_id_looks_like() -> None:
    for part in ("NAME", "SPACE/NAME", '"schemaDigest"', '"definitionVersion"', "space optional"):
        assert part in VALID_IMPORT_ID_HELP


def test_the_help_example_is_itself_almost_valid() -> None:
    """The JSON object shown in the help parses once its digest placeholder is filled in."""
    start, end = VALID_IMPORT_ID_HELP.index("{"), VALID_IMPORT_ID_HELP.index("}") + 1
    example = VALID_IMPORT_ID_HELP[start:end]
    filled = example.replace("sha256:<64 hex>", "sha256:" + "0" * 64)
    target = parse_import_id(filled, None)
    assert (target.space, target.name, target.form_ref.kind) == ("team-a", "logs", "Bucket")


# -- properties -------------------------------------------------------------------------------


def _valid_space(space: str) -> bool:
    try:
        validate_space_id(space)
    except InvalidSpaceId:
        return False
    return True


#: Every SpaceID the spec admits (takoform_spec.identity.validate_space_id).
spaces = st.text(min_size=1).filter(_valid_space)
names = st.from_regex(r"[a-z0-9]([a-z0-9.-]{0,20}[a-z0-9])?", fullmatch=True)
refs = st.builds(
    FormRef,
    api_version=st.sampled_from(["storage.takoform.io/v1", "dns.takoform.io/v2beta1", "x.io/v1"]),
    kind=st.from_regex(r"[A-Z][A-Za-z0-9]{0,12}", fullmatch=True),
    definition_version=st.tuples(*[st.integers(0, 99)] * 3).map(lambda t: ".".join(map(str, t))),
    schema_digest=st.binary(min_size=32, max_size=32).map(lambda b: "sha256:" + b.hex()),
)


@settings(max_examples=200)
@given(space=st.none() | spaces, name=names, ref=refs)
def test_canonical_import_id_round_trips(space: str | None, name: str, ref: FormRef) -> None:
    text = canonical_import_id(space, name, ref)
    assert parse_import_id(text, DEFAULT) == ImportTarget(space, name, ref, False)
    assert parse_import_id(text, None) == ImportTarget(space, name, ref, False)


@settings(max_examples=200)
@given(space=spaces.filter(lambda s: not s.lstrip().startswith("{")), name=names)
def test_short_form_round_trips(space: str, name: str) -> None:
    target = parse_import_id(f"{space}/{name}", DEFAULT)
    assert target == ImportTarget(space, name, DEFAULT, True)


@settings(max_examples=300)
@given(
    text=st.text()
    | st.builds(lambda s: "{" + s, st.text())
    | st.builds(lambda s: canonical(name="logs")[:-1] + s, st.text()),
    with_default=st.booleans(),
)
def test_arbitrary_text_only_ever_raises_invalid_import_id(text: str, with_default: bool) -> None:
    try:
        parse_import_id(text, DEFAULT if with_default else None)
    except InvalidImportId as exc:
        assert VALID_IMPORT_ID_HELP in str(exc)
