"""Reasons are data: one table (core.conditions.REASON_CONDITIONS) says which condition each
reason is written on, every Condition is checked against it when made, and docs/operator.md
"Conditions and reasons" shows exactly that table."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from takoform_operator.core.conditions import (
    REASON_CONDITIONS,
    Condition,
    ConditionType,
    Reason,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"
#: Reasons that only ever name an Event.
EVENT_ONLY = {Reason.RESUMED, Reason.REBOUND}


def documented() -> dict[ConditionType, set[str]]:
    """condition type -> the reasons docs/operator.md lists for it."""
    text = DOC.read_text(encoding="utf-8")
    section = text.split("## Conditions and reasons", 1)[1].split("\n\n", 2)[1]
    table: dict[ConditionType, set[str]] = defaultdict(set)
    for row in section.splitlines()[2:]:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        kind = ConditionType(cells[0].split()[0])
        table[kind] |= set(re.findall(r"`([A-Za-z]+)`", cells[1]))
    return dict(table)


def test_the_docs_table_is_the_code_table() -> None:
    in_code: dict[ConditionType, set[str]] = defaultdict(set)
    for reason, kinds in REASON_CONDITIONS.items():
        for kind in kinds:
            in_code[kind].add(str(reason))
    assert documented() == dict(in_code)


def test_every_reason_has_its_conditions() -> None:
    assert set(Reason) - set(REASON_CONDITIONS) == EVENT_ONLY


def test_a_reason_on_the_wrong_condition_is_refused_when_made() -> None:
    with pytest.raises(ValueError, match="not written on condition"):
        Condition(ConditionType.BLOCKED, True, Reason.HOST_UNAVAILABLE, "x")
    # Ready False carries whatever reason made it so.
    assert Condition(ConditionType.READY, False, Reason.HOST_UNAVAILABLE).reason
