"""Host conformance suite: named checks proving each MUST (H-<n>) of docs/host-api.md.

    from takoform_conformance import run
    results = run("http://127.0.0.1:8080", token, admin_token=None).results

See docs/conformance.md for the checks and how to run them (`takoform-conformance --help`).
"""

from .checks import CHECK_NAMES, CHECKS, Check, cited_rules
from .outcomes import CheckResult, HostUnusable
from .runner import RunReport, run

__all__ = [
    "CHECKS",
    "CHECK_NAMES",
    "Check",
    "CheckResult",
    "HostUnusable",
    "RunReport",
    "cited_rules",
    "run",
]
