"""hack/check_test_sleeps.py: what counts as a sleep, the allow-list, and the tree as it is."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    # hack/ is not a package; load the script from its file.
    spec = importlib.util.spec_from_file_location(
        "check_test_sleeps", REPO / "hack" / "check_test_sleeps.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


check = _load()


def _file(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "test_sample.py"
    path.write_text(textwrap.dedent(source))
    return path


@pytest.mark.parametrize(
    "source",
    [
        "import time\ndef test_x():\n    time.sleep(0.1)\n",
        "import asyncio\nasync def test_x():\n    await asyncio.sleep(0.1)\n",
        "import asyncio as aio\nasync def test_x():\n    await aio.sleep(0)\n",
        "from time import sleep\ndef test_x():\n    sleep(1)\n",
        "from asyncio import sleep as nap\nasync def test_x():\n    await nap(1)\n",
        "import time\nclass TestX:\n    def test_x(self):\n        time.sleep(1)\n",
    ],
    ids=["time", "asyncio", "aliased-module", "from-import", "aliased-function", "method"],
)
def test_a_sleep_in_a_test_is_reported(tmp_path: Path, source: str) -> None:
    [problem] = check.problems([_file(tmp_path, source)])
    assert "test_x sleeps" in problem and "test_sample.py" in problem


@pytest.mark.parametrize(
    "source",
    [
        # A fake sleep injected into the code under test is not a sleep of the test.
        "async def test_x():\n    async def sleep(s):\n        pass\n    await sleep(5)\n",
        "import time\ndef test_x():\n    time.monotonic()\n",
    ],
    ids=["injected-fake", "other-time-function"],
)
def test_what_is_not_a_sleep_is_not_reported(tmp_path: Path, source: str) -> None:
    assert check.problems([_file(tmp_path, source)]) == []


def test_the_allow_list_names_a_function_and_must_stay_current(tmp_path: Path) -> None:
    path = _file(tmp_path, "import time\ndef deliberate():\n    time.sleep(1)\n")
    allowed = {(str(path), "deliberate"): "the delay is the behaviour under test"}
    assert check.problems([path], allowed) == []
    path.write_text("def deliberate():\n    pass\n")
    [stale] = check.problems([path], allowed)
    assert "no longer does" in stale


def test_no_test_sleeps_outside_the_allow_list() -> None:
    assert check.problems([REPO / "tests"]) == []
