"""Codecs (decision 0017 rule 3): the field set one exact definition declared.

One codec serves one major of one Form line. An ADDITIVE minor shares the codec of the definitions
before it (the compatibility rule guarantees every earlier document keeps its meaning); a BREAKING
major gets its own. A shared codec still judges every document by the declarations of the EXACT
definition it is asked about, so a field a later minor added is undeclared for an earlier ref.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from takoform_spec.canonical import json_type
from takoform_spec.definitions import FieldSpec, FormDefinition
from takoform_spec.errors import CatalogError
from takoform_spec.identity import FormLine, FormRef

from .errors import MissingRequiredField, UndeclaredField, WrongFieldType
from .limits import OUTPUT_MAX_ITEMS, OUTPUT_MAX_PROPERTIES, OUTPUT_STRING_MAX_LENGTH


@dataclass(frozen=True)
class Codec:
    """Decodes state written under, and encodes specs sent for, the refs of one major."""

    line: FormLine
    major: int
    #: definitionVersion -> the exact definition (all share one major, all additive).
    definitions: Mapping[str, FormDefinition]

    @property
    def codec_id(self) -> str:
        return f"{self.line.api_version}/{self.line.kind}@{self.major}"

    @property
    def refs(self) -> tuple[FormRef, ...]:
        return tuple(sorted(d.ref for d in self.definitions.values()))

    def fields_for(self, ref: FormRef) -> tuple[FieldSpec, ...]:
        return self._definition(ref).fields

    def outputs_for(self, ref: FormRef) -> tuple[FieldSpec, ...]:
        return self._definition(ref).outputs

    def decode(self, ref: FormRef, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Decode a desired document the host stored under `ref` (strict: the host's truth)."""
        return _check_document(ref, self.fields_for(ref), spec, require=True)

    def encode(self, ref: FormRef, spec: Mapping[str, Any]) -> dict[str, Any]:
        """Encode the desired spec sent for `ref`: only fields that exact definition declared."""
        present = {key: value for key, value in spec.items() if value is not None}
        return _check_document(ref, self.fields_for(ref), present, require=True)

    def normalize(self, ref: FormRef, doc: Mapping[str, Any]) -> dict[str, Any]:
        """`doc` with the declared default of every omitted field, as a host stores it (H-27),
        so a desired spec and a host spec compare equal when they mean the same."""
        result = dict(doc)
        for spec in self.fields_for(ref):
            if spec.name not in result and spec.default is not None:
                result[spec.name] = spec.default
        return result

    def decode_outputs(self, ref: FormRef, outputs: Mapping[str, Any]) -> dict[str, Any]:
        """The outputs that may be shown (in status): every declared output but the sensitive
        ones, which only decode_sensitive_outputs returns (they go to the connection Secret)."""
        decoded = _check_document(ref, self.outputs_for(ref), outputs, require=False)
        hidden = {spec.name for spec in self.outputs_for(ref) if spec.sensitive}
        shown = {name: value for name, value in decoded.items() if name not in hidden}
        for name, value in shown.items():
            _check_output_size(ref, name, value)
        return shown

    def decode_sensitive_outputs(self, ref: FormRef, outputs: Mapping[str, Any]) -> dict[str, str]:
        """The sensitive outputs `ref` declares that the host reported (all strings)."""
        decoded = _check_document(ref, self.outputs_for(ref), outputs, require=False)
        return {
            spec.name: str(decoded[spec.name])
            for spec in self.outputs_for(ref)
            if spec.sensitive and spec.name in decoded
        }

    def _definition(self, ref: FormRef) -> FormDefinition:
        definition = self.definitions.get(ref.definition_version)
        if definition is None or definition.ref != ref:
            raise KeyError(f"codec {self.codec_id} does not serve {ref}")
        return definition


def build_codecs(definitions: Iterable[FormDefinition]) -> dict[FormRef, Codec]:
    """Group definitions into one codec per (line, major); return the codec of every ref."""
    groups: dict[tuple[FormLine, int], dict[str, FormDefinition]] = {}
    for definition in definitions:
        group = groups.setdefault((definition.line, definition.ref.major), {})
        if definition.ref.definition_version in group:
            other = group[definition.ref.definition_version]
            if other.ref != definition.ref:
                raise CatalogError(
                    f"{definition.line}: definitionVersion {definition.ref.definition_version} "
                    f"is declared twice with different schemas"
                )
        group[definition.ref.definition_version] = definition
    codecs: dict[FormRef, Codec] = {}
    for (line, major), members in groups.items():
        codec = Codec(line=line, major=major, definitions=MappingProxyType(dict(members)))
        for definition in members.values():
            codecs[definition.ref] = codec
    return codecs


