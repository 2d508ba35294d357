"""The import id of decision 0017 rule 5: parsing NAME, SPACE/NAME and the canonical JSON form."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from takoform_spec.errors import InvalidName, InvalidSpaceId
from takoform_spec.identity import (
    FormRef,
    form_ref_problems,
    validate_resource_name,
    validate_space_id,
)

from .errors import InvalidImportId

VALID_IMPORT_ID_HELP = (
    "a valid import id is NAME, SPACE/NAME, or the JSON object "
    '{"space": "team-a", "apiVersion": "storage.takoform.io/v1", "kind": "Bucket", '
    '"definitionVersion": "1.0.0", "schemaDigest": "sha256:<64 hex>", "name": "logs"} '
    "(space optional; the four FormRef members all or none)"
)


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
