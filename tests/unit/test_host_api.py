"""The host API's shared names (takoform_spec.host_api) are the ones docs/host-api.md states."""

from __future__ import annotations

import re
from pathlib import Path

from takoform_spec.host_api import (
    CONDITION_TYPES,
    ERROR_STATUS,
    PORTABLE_REASONS,
    ErrorCode,
    OperationState,
)

HOST_API = Path(__file__).resolve().parents[2] / "docs" / "host-api.md"


def _rule(number: int) -> str:
    """The text of rule H-<number>, up to the next item of its list."""
    text = HOST_API.read_text(encoding="utf-8")
    start = text.index(f"**H-{number}**")
    return text[start : text.index("\n- ", start)]


def test_error_code_table_matches_host_api_section_9() -> None:
    text = HOST_API.read_text(encoding="utf-8").split("## 9.", 1)[1]
    documented = {
        m[1]: (int(m[2]) if m[2] != "—" else None)
        for m in re.finditer(r"^\| `([a-z_]+)` \| (\d+|—) \|", text, flags=re.MULTILINE)
    }
    assert documented == ERROR_STATUS
    assert list(documented) == list(ErrorCode), "ErrorCode lists the codes in §9's order"


def test_condition_types_and_portable_reasons_are_those_of_h17() -> None:
    types, reasons = _rule(17).split("portable reasons", 1)
    assert tuple(re.findall(r"`([A-Z][A-Za-z]*)`", types)) == CONDITION_TYPES
    assert tuple(re.findall(r"`([A-Z][A-Za-z]*)`", reasons)) == PORTABLE_REASONS


def test_operation_states_are_those_of_h31() -> None:
    states = re.search(r"`state` MUST be one of ([^.]*)\.", _rule(31))
    assert states is not None
    assert re.findall(r"`([a-z]+)`", states[1]) == list(OperationState)
