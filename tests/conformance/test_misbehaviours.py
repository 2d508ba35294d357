"""Every misbehaviour switch of the reference host makes the check proving its rule FAIL.

One host serves all switches (toggled through the admin API between runs): only the matching
check is run and asserted; what a switch does to the other checks does not matter here.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from processes import HostProcess

from takoform_conformance import run

from .switches import SWITCH_TO_CHECK

pytestmark = pytest.mark.host


@pytest.fixture(scope="module")
def misbehaving_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    with HostProcess(tmp_path_factory.mktemp("misbehaving-host"), commit_delay=0.02) as host:
        yield host


def test_every_switch_of_the_host_has_a_check(misbehaving_host: HostProcess) -> None:
    doc = misbehaving_host.admin("GET", "/admin/v1/misbehaviours").json()
    available = {item["name"] for item in doc["available"]}
    assert available == set(SWITCH_TO_CHECK)


@pytest.mark.parametrize("switch", sorted(SWITCH_TO_CHECK))
def test_switch_makes_its_check_fail(misbehaving_host: HostProcess, switch: str) -> None:
    check, rules = SWITCH_TO_CHECK[switch]
    host = misbehaving_host
    # The control: the check passes on this host with every switch off.
    [control] = run(host.url, host.token, host.admin_token, only=[check]).results
    assert control.result == "pass", control.reason
    host.set_misbehaviours([switch])
    try:
        [result] = run(host.url, host.token, host.admin_token, only=[check]).results
    finally:
        host.set_misbehaviours([])
    assert result.result == "fail", f"{check} did not fail with {switch} on: {result}"
    assert result.reason.startswith(tuple(rules) + tuple(f"{r}/" for r in rules)), (
        f"the failure should cite {rules}: {result.reason}"
    )


def test_cli_exits_1_against_a_host_misbehaving_from_start_up(host_factory: Any) -> None:
    host = host_factory(misbehaviours=["weak-etag"])
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "takoform_conformance.cli",
            "--host",
            host.url,
            "--token",
            host.token,
            "--only",
            "etag-is-quoted-revision",
            "uid-stability",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    doc = json.loads(result.stdout)
    results = {c["name"]: c for c in doc["checks"]}
    assert results["etag-is-quoted-revision"]["result"] == "fail"
    assert results["etag-is-quoted-revision"]["reason"].startswith("H-16: ")
    assert results["uid-stability"]["result"] == "pass"
    assert doc["summary"]["requiredFailed"] == 1
