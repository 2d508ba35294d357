"""The pure core and the shared spec stay pure: no kopf, Kubernetes, HTTP or I/O (a layer rule).

Like an import-linter contract, but as a test so it runs wherever the tests run.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

OPERATOR = Path(__file__).resolve().parents[2] / "operator"
CORE = OPERATOR / "takoform_operator" / "core"
SPEC = OPERATOR / "takoform_spec"
#: The one impure module of the spec: it reads the catalog files shipped beside it.
SPEC_IO = SPEC / "catalog" / "__init__.py"

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


def _pure_modules() -> list[Path]:
    spec = [path for path in SPEC.rglob("*.py") if path != SPEC_IO]
    return sorted([*CORE.glob("*.py"), *spec])


@pytest.mark.parametrize("module", _pure_modules(), ids=lambda p: str(p.relative_to(OPERATOR)))
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
            if top == "takoform_spec":
                assert name != "takoform_spec.catalog", f"{module.name} imports {name}"
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            assert node.func.id not in FORBIDDEN_CALLS, f"{module.name} calls {node.func.id}()"


def test_operator_is_a_source_root_not_a_package() -> None:
    """A package named `operator` would shadow the standard library."""
    assert not (OPERATOR / "__init__.py").exists()
    import operator

    assert hasattr(operator, "itemgetter"), "the standard library's operator module is intact"
