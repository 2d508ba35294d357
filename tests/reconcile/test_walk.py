"""The life of one CR stays one short walk (issue: "one screen"): hack/walk.py follows each look
of a new Bucket against the real host, and every look keeps within the walk the architecture
promises (docs/architecture.md): at most 50 stays in 15 rooms, at most 25 of them returns to a
room already left. A new hop between modules in the look's path shows here first."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
from processes import HostProcess

pytestmark = pytest.mark.host

HACK = Path(__file__).resolve().parents[2] / "hack"


def _walk_script() -> ModuleType:
    # hack/ is not a package; load the script from its file (it imports bench_host beside it).
    sys.path.insert(0, str(HACK))
    spec = importlib.util.spec_from_file_location("walk", HACK / "walk.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_every_look_of_a_new_cr_is_a_short_walk(
    host_factory: Callable[..., HostProcess],
) -> None:
    script = _walk_script()
    host = host_factory(commit_delay=0, extra_args=("--space", script.SPACE))
    found = await script.walks(host.url, host.token)
    names = [name for name, _ in found]
    assert names[0] == "first (create)" and names[-1] == "steady", names
    for name, walk in found:
        stays, rooms, returns = walk.figures()
        where = f"{name}: {' > '.join(walk.stays)}"
        assert walk.stays[0] == walk.stays[-1] == "takoform_operator.kube.cr_step", where
        assert stays <= 50 and rooms <= 15 and returns <= 25, (stays, rooms, returns, where)
