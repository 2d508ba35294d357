"""Hypothesis strategies drawing documents that satisfy a definition's declared constraints."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from takoform_spec.definitions import FieldSpec


def _scalar(spec: FieldSpec, kind: str) -> st.SearchStrategy[Any]:
    if spec.enum is not None:
        return st.sampled_from(spec.enum)
    if kind == "string":
        strategy = (
            st.from_regex(spec.pattern, fullmatch=True)
            if spec.pattern is not None
            else st.text(max_size=(spec.max_length or 30))
        )
        low, high = spec.min_length or 0, spec.max_length
        return strategy.filter(lambda v: len(v) >= low and (high is None or len(v) <= high))
    if kind == "integer":
        return st.integers(
            min_value=None if spec.minimum is None else int(spec.minimum),
            max_value=None if spec.maximum is None else int(spec.maximum),
        )
    if kind == "number":
        return st.floats(
            min_value=spec.minimum,
            max_value=spec.maximum,
            allow_nan=False,
            allow_infinity=False,
        )
    assert kind == "boolean", kind
    return st.booleans()


def value_strategy(spec: FieldSpec) -> st.SearchStrategy[Any]:
    if spec.type == "array":
        return st.lists(_scalar(spec, spec.items or "string"), max_size=min(spec.max_items or 4, 4))
    if spec.type == "map":
        return st.dictionaries(
            st.text(max_size=12), _scalar(spec, spec.values or "string"), max_size=3
        )
    return _scalar(spec, spec.type)


def document_strategy(specs: tuple[FieldSpec, ...], *, all_optional: bool = False) -> Any:
    required = {s.name: value_strategy(s) for s in specs if s.required and not all_optional}
    optional = {s.name: value_strategy(s) for s in specs if all_optional or not s.required}
    return st.fixed_dictionaries(required, optional=optional)
