#!/usr/bin/env python3
"""Fail when a test sleeps where it should await an event.

A sleep in a test is a guess about how long something takes: too short and the test is flaky,
too long and it is slow, and either way it proves nothing about the event itself. Tests await the
event instead, through tests/support/waiting.py, whose poll loop is the one place that sleeps
(always under a deadline that fails loudly).

This walks every Python file under tests/ and reports each call of time.sleep, asyncio.sleep,
anyio.sleep or trio.sleep (however imported or aliased) outside ALLOWED. Run by `make lint`.

    .venv/bin/python hack/check_test_sleeps.py [ROOT ...]     # default: tests
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SLEEPY_MODULES = {"time", "asyncio", "anyio", "trio"}

#: (path relative to the repository, enclosing function) -> why this sleep is legitimate.
#: Every entry must still sleep: a stale entry fails the check too, so the list stays honest.
ALLOWED: dict[tuple[str, str], str] = {
    # The poll interval of the one wait helper: it sleeps between two looks at the awaited
    # event, under a deadline that raises TimedOut. Every other wait in the tests goes through it.
    ("tests/support/waiting.py", "wait_for"): "the poll interval, under a failing deadline",
    ("tests/support/waiting.py", "await_for"): "the poll interval, under a failing deadline",
    # Not a wait at all: a fake Secret read yields once, as a real read does, so that
    # concurrent requests meet while it is in flight.
    ("tests/unit/test_host_pool.py", "FakeSecrets.read"): "one yield, as a real read",
    # Likewise a fake Lease request, so that the round's drain task runs between two rounds.
    (
        "tests/unit/test_shards.py",
        "test_a_published_view_says_when_its_write_was_sent.Api.request",
    ): "one yield, as a real request",
    # Not a wait at all: holding a watch stream's bytes back is the fault the proxy injects.
    ("tests/support/lagging_proxy.py", "LaggingProxy._answers.deliver"): "the injected lag",
    # The control plane's own poll loops (stdlib only: it is also `hack/localcluster.py`'s CLI),
    # each under a deadline that raises, and the outage a restart is asked to last.
    ("tests/support/localcluster.py", "LocalCluster._wait_for"): "poll, under a failing deadline",
    ("tests/support/localcluster.py", "stop_process_group"): "poll until the group is gone",
    ("tests/support/localcluster.py", "LocalCluster.restart"): "the outage asked for",
    # The chaos soak: its random moments and pauses are the chaos itself (from its seed); its
    # waits poll under a deadline that raises, its API client retries while the API server is
    # down (the soak kills it on purpose).
    ("tests/support/soak.py", "Soak.kill_operator"): "a random moment to kill, from the seed",
    ("tests/support/soak.py", "Soak.chaos"): "a random pause between actions, from the seed",
    ("tests/support/soak.py", "wait_for"): "poll, under a failing deadline",
    ("tests/support/soak.py", "Kube.request"): "retry while the API server is killed on purpose",
}


class _Finder(ast.NodeVisitor):
    """Calls of a sleep function, with the qualified name of the function they are in."""

    def __init__(self) -> None:
        self.modules: set[str] = set()  # local names bound to a sleepy module
        self.functions: set[str] = set()  # local names bound to a sleepy module's sleep
        self.scope: list[str] = []
        self.found: list[tuple[int, str]] = []

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name in SLEEPY_MODULES:
                self.modules.add(alias.asname or alias.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module in SLEEPY_MODULES:
            for alias in node.names:
                if alias.name == "sleep":
                    self.functions.add(alias.asname or alias.name)

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scoped

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        by_module = (
            isinstance(func, ast.Attribute)
            and func.attr == "sleep"
            and isinstance(func.value, ast.Name)
            and func.value.id in self.modules
        )
        by_name = isinstance(func, ast.Name) and func.id in self.functions
        if by_module or by_name:
            self.found.append((node.lineno, ".".join(self.scope) or "<module>"))
        self.generic_visit(node)


def sleeps(path: Path) -> list[tuple[int, str]]:
    """(line, enclosing function) of every sleep call in one file."""
    finder = _Finder()
    finder.visit(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    return finder.found


def _relative(path: Path) -> str:
    """The path as the allow-list names it: relative to the repository when inside it."""
    resolved = path.resolve()
    return resolved.relative_to(REPO).as_posix() if resolved.is_relative_to(REPO) else str(path)


def _files(roots: Sequence[Path]) -> Iterator[Path]:
    for root in roots:
        yield from [root] if root.is_file() else sorted(root.rglob("*.py"))


def problems(roots: Sequence[Path], allowed: dict[tuple[str, str], str] = ALLOWED) -> list[str]:
    """Every unallowed sleep, and every allow-list entry that no longer sleeps."""
    found: list[str] = []
    used: set[tuple[str, str]] = set()
    for path in _files(roots):
        relative = _relative(path)
        for line, function in sleeps(path):
            if (relative, function) in allowed:
                used.add((relative, function))
                continue
            found.append(
                f"{relative}:{line}: {function} sleeps; await the event instead "
                "(tests/support/waiting.py), or allow it in hack/check_test_sleeps.py with a reason"
            )
    checked = {_relative(path) for path in _files(roots)}
    for relative, function in sorted(set(allowed) - used):
        if relative in checked:
            found.append(f"{relative}: {function} is allowed to sleep but no longer does")
    return found


def main(argv: Sequence[str]) -> int:
    roots = [Path(arg) for arg in argv] or [REPO / "tests"]
    found = problems(roots)
    for problem in found:
        print(problem, file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
