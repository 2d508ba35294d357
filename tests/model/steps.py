"""Replaying a fixed sequence of model steps (the shrunk examples kept as regression tests).

Each step is a rule of `OwnershipModel` with its arguments, followed by the invariants, exactly
as hypothesis runs it; the sequence ends with the liveness phase (teardown).
"""

from __future__ import annotations

from typing import Any

from .machine import OwnershipModel, World

Step = tuple[str, dict[str, Any]]


def step(rule: str, **arguments: Any) -> Step:
    return (rule, arguments)


def replay(world: World, steps: list[Step], *, known_defects: bool = False) -> OwnershipModel:
    """Run `steps`; `known_defects=False` (the default) lets no known defect pass as settled."""
    machine = OwnershipModel.bind(world)()
    machine.known_defect = known_defects
    try:
        machine.check()
        for rule, arguments in steps:
            getattr(machine, rule)(**arguments)
            machine.check()
    except BaseException:
        machine.broken = True
        raise
    finally:
        machine.teardown()
    return machine
