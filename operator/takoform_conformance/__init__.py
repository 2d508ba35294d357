"""Host conformance suite: named checks proving each MUST (H-<n>) of docs/host-api.md.

    from takoform_conformance import run_checks
    results = run_checks("http://127.0.0.1:8080", token, admin_token=None)

See docs/conformance.md for the checks and how to run them (`takoform-conformance --help`).
"""

from .checks import CHECK_NAMES, CHECKS, Check, cited_rules
from .outcomes import CheckResult, HostUnusable
from .runner import RunReport, run, run_checks

__all__ = [
    "CHECKS",
    "CHECK_NAMES",
    "Check",
    "CheckResult",
    "HostUnusable",
    "RunReport",
    "cited_rules",
    "run",
    "run_checks",
]
