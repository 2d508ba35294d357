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

pytest_plugins = ["fixtures_kube", "fixtures_host", "fixtures_helm"]
