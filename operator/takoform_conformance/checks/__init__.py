"""The named checks, one module per section of docs/host-api.md, in the suite's order.

Each check proves the H-numbered MUSTs it cites. A check fails with a message that starts with the
H-number it caught being broken, so a reader of the table knows which sentence of the normative
text the host did not keep.
"""

from __future__ import annotations

from . import conventions, envelope, forms, idempotency, mutations, operations, spaces
from .common import Check

CHECKS: list[Check] = [
    *conventions.CHECKS,
    *spaces.CHECKS,
    *forms.CHECKS,
    *envelope.CHECKS,
    *mutations.CHECKS,
    *idempotency.CHECKS,
    *operations.CHECKS,
]
CHECK_NAMES = [c.name for c in CHECKS]


def cited_rules() -> set[int]:
    """Every H-number some check cites."""
    return {int(cite[2:]) for c in CHECKS for cite in c.cites if cite.startswith("H-")}


__all__ = ["CHECKS", "CHECK_NAMES", "Check", "cited_rules"]