def _check_document(
    ref: FormRef, specs: tuple[FieldSpec, ...], doc: Mapping[str, Any], *, require: bool
) -> dict[str, Any]:
    if not isinstance(doc, Mapping):
        raise WrongFieldType(ref, "<document>", f"must be an object, got {json_type(doc)}")
    declared = {spec.name: spec for spec in specs}
    for name in doc:
        if name not in declared:
            raise UndeclaredField(ref, str(name), "is not declared by this definition")
    result: dict[str, Any] = {}
    for spec in specs:
        if spec.name not in doc or doc[spec.name] is None:
            if require and spec.required:
                raise MissingRequiredField(ref, spec.name, "is required")
            continue
        result[spec.name] = check_value(ref, spec, doc[spec.name])
    return result


def _check_output_size(ref: FormRef, name: str, value: Any) -> None:
    """An output the status can hold (the CRD's bounds of status.outputs, core.limits): a
    longer one is the host's fault, refused here rather than failing the status write."""
    values = list(value.values()) if isinstance(value, Mapping) else value
    if isinstance(value, Mapping) and len(value) > OUTPUT_MAX_PROPERTIES:
        raise WrongFieldType(ref, name, f"has more than {OUTPUT_MAX_PROPERTIES} entries")
    if isinstance(value, list) and len(value) > OUTPUT_MAX_ITEMS:
        raise WrongFieldType(ref, name, f"has more than {OUTPUT_MAX_ITEMS} items")
    keys = list(value) if isinstance(value, Mapping) else []
    for item in [*(values if isinstance(values, list) else [values]), *keys]:
        if isinstance(item, str) and len(item) > OUTPUT_STRING_MAX_LENGTH:
            raise WrongFieldType(
                ref, name, f"has a string longer than {OUTPUT_STRING_MAX_LENGTH:,} characters"
            )


def check_value(ref: FormRef, spec: FieldSpec, value: Any) -> Any:
    """Check one value against its declaration; return it unchanged when it fits."""
    if spec.type == "array":
        if not isinstance(value, list):
            raise WrongFieldType(ref, spec.name, f"must be an array, got {json_type(value)}")
        if spec.max_items is not None and len(value) > spec.max_items:
            raise WrongFieldType(ref, spec.name, f"has more than {spec.max_items} items")
        for item in value:
            _check_scalar(ref, spec, spec.items or "string", item)
        return list(value)
    if spec.type == "map":
        if not isinstance(value, Mapping):
            raise WrongFieldType(ref, spec.name, f"must be an object, got {json_type(value)}")
        for key, item in value.items():
            if not isinstance(key, str):
                raise WrongFieldType(ref, spec.name, "must have string keys")
            _check_scalar(ref, spec, spec.values or "string", item)
        return dict(value)
    _check_scalar(ref, spec, spec.type, value)
    return value


def _check_scalar(ref: FormRef, spec: FieldSpec, kind: str, value: Any) -> None:
    if not _is_type(kind, value):
        raise WrongFieldType(ref, spec.name, f"must be {kind}, got {json_type(value)}")
    if spec.enum is not None and value not in spec.enum:
        raise WrongFieldType(ref, spec.name, f"must be one of {list(spec.enum)}, got {value!r}")
    if isinstance(value, str):
        if spec.pattern is not None and not re.fullmatch(spec.pattern, value):
            raise WrongFieldType(ref, spec.name, f"must match {spec.pattern!r}, got {value!r}")
        if spec.min_length is not None and len(value) < spec.min_length:
            raise WrongFieldType(ref, spec.name, f"must be at least {spec.min_length} characters")
        if spec.max_length is not None and len(value) > spec.max_length:
            raise WrongFieldType(ref, spec.name, f"must be at most {spec.max_length} characters")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if spec.minimum is not None and value < spec.minimum:
            raise WrongFieldType(ref, spec.name, f"must be >= {spec.minimum}, got {value}")
        if spec.maximum is not None and value > spec.maximum:
            raise WrongFieldType(ref, spec.name, f"must be <= {spec.maximum}, got {value}")


def _is_type(kind: str, value: Any) -> bool:
    if kind == "string":
        return isinstance(value, str)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False
