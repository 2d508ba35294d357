"""Fixtures shared by every test package live in tests/support (on pytest's pythonpath)."""

pytest_plugins = ["fixtures_kube", "fixtures_host", "fixtures_helm"]
