"""Resource identity of decision 0011 and the import id of decision 0017 rule 5.

Pure values and parsers: no I/O, no kopf. Everything else in the project speaks this vocabulary.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from .errors import InvalidImportId, InvalidName, InvalidSpaceId

#: A definition version is a semantic version: MAJOR.MINOR.PATCH.
_DEFINITION_VERSION = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_SCHEMA_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_API_VERSION = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/v[0-9]+((alpha|beta)[0-9]+)?$")
_KIND = re.compile(r"^[A-Z][A-Za-z0-9]*$")
#: Host resource names: what a Kubernetes object may be called too, so a CR can carry it.
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")

VALID_IMPORT_ID_HELP = (
    "a valid import id is NAME, SPACE/NAME, or the JSON object "
    '{"space": "team-a", "apiVersion": "storage.takoform.io/v1", "kind": "Bucket", '
    '"definitionVersion": "1.0.0", "schemaDigest": "sha256:<64 hex>", "name": "logs"} '
    "(space optional; the four FormRef members all or none)"
)


@dataclass(frozen=True, order=True)
class FormLine:
    """A Form line: apiVersion + kind. Keys DefaultCreates; never enough to address state."""

    api_version: str
    kind: str

    def __str__(self) -> str:
        return f"{self.api_version} {self.kind}"

    @property
    def group(self) -> str:
        return self.api_version.split("/", 1)[0]

    @property
    def version(self) -> str:
        return self.api_version.split("/", 1)[1]

    @property
    def plural(self) -> str:
        """The CRD plural of this line's kind (English rules, lower case)."""
        return plural_of(self.kind)


def plural_of(kind: str) -> str:
    lower = kind.lower()
    if lower.endswith(("s", "x", "ch", "sh")):
        return lower + "es"
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return lower[:-1] + "ies"
    return lower + "s"


@dataclass(frozen=True, order=True)
class FormRef:
    """The exact Form identity. The package digest is deliberately not a member (0011)."""

    api_version: str
    kind: str
    definition_version: str
    schema_digest: str

    def __post_init__(self) -> None:
        problems = form_ref_problems(
            self.api_version, self.kind, self.definition_version, self.schema_digest
        )
        if problems:
            raise ValueError("invalid FormRef: " + "; ".join(problems))

    @property
    def line(self) -> FormLine:
        return FormLine(self.api_version, self.kind)

    @property
    def major(self) -> int:
        return int(self.definition_version.split(".", 1)[0])

    def __str__(self) -> str:
        return (
            f"{self.api_version} {self.kind} definitionVersion={self.definition_version} "
            f"schemaDigest={self.schema_digest}"
        )

    def to_json(self) -> dict[str, str]:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "definitionVersion": self.definition_version,
            "schemaDigest": self.schema_digest,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> FormRef:
        return cls(
            api_version=doc["apiVersion"],
            kind=doc["kind"],
            definition_version=doc["definitionVersion"],
            schema_digest=doc["schemaDigest"],
        )


def form_ref_problems(
    api_version: object, kind: object, definition_version: object, schema_digest: object
) -> list[str]:
    """Say what is wrong with the four FormRef members (empty when they are valid)."""
    problems = []
    if not isinstance(api_version, str) or not _API_VERSION.fullmatch(api_version):
        problems.append(f"apiVersion {api_version!r} is not GROUP/VERSION")
    if not isinstance(kind, str) or not _KIND.fullmatch(kind):
        problems.append(f"kind {kind!r} is not a CamelCase name")
    if not isinstance(definition_version, str) or not _DEFINITION_VERSION.fullmatch(
        definition_version
    ):
        problems.append(f"definitionVersion {definition_version!r} is not MAJOR.MINOR.PATCH")
    if not isinstance(schema_digest, str) or not _SCHEMA_DIGEST.fullmatch(schema_digest):
        problems.append(f"schemaDigest {schema_digest!r} is not sha256:<64 lowercase hex>")
    return problems


def parse_definition_version(text: str) -> tuple[int, int, int]:
    match = _DEFINITION_VERSION.fullmatch(text)
    if not match:
        raise ValueError(f"definitionVersion {text!r} is not MAJOR.MINOR.PATCH")
    return int(match[1]), int(match[2]), int(match[3])


def validate_space_id(space: object) -> str:
    """A SpaceID is opaque, case-sensitive UTF-8; `/` is its only forbidden character."""
    if not isinstance(space, str):
        raise InvalidSpaceId(f"space must be a string, got {type(space).__name__}")
    if space == "":
        raise InvalidSpaceId("space must not be empty")
    if "/" in space:
        raise InvalidSpaceId(f"space {space!r} contains '/', the one character a space forbids")
    try:
        space.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidSpaceId(f"space {space!r} is not valid UTF-8") from exc
    return space


