"""What a check can end in: pass, fail naming the broken rule, skip saying why; and its result.

A check (checks.common.Check) is a function of a `Context`. It raises `CheckFailed` (naming the
H-rule it caught being broken) or `CheckSkipped` (saying why it could not run), and otherwise
passes. Nothing here knows the context: it raises these too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


class CheckFailed(Exception):
    """The host broke a rule; the message names it."""


class CheckSkipped(Exception):
    """The check could not run against this host or with these credentials."""


class HostUnusable(Exception):
    """The host cannot be tested at all (unreachable, token refused): a usage error, exit 2."""


def fail(message: str) -> CheckFailed:
    return CheckFailed(message)


def ensure(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


@dataclass
class CheckResult:
    name: str
    cites: tuple[str, ...]
    required: bool
    result: str  # "pass" | "fail" | "skipped"
    reason: str = ""
    seconds: float = 0.0

    @property
    def failed(self) -> bool:
        return self.result == "fail"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "cites": list(self.cites),
            "required": self.required,
            "result": self.result,
            "reason": self.reason,
            "seconds": round(self.seconds, 3),
        }
