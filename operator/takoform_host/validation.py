"""The body of a PUT checked against the exact definition: fields, defaults, immutability.

H-22 (only declared fields, of the declared types and constraints), H-27 (declared defaults are
stored), immutable fields. The host reads a Form Definition on its own: it shares the definition
model with the operator (`takoform_spec.definitions`) but not the operator's codecs, so a codec
bug cannot pass on both sides at once.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping
from typing import Any

from takoform_spec.canonical import json_type
from takoform_spec.definitions import FieldSpec, FormDefinition
from takoform_spec.host_api import ErrorCode

from .errors import HostError
from .misbehaviours import Settings


def checked_spec(
    definition: FormDefinition,
    body: Any,
    settings: Settings,
    current: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The spec to store for `body` (a create, or an update of `current`), or a HostError."""
    ref = definition.ref
    if not isinstance(body, dict):
        raise HostError(
            ErrorCode.INVALID_REQUEST, 'the body must be the JSON object {"spec": {...}}'
        )
    for member in body:
        if member != "spec":
            raise HostError(
                ErrorCode.VALIDATION_FAILED,
                f'body member {member!r} is not allowed; the body is {{"spec": {{...}}}}',
                {"field": member, "formRef": ref.to_json()},
            )
    if "spec" not in body:
        raise HostError(
            ErrorCode.VALIDATION_FAILED,
            "the body has no spec",
            {"field": "spec", "formRef": ref.to_json()},
        )
    spec = body["spec"]
    if settings.on("store-undeclared-fields"):
        if not isinstance(spec, dict):
            raise HostError(
                ErrorCode.VALIDATION_FAILED, "spec must be an object", {"field": "spec"}
            )
        encoded = dict(spec)
    else:
        try:
            encoded = validate_spec(definition, spec)
        except InvalidSpec as exc:
            raise HostError(
                ErrorCode.VALIDATION_FAILED,
                str(exc),
                {"field": exc.field, "formRef": ref.to_json()},
            ) from None
    if not settings.on("ignore-defaults"):
        for spec_field in definition.fields:
            if spec_field.name not in encoded and spec_field.default is not None:
                encoded[spec_field.name] = copy.deepcopy(spec_field.default)
    if current is not None and not settings.on("store-undeclared-fields"):
        for spec_field in definition.fields:
            if spec_field.immutable and encoded.get(spec_field.name) != current.get(
                spec_field.name
            ):
                raise HostError(
                    ErrorCode.VALIDATION_FAILED,
                    f"field {spec_field.name!r} is immutable: it cannot change after creation "
                    f"(current {current.get(spec_field.name)!r})",
                    {"field": spec_field.name, "formRef": ref.to_json()},
                )
    return encoded


class InvalidSpec(ValueError):
    """A spec the definition does not accept; `field` names the culprit (`spec` for the whole)."""

    def __init__(self, definition: FormDefinition, field: str, problem: str) -> None:
        self.field = field
        super().__init__(f"field {field!r} {problem} (FormRef {definition.ref})")


def validate_spec(definition: FormDefinition, spec: Any) -> dict[str, Any]:
    """The declared members of `spec` (nulls dropped), or InvalidSpec naming the first problem."""
    if not isinstance(spec, Mapping):
        raise InvalidSpec(definition, "spec", f"must be an object, got {json_type(spec)}")
    declared = {field.name: field for field in definition.fields}
    for name in spec:
        if name not in declared and spec[name] is not None:
            raise InvalidSpec(definition, str(name), "is not declared by this definition")
    result: dict[str, Any] = {}
    for field in definition.fields:
        value = spec.get(field.name)
        if value is None:
            if field.required:
                raise InvalidSpec(definition, field.name, "is required")
            continue
        result[field.name] = _checked(definition, field, value)
    return result


def _checked(definition: FormDefinition, field: FieldSpec, value: Any) -> Any:
    if field.type == "array":
        if not isinstance(value, list):
            raise InvalidSpec(definition, field.name, f"must be an array, got {json_type(value)}")
        if field.max_items is not None and len(value) > field.max_items:
            raise InvalidSpec(definition, field.name, f"has more than {field.max_items} items")
        for item in value:
            _check_scalar(definition, field, field.items or "string", item)
        return list(value)
    if field.type == "map":
        if not isinstance(value, Mapping):
            raise InvalidSpec(definition, field.name, f"must be an object, got {json_type(value)}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise InvalidSpec(definition, field.name, "must have string keys")
            _check_scalar(definition, field, field.values or "string", item)
        return dict(value)
    _check_scalar(definition, field, field.type, value)
    return value


def _check_scalar(definition: FormDefinition, field: FieldSpec, kind: str, value: Any) -> None:
    def refuse(problem: str) -> InvalidSpec:
        return InvalidSpec(definition, field.name, problem)

    if not _is_type(kind, value):
        raise refuse(f"must be {kind}, got {json_type(value)}")
    if field.enum is not None and value not in field.enum:
        raise refuse(f"must be one of {list(field.enum)}, got {value!r}")
    if isinstance(value, str):
        if field.pattern is not None and not re.fullmatch(field.pattern, value):
            raise refuse(f"must match {field.pattern!r}, got {value!r}")
        if field.min_length is not None and len(value) < field.min_length:
            raise refuse(f"must be at least {field.min_length} characters")
        if field.max_length is not None and len(value) > field.max_length:
            raise refuse(f"must be at most {field.max_length} characters")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if field.minimum is not None and value < field.minimum:
            raise refuse(f"must be >= {field.minimum}, got {value}")
        if field.maximum is not None and value > field.maximum:
            raise refuse(f"must be <= {field.maximum}, got {value}")


_SCALAR_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "boolean": (bool,),
    "integer": (int,),
    "number": (int, float),
}


def _is_type(kind: str, value: Any) -> bool:
    if isinstance(value, bool) and kind != "boolean":
        return False
    return isinstance(value, _SCALAR_TYPES.get(kind, ()))
