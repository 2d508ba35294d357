"""pytest fixtures for tests that need the reference host as a real process.

- ``host_factory`` (function): ``host_factory(spaces=(), **options)`` starts a ``takoform-host
  serve`` subprocess (a ``HostProcess`` with `options`: misbehaviours, commit_delay, retention,
  packages, extra_args, tls) on a free loopback port with a fresh database, creates `spaces` on
  it (e.g. ``spaces=["team-a"]``) and returns the ``HostProcess``. Every
  host it started is stopped at teardown; when the test failed, the host's log tail is printed.
- ``reference_host`` (session): one shared conforming host (commit delay 0.05 s). Tests must not
  change its misbehaviours or faults: use ``host_factory`` for that.

Tests using them should be marked ``@pytest.mark.host``. ``HostProcess`` itself is in processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from processes import HostProcess

_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    report: pytest.TestReport = yield
    if report.failed:
        item.stash[_FAILED] = True
    return report


@pytest.fixture
def host_factory(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Callable[..., HostProcess]]:
    started: list[HostProcess] = []

    def factory(*, spaces: Sequence[str] = (), **options: Any) -> HostProcess:
        host = HostProcess(tmp_path_factory.mktemp("host"), **options)
        started.append(host)
        host.start()
        with host.api() as api:
            for space in spaces:
                api.put(f"/v1alpha3/spaces/{space}").raise_for_status()
        return host

    yield factory
    failed = request.node.stash.get(_FAILED, False)
    for host in started:
        host.stop()
        if failed:
            print(f"\n--- log tail of {host} ---\n{host.log_tail()}")


@pytest.fixture(scope="session")
def reference_host(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HostProcess]:
    with HostProcess(tmp_path_factory.mktemp("reference-host"), commit_delay=0.05) as host:
        yield host
