"""The image `make image` builds, read from its OCI archive: no shell and no pip in its root
filesystem, exactly the locked dependency versions installed, and its base recorded by digest."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = [pytest.mark.node, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
SITE = "usr/local/lib/python3.11/site-packages/"


def _check_image() -> ModuleType:
    # hack/ is not a package and not on sys.path; load the module from its file.
    spec = importlib.util.spec_from_file_location("check_image", REPO / "hack/image/check_image.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_image_has_no_shell_no_pip_and_exactly_the_locked_dependencies(
    operator_image: Path,
) -> None:
    check = _check_image()
    image = check.read_image(str(operator_image))
    assert check.problems(image) == []
    assert "usr/bin/python3.11" in image.files and len(image.files) > 1000, "a real root"

    installed = {
        (_canonical(m[1]), m[2])
        for path in image.files
        if (m := re.fullmatch(re.escape(SITE) + r"([^/]+)-([^-/]+)\.dist-info", path))
    }
    locked = {
        (_canonical(m[1]), m[2])
        for line in (REPO / "requirements.lock").read_text().splitlines()
        if (m := re.match(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)", line))
    }
    assert installed == locked | {("takoform-operator", "0.1.0")}


def test_the_image_records_the_digest_of_the_base_it_was_built_on(operator_image: Path) -> None:
    check = _check_image()
    labels = check.read_image(str(operator_image)).config["config"]["Labels"]
    recorded = operator_image.with_name(operator_image.name.replace(".oci.tar", ".base"))
    base = recorded.read_text().strip()
    assert re.fullmatch(r"\S+@sha256:[0-9a-f]{64}", base), base
    assert base.endswith("@" + labels["org.opencontainers.image.base.digest"])
    assert labels["org.opencontainers.image.base.name"].startswith(base.split("@")[0])
