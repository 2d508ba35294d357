"""Layer contracts of every package, enforced on the source (like import-linter, but as a test).

Which of our modules may import which (same-layer imports are always allowed):

    layer        modules                                   may import
    -----------  ----------------------------------------  -----------------------------------------
    spec         takoform_spec                             (nothing of ours)
    catalog      takoform_spec.catalog                     spec
    core         takoform_operator.core                    spec
    host_port    takoform_operator.host_port               spec, core
    binding_port takoform_operator.binding_port            spec, core
    service      takoform_operator.service                 spec, core, host_port, binding_port
    settings     takoform_operator.settings                (nothing of ours)
    version      takoform_operator.version                 (nothing of ours)
    logs         takoform_operator.logs                    (nothing of ours)
    metrics      takoform_operator.metrics                 spec, core, host_port, service, settings,
                                                           version
    host_client  takoform_operator.host_client             spec, core, host_port, service
    kube         takoform_operator.kube                    spec, core, host_port, binding_port,
                                                           service, settings, metrics, version,
                                                           logs
    build        takoform_operator.generate,               spec, catalog, core
                 takoform_operator.registry_data
    render       takoform_operator.plugin.render,          spec, core
                 takoform_operator.plugin.render_bindings
    plugin       takoform_operator.plugin                  spec, core, host_port, binding_port,
                                                           settings, host_client, kube, build,
                                                           render, version
    root         takoform_operator (package), .main, .cli  catalog and every layer of the operator
    host         takoform_host                             spec, catalog
    conformance  takoform_conformance                      spec

The plugin (`kubectl takoform`) is a second composition root: it reads the cluster with the
user's kubeconfig and the host through the host client; what it prints is built by its pure
`render` modules.

So: the spec is the only thing the reference host, the conformance suite and the operator share;
the adapters never reach the build-time modules (generate, registry data, the catalog files) or
the composition root; the host client never reads the operator's settings. Frameworks stay in the
layers that adapt them (FRAMEWORKS below).

And purity: the operator's core, the spec and the plugin's render modules do no I/O and import
no framework. The catalog is its own layer because it reads the definition files shipped beside
it: the one impure module of `takoform_spec`, which nothing pure may import.

Every import counts, including those inside functions and under `if TYPE_CHECKING:`.

And shape: no module is longer than MAX_MODULE_LINES (past it, split it along a seam), and no
modules import each other in a circle, not even under `if TYPE_CHECKING:` (a circle is two
modules that can only be read, tested and changed together).
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

OPERATOR = Path(__file__).resolve().parents[2] / "operator"
OURS = ("takoform_spec", "takoform_operator", "takoform_host", "takoform_conformance")

#: layer -> (module prefixes, layers it may import). Written as the table in the docstring.
LAYERS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    "spec": (("takoform_spec",), frozenset()),
    "catalog": (("takoform_spec.catalog",), frozenset({"spec"})),
    "core": (("takoform_operator.core",), frozenset({"spec"})),
    "host_port": (("takoform_operator.host_port",), frozenset({"spec", "core"})),
    "binding_port": (("takoform_operator.binding_port",), frozenset({"spec", "core"})),
    "service": (
        ("takoform_operator.service",),
        frozenset({"spec", "core", "host_port", "binding_port"}),
    ),
    "settings": (("takoform_operator.settings",), frozenset()),
    "version": (("takoform_operator.version",), frozenset()),
    "logs": (("takoform_operator.logs",), frozenset()),
    "metrics": (
        ("takoform_operator.metrics",),
        frozenset({"spec", "core", "host_port", "service", "settings", "version"}),
    ),
    "http_transport": (("takoform_operator.http_transport",), frozenset()),
    "host_client": (
        ("takoform_operator.host_client",),
        frozenset({"spec", "core", "host_port", "service", "http_transport"}),
    ),
    "kube": (
        ("takoform_operator.kube",),
        frozenset(
            {
                "spec",
                "core",
                "host_port",
                "binding_port",
                "service",
                "settings",
                "metrics",
                "http_transport",
                "version",
                "logs",
            }
        ),
    ),
    "build": (
        ("takoform_operator.generate", "takoform_operator.registry_data"),
        frozenset({"spec", "catalog", "core"}),
    ),
    "render": (
        ("takoform_operator.plugin.render", "takoform_operator.plugin.render_bindings"),
        frozenset({"spec", "core"}),
    ),
    "plugin": (
        ("takoform_operator.plugin",),
        frozenset(
            {
                "spec",
                "core",
                "host_port",
                "binding_port",
                "settings",
                "host_client",
                "kube",
                "build",
                "render",
                "version",
            }
        ),
    ),
    "root": (
        ("takoform_operator", "takoform_operator.main", "takoform_operator.cli"),
        frozenset(
            {
                "plugin",
                "spec",
                "catalog",
                "core",
                "host_port",
                "binding_port",
                "service",
                "settings",
                "version",
                "metrics",
                "host_client",
                "kube",
                "build",
                "logs",
            }
        ),
    ),
    "host": (("takoform_host",), frozenset({"spec", "catalog"})),
    "conformance": (("takoform_conformance",), frozenset({"spec"})),
}

#: Third-party frameworks and the only layers that may import them.
FRAMEWORKS = {
    "kopf": {"kube", "root"},
    "kubernetes": {"kube", "plugin"},
    "prometheus_client": {"metrics", "root"},
    "pydantic_settings": {"settings"},
    "httpx": {"http_transport", "host_client", "kube", "conformance"},  # kube.status: API writes
    "httpx_aiohttp": {"http_transport"},
    "starlette": {"host"},
    "uvicorn": {"host"},
    "sqlite3": {"host"},
}

#: Modules the pure layers must never import: frameworks, clients, and anything that does I/O.
IMPURE = {
    "kopf",
    "kubernetes",
    "httpx",
    "pydantic",
    "pydantic_settings",
    "prometheus_client",
    "starlette",
    "uvicorn",
    "yaml",
    "asyncio",
    "socket",
    "subprocess",
    "sqlite3",
    "os",
    "pathlib",
    "time",
    "random",
}
#: Names whose call means I/O.
IMPURE_CALLS = {"open", "print", "input"}
#: The pure layers (the catalog, which reads files, is a layer of its own).
PURE_LAYERS = {"spec", "core", "render"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(OPERATOR).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str | None:
    """The layer whose longest module prefix matches `module`."""
    best: tuple[int, str] | None = None
    for layer, (prefixes, _) in LAYERS.items():
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), layer)
    return best[1] if best else None


def imports_of(path: Path) -> Iterator[tuple[int, str]]:
    """(line, absolute dotted name) of every import in `path`; `from M import n` yields M.n."""
    module = module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            for alias in node.names:
                yield node.lineno, f"{source}.{alias.name}"


def _sources() -> list[Path]:
    return sorted(OPERATOR.rglob("*.py"))


def _id(path: Path) -> str:
    return str(path.relative_to(OPERATOR))


def test_every_module_is_in_a_layer() -> None:
    unplaced = [module_name(p) for p in _sources() if layer_of(module_name(p)) is None]
    assert not unplaced, f"modules in no layer (add them to LAYERS): {unplaced}"


@pytest.mark.parametrize("path", _sources(), ids=_id)
def test_module_imports_only_what_its_layer_may(path: Path) -> None:
    module = module_name(path)
    layer = layer_of(module)
    assert layer is not None
    allowed = LAYERS[layer][1] | {layer}
    violations = []
    for line, name in imports_of(path):
        top = name.split(".")[0]
        if top in OURS:
            target = layer_of(name)
            if target not in allowed:
                violations.append(
                    f"{module} (layer {layer}) imports {name} (layer {target}) at line {line}; "
                    f"{layer} may import only {sorted(allowed)}"
                )
        elif top in FRAMEWORKS and layer not in FRAMEWORKS[top]:
            violations.append(
                f"{module} (layer {layer}) imports {name} at line {line}; only "
                f"{sorted(FRAMEWORKS[top])} may import {top}"
            )
    assert not violations, "\n".join(violations)


def _pure_sources() -> list[Path]:
    return [p for p in _sources() if layer_of(module_name(p)) in PURE_LAYERS]


@pytest.mark.parametrize("path", _pure_sources(), ids=_id)
def test_pure_module_does_no_io(path: Path) -> None:
    module = module_name(path)
    violations = []
    for line, name in imports_of(path):
        if name.split(".")[0] in IMPURE:
            violations.append(f"{module} imports {name} at line {line}")
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        call = node.func if isinstance(node, ast.Call) else None
        if isinstance(call, ast.Name) and call.id in IMPURE_CALLS:
            violations.append(f"{module} calls {call.id}() at line {node.lineno}")
    assert not violations, "\n".join(violations)


def test_the_pure_layers_are_covered() -> None:
    covered = {module_name(p) for p in _pure_sources()}
    assert "takoform_spec.canonical" in covered and "takoform_operator.core.decide" in covered
    assert "takoform_spec.catalog" not in covered, "the catalog reads files: not a pure module"


@pytest.mark.parametrize(
    ("module", "source", "expected"),
    [
        ("takoform_host.app", "from takoform_operator.core import errors", "layer core"),
        ("takoform_operator.host_client.client", "import takoform_operator.settings", "settings"),
        ("takoform_operator.core.state", "from ..kube import crs", "layer kube"),
        ("takoform_operator.service", "from takoform_operator import generate", "layer build"),
        ("takoform_operator.kube.handlers", "from takoform_spec import catalog", "layer catalog"),
        ("takoform_spec.definitions", "from .catalog import load_catalog", "layer catalog"),
        ("takoform_spec.identity", "from takoform_operator.core import registry", "layer core"),
        ("takoform_conformance.runner", "import takoform_host.rules", "layer host"),
        ("takoform_operator.core.tables", "import kopf", "only ['kube', 'root'] may import kopf"),
    ],
)
def test_a_violation_names_the_module_and_the_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, source: str, expected: str
) -> None:
    """The contracts catch what they claim to, and say where (checked on a planted module)."""
    path = tmp_path.joinpath(*module.split(".")).with_suffix(".py")
    path.parent.mkdir(parents=True)
    path.write_text(source + "\n", encoding="utf-8")
    monkeypatch.setitem(globals(), "OPERATOR", tmp_path)
    with pytest.raises(AssertionError) as caught:
        test_module_imports_only_what_its_layer_may(path)
    message = str(caught.value)
    assert module in message and expected in message and "line 1" in message


#: The most lines a module under operator/ may have.
MAX_MODULE_LINES = 700


def test_no_module_is_over_the_line_limit() -> None:
    lengths = {_id(p): len(p.read_text(encoding="utf-8").splitlines()) for p in _sources()}
    over = {path: count for path, count in lengths.items() if count > MAX_MODULE_LINES}
    assert not over, (
        f"modules over {MAX_MODULE_LINES} lines (split each along a seam): "
        + ", ".join(f"{path} ({count})" for path, count in sorted(over.items()))
    )


def import_graph() -> dict[str, dict[str, int]]:
    """module -> {module of ours it imports: the line of the first such import}. An import of a
    name resolves to the longest module it names (`from a.b import c`: a.b.c if that is a module,
    else a.b); the packages a module's import passes through are not edges."""
    paths = {module_name(p): p for p in _sources()}
    graph: dict[str, dict[str, int]] = {}
    for module, path in paths.items():
        edges = graph.setdefault(module, {})
        for line, name in imports_of(path):
            parts = name.split(".")
            targets = (".".join(parts[:n]) for n in range(len(parts), 0, -1))
            target = next((t for t in targets if t in paths), None)
            if target is not None and target != module:
                edges.setdefault(target, line)
    return graph


