"""Configuration of the official Kubernetes client, for the few calls made with it."""

from __future__ import annotations

import os
from typing import Any

from kubernetes import config as k8s_config

from takoform_operator.version import user_agent
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


def api_client() -> Any:
    """A client of the loaded configuration that names the operator (version.user_agent), for
    the official client's API classes; each gets its own, as they would by default."""
    from kubernetes import client as k8s  # its models cost a second to import: only when used

    client = k8s.ApiClient()
    client.user_agent = user_agent()
    return client
