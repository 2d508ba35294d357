"""The ownership model checker, run with a fixed budget in CI and a long budget on demand.

`TAKOFORM_MODEL_PROFILE` chooses the budget: `ci` (default: a fixed, derandomized set of
examples) or `long` (`make check-model`: >= 10,000 sequences from `--hypothesis-seed`). The
profile, its size and the seed are printed, so a failure replays with the same command.
"""

from __future__ import annotations

import os
import sys
import time

import pytest
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from .machine import OwnershipModel, World

pytestmark = [pytest.mark.host, pytest.mark.slow]

_COMMON: dict[str, object] = {
    "database": None,
    "stateful_step_count": 30,
    "suppress_health_check": list(HealthCheck),
    "report_multiple_bugs": False,
}
PROFILES = {
    "ci": settings(max_examples=200, derandomize=True, **_COMMON),  # type: ignore[arg-type]
    "long": settings(
        max_examples=int(os.environ.get("TAKOFORM_MODEL_EXAMPLES", "10000")),
        derandomize=False,
        phases=(Phase.generate, Phase.shrink),
        **_COMMON,  # type: ignore[arg-type]
    ),
}


def test_ownership_model(model_world: World, request: pytest.FixtureRequest) -> None:
    profile = os.environ.get("TAKOFORM_MODEL_PROFILE", "ci")
    chosen = PROFILES[profile]
    seed = request.config.getoption("hypothesis_seed", None)
    print(
        f"\nmodel checker: profile={profile} max_examples={chosen.max_examples} "
        f"steps<={chosen.stateful_step_count} derandomize={chosen.derandomize} seed={seed}",
        file=sys.stderr,
    )
    started = time.monotonic()
    machine = OwnershipModel.bind(model_world)
    run_state_machine_as_test(machine, settings=chosen)
    print(f"model checker: done in {time.monotonic() - started:.1f}s", file=sys.stderr)