def import_cycles(graph: Mapping[str, Mapping[str, int]]) -> list[list[str]]:
    """One cycle (its modules in import order, the first repeated last) per strongly connected
    set of modules (Tarjan's algorithm; the graph is small enough to recurse)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    components: list[set[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for target in graph.get(module, {}):
            if target not in index:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], index[target])
        if low[module] == index[module]:
            component = {stack.pop()}
            while module not in component:
                component.add(stack.pop())
            if len(component) > 1:
                components.append(component)

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return [_shortest_cycle(graph, component) for component in components]


def _shortest_cycle(graph: Mapping[str, Mapping[str, int]], component: set[str]) -> list[str]:
    """The shortest cycle through the first module (by name) of `component`: breadth first."""
    start = min(component)
    came_from: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for module in frontier:
            for target in sorted(graph[module]):
                if target == start:
                    path = [module]
                    while path[-1] != start:
                        path.append(came_from[path[-1]])
                    return [*reversed(path), start]
                if target in component and target not in came_from:
                    came_from[target] = module
                    following.append(target)
        frontier = following
    raise AssertionError(f"no cycle through {start} in {sorted(component)}")


def _cycle_text(graph: Mapping[str, Mapping[str, int]], cycle: list[str]) -> str:
    steps = [cycle[0]]
    for module, target in itertools.pairwise(cycle):
        steps.append(f"{target} (line {graph[module][target]} of {module})")
    return " -> ".join(steps)


def test_no_import_cycle() -> None:
    graph = import_graph()
    cycles = import_cycles(graph)
    assert not cycles, (
        "import cycles (break each: move what both need where neither imports):\n"
        + ("\n".join(_cycle_text(graph, cycle) for cycle in cycles))
    )


def test_an_import_cycle_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cycle check catches a circle closed only under TYPE_CHECKING, and names it."""
    package = tmp_path / "takoform_operator" / "core"
    package.mkdir(parents=True)
    (package / "a.py").write_text("from .b import B\n", encoding="utf-8")
    (package / "b.py").write_text(
        "from typing import TYPE_CHECKING\n\nif TYPE_CHECKING:\n    from . import c\n",
        encoding="utf-8",
    )
    (package / "c.py").write_text("import takoform_operator.core.a\n", encoding="utf-8")
    (package / "d.py").write_text("from .a import A\n", encoding="utf-8")
    monkeypatch.setitem(globals(), "OPERATOR", tmp_path)
    with pytest.raises(AssertionError) as caught:
        test_no_import_cycle()
    assert (
        "takoform_operator.core.a -> takoform_operator.core.b (line 1 of takoform_operator.core.a)"
        " -> takoform_operator.core.c (line 4 of takoform_operator.core.b)"
        " -> takoform_operator.core.a (line 1 of takoform_operator.core.c)"
    ) in str(caught.value)
    assert "core.d" not in str(caught.value), "a module that only reaches the cycle is not in it"


def test_operator_is_a_source_root_not_a_package() -> None:
    """A package named `operator` would shadow the standard library."""
    assert not (OPERATOR / "__init__.py").exists()
    import operator

    assert hasattr(operator, "itemgetter"), "the standard library's operator module is intact"
