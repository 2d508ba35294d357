"""Shared test support lives in tests/support (on pytest's pythonpath; the hack/ scripts put it on
sys.path too), one module per concern:

- ``fixtures_kube``, ``fixtures_host``, ``fixtures_helm``: the pytest fixtures (plugins below);
- ``processes``: the reference host as a real process (``HostProcess``) and ``free_port()``;
- ``waiting``: every wait - for a condition, for a host operation to settle - with a timeout that
  fails loudly. Tests never sleep to let something happen: they await it (`make lint` runs
  hack/check_test_sleeps.py, which reports any other sleep);
- ``runners``: kubectl, helm and promtool, run one way;
- ``operator_process``: a real ``takoform-operator run`` process.
"""

import pytest
from hypothesis import settings

pytest_plugins = ["fixtures_kube", "fixtures_host", "fixtures_helm"]

# Hypothesis fails an example that takes longer than its deadline (200 ms): a timed assertion,
# which a loaded machine (the suite beside a control plane, or a benchmark) fails at random.
# What a property asserts is never how fast it holds.
settings.register_profile("takoform", deadline=None)
settings.load_profile("takoform")


# -- parallel workers (`make test` runs pytest-xdist: `-n 4`) -------------------------------------
#
# Each worker is its own pytest session: its own control plane, reference host and operators, so
# tests on different workers share nothing but the machine. The scheduler below hands out whole
# groups: a module (its module-scoped fixtures are set up once, its tests keep their order); all
# of tests/node, because the node they run pods on (kubelet, containerd, the image store) is one
# per machine; and each soak variant alone (each runs a control plane of its own).
# pytest-xdist's own `--dist loadgroup` would say the same with marks, but it cannot rename items
# under pytest 9, so the groups are named here, from the test ids the scheduler sees.
# The groups that take longest are collected first, so they start first.

NODE_TESTS = "tests/node/"
# Lower goes first: pods on the node, then the other slow runs, then Kubernetes, host, the rest.
_WEIGHTS = (("node", 0), ("slow", 1), ("kube", 2), ("host", 3))
ONE_GROUP_PER_TEST = ("tests/soak/",)


def _weight(item: pytest.Item) -> int:
    return min((w for name, w in _WEIGHTS if item.get_closest_marker(name)), default=len(_WEIGHTS))


def group_of(nodeid: str) -> str:
    """The group a test runs in: every test of one group on one worker, in collection order."""
    if nodeid.startswith(NODE_TESTS):
        return NODE_TESTS
    if nodeid.startswith(ONE_GROUP_PER_TEST):
        return nodeid
    return nodeid.split("::")[0]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("node") and not item.nodeid.startswith(NODE_TESTS):
            raise pytest.UsageError(f"{item.nodeid}: tests marked node live in {NODE_TESTS}")
    groups: dict[str, list[pytest.Item]] = {}
    for item in items:
        groups.setdefault(group_of(item.nodeid), []).append(item)
    ordered = sorted(groups.values(), key=lambda members: min(map(_weight, members)))
    items[:] = [item for members in ordered for item in members]


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    from xdist.scheduler import LoadScopeScheduling

    class Groups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return group_of(nodeid)

    config.option.loadscopereorder = False  # keep the collection's order: longest groups first
    return Groups(config, log)  # type: ignore[arg-type]
