"""A run's verdict: a required check that was skipped is not a pass (no host needed)."""

from __future__ import annotations

import pytest

from takoform_conformance import CheckResult, RunReport


def result(name: str, outcome: str, *, required: bool = True) -> CheckResult:
    return CheckResult(name, ("H-1",), required, outcome)


@pytest.mark.parametrize(
    ("results", "allow_skips", "ok", "unproven"),
    [
        pytest.param([result("a", "pass")], False, True, [], id="all passed"),
        pytest.param([result("a", "skipped")], False, False, ["a"], id="required skipped"),
        pytest.param(
            [result("a", "skipped")], True, True, ["a"], id="required skipped, skips allowed"
        ),
        pytest.param(
            [result("a", "skipped", required=False)], False, True, [], id="optional skipped"
        ),
        pytest.param(
            [result("a", "fail"), result("b", "skipped")],
            True,
            False,
            ["b"],
            id="a failure is never allowed",
        ),
        pytest.param([result("a", "fail", required=False)], False, True, [], id="optional failed"),
    ],
)
def test_verdict(
    results: list[CheckResult], allow_skips: bool, ok: bool, unproven: list[str]
) -> None:
    report = RunReport("http://host", results, allow_skips=allow_skips)
    assert report.ok is ok
    assert report.unproven == unproven
