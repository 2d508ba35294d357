"""docs/architecture.md draws the life of one CR in one picture and names the function where
each decision is taken: every name in that picture is held to the code here, so a rename or a
move that leaves the picture behind fails."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "takoform_operator"
DOC = ROOT / "docs" / "architecture.md"
#: A row's decision: `name()` or `Class.method()`, then the module it lives in.
_ROW = re.compile(r"(?P<name>[A-Za-z_][\w.]*)\(\).*?(?P<module>[\w/]+\.py)")
#: A row's delegate: `module.py -> package/module.function`.
_DELEGATE = re.compile(r"\.py -> (?P<module>[\w/]+)\.(?P<name>\w+)\b")


def _picture() -> list[str]:
    text = DOC.read_text()
    section = text.split("## One reconcile, from a watch event to the status write", 1)[1]
    return section.split("```", 2)[1].splitlines()


def _defined(module: str) -> set[str]:
    """Every function, class and `Class.method` defined in a module of the package."""
    tree = ast.parse((PACKAGE / module).read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        if isinstance(node, ast.ClassDef):
            for inner in node.body:
                if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                    # A step of a method is named bare under it (`CrSteps.look`: `_let_go()`).
                    names |= {f"{node.name}.{inner.name}", inner.name}
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            # Closures the registration defines (register(): watch, leave ...).
            names |= {
                inner.name
                for inner in ast.walk(node)
                if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    return names


def _named() -> list[tuple[str, str]]:
    found = []
    for line in _picture():
        row = _ROW.search(line)
        if row is not None:
            found.append((row["module"], row["name"]))
        for delegate in _DELEGATE.finditer(line):
            found.append((f"{delegate['module']}.py", delegate["name"]))
    return found


def test_the_picture_names_the_step_and_the_core_it_calls() -> None:
    modules = {module for module, _ in _named()}
    assert {"kube/cr_step.py", "kube/crs.py", "service.py", "core/policy.py"} <= modules
    assert ("kube/cr_step.py", "CrSteps.look") in _named()


@pytest.mark.parametrize(("module", "name"), _named(), ids=lambda v: str(v))
def test_every_name_in_the_picture_is_where_it_says(module: str, name: str) -> None:
    assert (PACKAGE / module).is_file(), f"docs/architecture.md names {module}, which is gone"
    assert name in _defined(module), f"docs/architecture.md names {name}() in {module}"
