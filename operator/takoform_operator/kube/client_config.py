"""Configuration of the official Kubernetes client, for the few calls made with it."""

from __future__ import annotations

import os

from kubernetes import config as k8s_config


def load_kube_config() -> None:
    """The kubeconfig (KUBECONFIG or ~/.kube/config) when there is one, else the pod's
    ServiceAccount: what the client's load_config does, without its print to stdout (which
    would break JSON log lines)."""
    if os.environ.get("KUBECONFIG") or os.path.exists(os.path.expanduser("~/.kube/config")):
        k8s_config.load_kube_config()  # type: ignore[no-untyped-call]
    else:
        k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
