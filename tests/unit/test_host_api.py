"""The host API's shared names (takoform_spec.host_api) match docs/host-api.md and their users."""

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


def test_every_4xx_code_has_an_operator_error_class() -> None:
    """A code added to the closed set with a 4xx status cannot be left out of the operator's
    translation; the generic HostRejected is a deliberate choice, listed here."""
    from takoform_operator.host_port import ERROR_CLASSES, HostRejected

    assert all(isinstance(code, ErrorCode) for code in ERROR_CLASSES)
    client_errors = {c for c, status in ERROR_STATUS.items() if status and 400 <= status < 500}
    assert set(ERROR_CLASSES) == client_errors
    generic = {code for code, cls in ERROR_CLASSES.items() if cls is HostRejected}
    assert generic == {ErrorCode.SPACE_NOT_EMPTY}, "a code mapped to the generic class on purpose"
