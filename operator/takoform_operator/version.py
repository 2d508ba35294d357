"""What this build is: the package version (its metadata), the Python and the kopf it runs on.
Printed by `takoform-operator --version`, logged once at start, exported as
`takoform_build_info` (metrics)."""

from __future__ import annotations

import platform
from importlib.metadata import PackageNotFoundError, version


def _version_of(package: str) -> str:
    try:
        return version(package)
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown"


def build_info() -> dict[str, str]:
    """`{"version": ..., "python": ..., "kopf": ...}`, the labels of takoform_build_info."""
    return {
        "version": _version_of("takoform-operator"),
        "python": platform.python_version(),
        "kopf": _version_of("kopf"),
    }


def user_agent() -> str:
    """`takoform-operator/0.1.0`: how the operator names itself to the API server, which takes
    the part before the slash as the field manager of its writes (`managedFields`, audit logs),
    instead of the client library's name."""
    return f"takoform-operator/{_version_of('takoform-operator')}"


def describe() -> str:
    """`takoform-operator 0.1.0 (python 3.12.3, kopf 1.45.2)`."""
    info = build_info()
    return f"takoform-operator {info['version']} (python {info['python']}, kopf {info['kopf']})"
