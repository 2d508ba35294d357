"""Resource identity of decision 0011: Form line, FormRef, SpaceID and resource names.

Pure values and validators: no I/O. The operator, the reference host and the conformance suite all
speak this vocabulary.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

from .errors import InvalidName, InvalidSpaceId

#: A definition version is a semantic version: MAJOR.MINOR.PATCH.
_DEFINITION_VERSION = re.compile(r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$")
_SCHEMA_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_API_VERSION = re.compile(r"^[a-z0-9]([a-z0-9.-]*[a-z0-9])?/v[0-9]+((alpha|beta)[0-9]+)?$")
_KIND = re.compile(r"^[A-Z][A-Za-z0-9]*$")
#: Host resource names: what a Kubernetes object may be called too, so a CR can carry it.
_NAME = re.compile(r"^[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?$")


@dataclass(frozen=True, order=True, slots=True)
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


@dataclass(frozen=True, order=True, slots=True)
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
    """A SpaceID is opaque, case-sensitive UTF-8 without `/` or control characters, and is not
    `.` or `..`: a path segment that an HTTP client or proxy would collapse names another path
    than the space a grant approved (docs/host-api.md section 1)."""
    if not isinstance(space, str):
        raise InvalidSpaceId(f"space must be a string, got {type(space).__name__}")
    if space == "":
        raise InvalidSpaceId("space must not be empty")
    if "/" in space:
        raise InvalidSpaceId(f"space {space!r} contains '/', which a space forbids")
    if space in (".", ".."):
        raise InvalidSpaceId(f"space {space!r} is a dot segment, which a space cannot be")
    if any(unicodedata.category(char) == "Cc" for char in space):
        raise InvalidSpaceId(f"space {space!r} contains a control character")
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
