"""Every module of operator/ opens with a docstring whose first line says its job."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

OPERATOR = Path(__file__).resolve().parents[2] / "operator"


@pytest.mark.parametrize(
    "path", sorted(OPERATOR.rglob("*.py")), ids=lambda p: str(p.relative_to(OPERATOR))
)
def test_module_says_its_job_in_one_line(path: Path) -> None:
    docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False)
    assert docstring, f"{path.relative_to(OPERATOR)} has no module docstring saying its job"
    first = docstring.splitlines()[0]
    assert first.strip() and first == first.strip(), f"{path.name}: the first line is the job"
