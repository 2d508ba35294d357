"""The pure core stays pure: no kopf, no Kubernetes, no HTTP, no I/O (an enforced layer rule).

Like an import-linter contract, but as a test so it runs wherever the tests run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

OPERATOR = Path(__file__).resolve().parents[2] / "operator"
CORE = OPERATOR / "takoform_operator" / "core"

#: Modules the core must never import: frameworks, clients, and anything that does I/O.
FORBIDDEN = {
    "kopf",
    "kubernetes",
    "httpx",
    "pydantic",
    "pydantic_settings",
    "prometheus_client",
    "yaml",
    "asyncio",
    "socket",
    "subprocess",
    "sqlite3",
    "os",
    "pathlib",
    "time",
    "random",
    "takoform_host",
    "takoform_conformance",
}
#: Names whose call means I/O or hidden time.
FORBIDDEN_CALLS = {"open", "print", "input"}


def _core_modules() -> list[Path]:
    return sorted(CORE.glob("*.py"))


@pytest.mark.parametrize("module", _core_modules(), ids=lambda p: p.name)
def test_core_module_imports_nothing_impure(module: Path) -> None:
    tree = ast.parse(module.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            assert top not in FORBIDDEN, f"{module.name} imports {name}"
            if top == "takoform_operator":
                assert name.startswith("takoform_operator.core"), f"{module.name} imports {name}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{module.name} calls {node.func.id}()"


def test_operator_is_a_source_root_not_a_package() -> None:
    """A package named `operator` would shadow the standard library."""
    assert not (OPERATOR / "__init__.py").exists()
    import operator

    assert hasattr(operator, "itemgetter"), "the standard library's operator module is intact"
