"""The binding rules table is stated twice, for admins (docs/tenancy.md) and for users
(docs/operator.md): the two must say the same, and name every phase the code has."""

from __future__ import annotations

from pathlib import Path

from takoform_operator.core.binding import Phase

DOCS = Path(__file__).resolve().parents[2] / "docs"
HEADER = "| phase | meaning | who may bind it next |"


def _table(doc: str) -> list[str]:
    lines = [line.strip() for line in (DOCS / doc).read_text().splitlines()]
    start = lines.index(HEADER)
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append(line)
    return table


def test_both_docs_carry_the_same_binding_table_with_every_phase() -> None:
    tenancy, operator = _table("tenancy.md"), _table("operator.md")
    assert tenancy == operator
    first_cells = [row.split("|")[1].strip() for row in tenancy[2:]]
    for phase in Phase:
        assert any(cell.startswith(f"`{phase}`") for cell in first_cells), phase