def validate_resource_name(name: object) -> str:
    """Host resource names: lowercase DNS-subdomain style, so a CR can share the name."""
    if not isinstance(name, str):
        raise InvalidName(f"name must be a string, got {type(name).__name__}")
    if not _NAME.fullmatch(name):
        raise InvalidName(
            f"name {name!r} must be 1-253 characters of lowercase letters, digits, '-' or '.', "
            "starting and ending with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class ImportTarget:
    """What an import id resolves to: an exact FormRef plus where the resource lives."""

    space: str | None
    name: str
    form_ref: FormRef
    #: True when the id named no FormRef and the line's default create ref was used.
    resolved_to_default: bool


_IMPORT_MEMBERS = ("space", "apiVersion", "kind", "definitionVersion", "schemaDigest", "name")
_FORM_REF_MEMBERS = ("apiVersion", "kind", "definitionVersion", "schemaDigest")


def _reject(problem: str) -> InvalidImportId:
    return InvalidImportId(f"{problem}; {VALID_IMPORT_ID_HELP}")


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: dict[str, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise _reject(f"import id names member {key!r} twice")
        seen[key] = value
    return seen


def parse_import_id(text: str, default_create_ref: FormRef | None) -> ImportTarget:
    """Parse an import id (0017 rule 5).

    `default_create_ref` is the Form line's default create ref, used only for the short forms;
    the canonical JSON form names the exact identity itself. Whether the build can decode the
    resulting ref is the registry's decision, not the parser's.
    """
    if not isinstance(text, str) or text.strip() == "":
        raise _reject("import id is empty")
    if text.lstrip().startswith("{"):
        return _parse_canonical(text, default_create_ref)
    return _parse_short(text, default_create_ref)


def _parse_canonical(text: str, default_create_ref: FormRef | None) -> ImportTarget:
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except InvalidImportId:
        raise
    except json.JSONDecodeError as exc:
        raise _reject(
            f"import id is not one JSON object ({exc.msg} at character {exc.pos})"
        ) from None
    except (ValueError, RecursionError):
        # Python's own limits (huge integers, deep nesting): still just a bad id.
        raise _reject("import id is not one JSON object of string members") from None
    if not isinstance(doc, dict):
        raise _reject("import id JSON must be an object")
    unknown = sorted(set(doc) - set(_IMPORT_MEMBERS))
    if unknown:
        raise _reject(f"import id has unknown member(s) {', '.join(map(repr, unknown))}")
    if "name" not in doc:
        raise _reject("import id has no 'name'")
    for key, value in doc.items():
        if not isinstance(value, str):
            raise _reject(f"import id member {key!r} must be a string, got {type(value).__name__}")
    present = [m for m in _FORM_REF_MEMBERS if m in doc]
    space = _checked_space(doc["space"]) if "space" in doc else None
    if not present:
        # None of the four: like the short forms, the line's default create ref (rule 5).
        if default_create_ref is None:
            raise _reject("import id names no FormRef and this line has no default create ref")
        return ImportTarget(
            space=space,
            name=_checked_name(doc["name"]),
            form_ref=default_create_ref,
            resolved_to_default=True,
        )
    if len(present) != len(_FORM_REF_MEMBERS):
        missing = [m for m in _FORM_REF_MEMBERS if m not in doc]
        raise _reject(
            "the four FormRef members come all or none; missing " + ", ".join(map(repr, missing))
        )
    problems = form_ref_problems(
        doc["apiVersion"], doc["kind"], doc["definitionVersion"], doc["schemaDigest"]
    )
    if problems:
        raise _reject("import id FormRef is invalid: " + "; ".join(problems))
    return ImportTarget(
        space=space,
        name=_checked_name(doc["name"]),
        form_ref=FormRef.from_json(doc),
        resolved_to_default=False,
    )


def _parse_short(text: str, default_create_ref: FormRef | None) -> ImportTarget:
    if default_create_ref is None:
        raise _reject(f"short import id {text!r} needs a default create ref and this line has none")
    space: str | None
    if "/" in text:
        space, _, name = text.rpartition("/")
        if "/" in space:
            raise _reject(f"import id {text!r} has more than one '/'")
        space = _checked_space(space)
    else:
        space, name = None, text
    return ImportTarget(
        space=space,
        name=_checked_name(name),
        form_ref=default_create_ref,
        resolved_to_default=True,
    )


def _checked_space(space: object) -> str:
    try:
        return validate_space_id(space)
    except InvalidSpaceId as exc:
        raise _reject(f"import id space is invalid: {exc}") from None


def _checked_name(name: object) -> str:
    try:
        return validate_resource_name(name)
    except InvalidName as exc:
        raise _reject(f"import id name is invalid: {exc}") from None


def canonical_import_id(space: str | None, name: str, ref: FormRef) -> str:
    """The canonical JSON import id for a resource (what `kubectl` users can copy)."""
    doc: dict[str, str] = {}
    if space is not None:
        doc["space"] = space
    doc.update(ref.to_json())
    doc["name"] = name
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
