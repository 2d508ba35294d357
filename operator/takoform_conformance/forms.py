"""What the host has installed, and how to write valid and invalid specs for one definition."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from takoform_spec.identity import FormRef

from .outcomes import CheckFailed, CheckSkipped


@dataclass
class InstalledForm:
    ref: FormRef
    package_digests: list[str]


_EXAMPLE = re.compile(r"e\.g\.\s+([^\s,;()]+)")
_FALLBACK_STRINGS = ("eu-west-1", "500Gi", "conformance", "example.com", "a", "10.0.0.0/16", "1")


class FormModel:
    """The field declarations of one exact definition (the `schema` of its definition read)."""

    def __init__(self, ref: FormRef, schema: Mapping[str, Any]) -> None:
        self.ref = ref
        self.schema = schema
        fields = schema.get("fields")
        if not isinstance(fields, list):
            raise CheckFailed(f"the definition of {ref} has no `fields` list; cannot build specs")
        self.fields: dict[str, dict[str, Any]] = {
            f["name"]: f for f in fields if isinstance(f, dict) and isinstance(f.get("name"), str)
        }

    @property
    def required(self) -> list[str]:
        return [name for name, f in self.fields.items() if f.get("required")]

    def example(self, name: str) -> Any:
        return self._value(self.fields[name], name)

    def _value(self, f: Mapping[str, Any], name: str) -> Any:
        kind = f.get("type")
        if f.get("enum"):
            return f["enum"][0]
        if kind == "string":
            return self._string(f, name)
        if kind in ("integer", "number"):
            low = f.get("minimum", 1)
            high = f.get("maximum")
            value = max(low, 1) if high is None or high >= 1 else high
            value = min(value * 10, high) if high is not None else value * 10
            return int(value) if kind == "integer" else float(value)
        if kind == "boolean":
            return False
        if kind == "array":
            return [self._value({"type": f.get("items", "string")}, name)]
        if kind == "map":
            return {"conformance": self._value({"type": f.get("values", "string")}, name)}
        raise CheckFailed(f"{self.ref}: field {name!r} has a type the suite cannot fill: {kind!r}")

    def _string(self, f: Mapping[str, Any], name: str) -> str:
        candidates = [m.rstrip(".") for m in _EXAMPLE.findall(str(f.get("description", "")))]
        candidates += list(_FALLBACK_STRINGS)
        pattern = f.get("pattern")
        for candidate in candidates:
            if pattern and not re.search(pattern, candidate):
                continue
            if len(candidate) < f.get("minLength", 0):
                continue
            if len(candidate) > f.get("maxLength", 1 << 30):
                continue
            return str(candidate)
        raise CheckFailed(f"{self.ref}: cannot find a valid example for field {name!r}")

    def valid_spec(self) -> dict[str, Any]:
        """A minimal valid spec: the required fields only."""
        return {name: self.example(name) for name in self.required}

    def mutable_field(self) -> str:
        """A field an update may change (not immutable; integer, boolean or enum)."""
        ranked = sorted(
            (name for name, f in self.fields.items() if not f.get("immutable")),
            key=lambda n: (
                not self.fields[n].get("required"),
                self.fields[n].get("type") != "integer",
            ),
        )
        for name in ranked:
            f = self.fields[name]
            if f.get("type") in ("integer", "boolean") or (f.get("enum") and len(f["enum"]) > 1):
                return name
        raise CheckSkipped(f"{self.ref} declares no field the suite knows how to change")

    def changed(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        """`spec` with its mutable field set to a different valid value."""
        name = self.mutable_field()
        f = self.fields[name]
        current = spec.get(name, f.get("default", self.example(name)))
        new: Any
        if f.get("enum"):
            new = next(v for v in f["enum"] if v != current)
        elif f.get("type") == "boolean":
            new = not current
        else:
            high = f.get("maximum")
            new = current + 1 if high is None or current + 1 <= high else current - 1
        return {**spec, name: new}

    def defaulted_optional(self) -> tuple[str, Any] | None:
        for name, f in self.fields.items():
            if not f.get("required") and "default" in f:
                return name, f["default"]
        return None

    def invalid_specs(self, sibling_fields: set[str]) -> list[tuple[str, dict[str, Any], str]]:
        """(what, spec, field the error must name) for specs the exact definition refuses."""
        base = self.valid_spec()
        cases: list[tuple[str, dict[str, Any], str]] = [
            ("an undeclared field", {**base, "conformanceUndeclared": "x"}, "conformanceUndeclared")
        ]
        for name in sorted(sibling_fields - set(self.fields)):
            value = True if name == "versioning" else 1
            cases.append(
                (
                    f"field {name!r} declared only by another definition of the line",
                    {**base, name: value},
                    name,
                )
            )
            break
        if "name" not in self.fields:
            cases.append(("an envelope field `name` in spec (0011)", {**base, "name": "x"}, "name"))
        for name in self.required:
            spec = dict(base)
            del spec[name]
            cases.append((f"missing required field {name!r}", spec, name))
            break
        for name, f in self.fields.items():
            kind = f.get("type")
            wrong: Any = {"integer": "ten", "number": "ten", "boolean": "yes", "string": 12}.get(
                str(kind), 12
            )
            cases.append((f"wrong type for {kind} field {name!r}", {**base, name: wrong}, name))
            break
        for name, f in self.fields.items():
            if f.get("type") in ("integer", "number") and "minimum" in f:
                cases.append((f"{name} below its minimum", {**base, name: f["minimum"] - 1}, name))
            if f.get("type") in ("integer", "number") and "maximum" in f:
                cases.append((f"{name} above its maximum", {**base, name: f["maximum"] + 1}, name))
            if f.get("type") == "string" and f.get("pattern"):
                cases.append(
                    (f"{name} not matching its pattern", {**base, name: "NOT VALID"}, name)
                )
            if f.get("type") == "map" and f.get("values") == "string":
                cases.append((f"{name} with a non-string value", {**base, name: {"k": 1}}, name))
        return cases
