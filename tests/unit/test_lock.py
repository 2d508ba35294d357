"""The lock files the image build installs (`pip install --require-hashes --no-deps`) are held
to pyproject.toml: every dependency is locked at a version its specifier admits, with hashes, so
a change to one without `make lock` fails here instead of drifting silently. Offline and fast."""

from __future__ import annotations

import re
import tomllib
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
LOCK = REPO / "requirements.lock"
BUILD_LOCK = REPO / "requirements-build.lock"
# The image's interpreter and platform (hack/lock.sh resolves for them).
IMAGE_ENV = {
    **default_environment(),
    "python_version": "3.11",
    "python_full_version": "3.11.2",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "os_name": "posix",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
}
_ENTRY = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)==(?P<version>\S+?)\s*(\\)?$")
_HASH = re.compile(r"^\s+--hash=sha256:[0-9a-f]{64}\s*(\\)?$")


def parse_lock(text: str) -> tuple[dict[str, Version], list[str]]:
    """{canonical name: version} of a hashed requirements file, and what is wrong with its
    form (an entry without a hash, a line that is neither, a name locked twice)."""
    locked: dict[str, Version] = {}
    hashes: dict[str, int] = {}
    problems: list[str] = []
    current: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if entry := _ENTRY.match(line):
            current = canonicalize_name(entry["name"])
            if current in locked:
                problems.append(f"line {number}: {current} is locked twice")
            locked[current] = Version(entry["version"])
            hashes[current] = 0
        elif _HASH.match(line) and current is not None:
            hashes[current] += 1
        else:
            problems.append(f"line {number}: neither `name==version` nor a sha256 hash: {line!r}")
    problems += [f"{name} has no --hash" for name, count in hashes.items() if count == 0]
    return locked, problems


def lock_problems(requirements: list[str], lock_text: str) -> list[str]:
    """Every requirement (that applies to the image) locked at a version it admits."""
    locked, problems = parse_lock(lock_text)
    for line in requirements:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate(IMAGE_ENV):
            continue
        name = canonicalize_name(req.name)
        if name not in locked:
            problems.append(f"{req.name} ({line}) is not in the lock: run `make lock`")
        elif not req.specifier.contains(locked[name], prereleases=True):
            problems.append(
                f"{req.name} is locked at {locked[name]}, which `{line}` does not admit: "
                "run `make lock`"
            )
    return problems


def test_the_lock_covers_every_dependency_of_pyproject_at_an_admitted_version() -> None:
    assert lock_problems(PYPROJECT["project"]["dependencies"], LOCK.read_text()) == []


def test_the_build_lock_covers_the_build_system_requirements() -> None:
    assert lock_problems(PYPROJECT["build-system"]["requires"], BUILD_LOCK.read_text()) == []


def test_the_locked_dependencies_of_the_installed_packages_are_locked_too() -> None:
    """Closure, as far as this environment can tell offline: a locked package installed here at
    its locked version has each of its own requirements (for the image's platform, no extras)
    in the lock, at an admitted version. (The image build's `pip check` sees all of them.)"""
    locked, _ = parse_lock(LOCK.read_text())
    seen = 0
    problems: list[str] = []
    for name, version in locked.items():
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        if Version(dist.version) != version:
            continue
        seen += 1
        requires = [
            r
            for r in (Requirement(s) for s in dist.requires or [])
            if r.marker is None or r.marker.evaluate({**IMAGE_ENV, "extra": ""})
        ]
        problems += [
            f"{name}: {p}" for p in lock_problems([str(r) for r in requires], LOCK.read_text())
        ]
    assert problems == []
    assert seen >= len(PYPROJECT["project"]["dependencies"]), "the venv holds the locked versions"


def test_a_lock_that_drifted_from_pyproject_is_caught() -> None:
    drifted = (
        "kopf==1.44.0 \\\n"
        "    --hash=sha256:" + "a" * 64 + "\n"
        "httpx==0.28.1\n"
        "pyyaml==6.0.3 \\\n"
        "    --hash=sha256:" + "b" * 64 + "\n"
        "pyyaml==6.0.3 \\\n"
        "    --hash=sha256:" + "c" * 64 + "\n"
        "--index-url somewhere\n"
    )
    problems = lock_problems(
        [
            "kopf==1.45.2",
            "httpx==0.28.1",
            "pyyaml==6.0.3",
            "uvicorn>=0.50",
            "tomli; python_version<'3.11'",
        ],
        drifted,
    )
    assert problems == [
        "line 6: pyyaml is locked twice",
        "line 8: neither `name==version` nor a sha256 hash: '--index-url somewhere'",
        "httpx has no --hash",
        "kopf is locked at 1.44.0, which `kopf==1.45.2` does not admit: run `make lock`",
        "uvicorn (uvicorn>=0.50) is not in the lock: run `make lock`",
    ]
