"""Configuration of the official Kubernetes client, for the few calls made with it."""

from __future__ import annotations

import os

from kubernetes import config as k8s_config

from takoform_spec.errors import TakoformError


class KubeConfigUnusable(TakoformError):
    """Neither a kubeconfig nor a pod's ServiceAccount the client can use: one line for the
    user, never the client library's traceback."""


def load_kube_config() -> None:
    """The kubeconfig (KUBECONFIG or ~/.kube/config) when there is one, else the pod's
    ServiceAccount: what the client's load_config does, without its print to stdout (which
    would break JSON log lines). Raises KubeConfigUnusable."""
    named = os.environ.get("KUBECONFIG")
    default = os.path.expanduser("~/.kube/config")
    try:
        if named or os.path.exists(default):
            k8s_config.load_kube_config()  # type: ignore[no-untyped-call]
        else:
            k8s_config.load_incluster_config()  # type: ignore[no-untyped-call]
    except Exception as exc:  # the client raises ConfigException, and TypeError on garbage
        where = f"KUBECONFIG={named}" if named else default
        if not named and not os.path.exists(default):
            where = "no kubeconfig and not in a pod"
        if isinstance(exc, TypeError | AttributeError | ValueError):
            reason = "the file is not a kubeconfig"
        else:
            reason = str(exc).rstrip(".") or type(exc).__name__
        raise KubeConfigUnusable(
            f"cannot use the Kubernetes configuration ({where}): {reason}; set KUBECONFIG to a "
            "valid kubeconfig file, or run in a pod with a ServiceAccount"
        ) from None
