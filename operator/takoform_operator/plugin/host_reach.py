"""How the plugin reaches a host from where it runs, a laptop rather than the cluster.

- The URL dialled: `--host-url` (or KUBECTL_TAKOFORM_HOST_URL) replaces only the address a client
  connects to, for a port-forward to a host whose own URL is an in-cluster name. The host's
  Secrets are still used only as credentials of that host at its own URL (docs/tenancy.md), and
  the address dialled is https, or plain http to this machine only (kubectl carries a
  port-forward over the API server's TLS).
- The implicit host `default` of the operator in the cluster, when the shell does not configure
  one (no TAKOFORM_HOST_URL): the Secret of the operator's namespace opted in as the credential
  of `default` (the chart's host.tokenSecret, or its reference host's) names its URL and holds
  its token.
- A Secret the user may not read: one line naming the right it takes and the way around it.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from urllib.parse import urlsplit

from takoform_operator.core.state import DEFAULT_HOST
from takoform_operator.core.tenancy import SecretKeyRef, credential_entries
from takoform_operator.host_client.pool import Endpoint, SecretReader, SecretToken
from takoform_operator.plugin.cluster import Cluster, Forbidden, PluginError
from takoform_operator.plugin.render import UsageError
from takoform_operator.settings import Settings

#: The environment variable --host-url defaults to.
HOST_URL_ENV = "KUBECTL_TAKOFORM_HOST_URL"

#: Where a plain http URL may be dialled: this machine (a port-forward).
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})

#: How the way around a Secret the user may not read is said.
WITHOUT_SECRETS = (
    "or give the implicit host `default` in your shell instead: TAKOFORM_HOST_URL and "
    "TAKOFORM_HOST_TOKEN (a port-forward to an in-cluster host: docs/deployment.md, "
    '"Try it in any cluster")'
)


def add_host_url(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--host-url",
        help="connect to the host at this URL instead of its own (a port-forward, e.g. "
        f"http://127.0.0.1:8787); its credentials stay those of its own URL (default: "
        f"{HOST_URL_ENV}); http only to this machine",
    )


def dialled_url(flag: str | None) -> str | None:
    """The URL to dial instead of the host's (--host-url, else KUBECTL_TAKOFORM_HOST_URL);
    raises UsageError for one that may not carry a token."""
    url = (flag or os.environ.get(HOST_URL_ENV) or "").strip().rstrip("/")
    if not url:
        return None
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return url
    if parts.scheme == "http" and parts.hostname in LOOPBACK:
        return url
    raise UsageError(
        f"--host-url {url!r}: a host's token is sent over https, or over plain http to this "
        "machine only (127.0.0.1, ::1, localhost: a port-forward)"
    )


def secret_forbidden(namespace: str, name: str, exc: Forbidden) -> PluginError:
    """The user may not read Secret `name`, a host's credential."""
    return PluginError(
        f"cannot read Secret {namespace}/{name}, a host's credential, with your rights: it takes "
        f"`get` on secrets in namespace {namespace} ({exc}); ask a cluster admin for it, "
        + WITHOUT_SECRETS
    )


def configured_in_shell(settings: Settings) -> bool:
    """The shell configures the implicit host (TAKOFORM_HOST_URL): it wins over the cluster."""
    return "host_url" in settings.model_fields_set


def cluster_implicit(
    cluster: Cluster,
    reader: SecretReader,
    settings: Settings,
    warn: Callable[[str], None],
) -> tuple[Endpoint, str] | None:
    """The implicit host `default` as the operator in the cluster is configured: the one Secret
    of its namespace opted in as the credential of `default` at a URL, and that URL; None (with
    a warning saying why) when there is not exactly one, or the Secrets cannot be listed."""
    namespace = reader.namespace
    try:
        secrets = cluster.secret_annotations(namespace)
    except Forbidden as exc:
        warn(
            f"cannot look up the implicit host `default` in namespace {namespace}: it takes "
            f"`list` on secrets there ({exc}); " + WITHOUT_SECRETS
        )
        return None
    found = sorted(
        (url, name)
        for name, annotations in secrets.items()
        for host, url in credential_entries(annotations)
        if host == DEFAULT_HOST and url
    )
    if len(found) != 1:
        if found:
            warn(
                f"{len(found)} Secrets of namespace {namespace} are credentials of the implicit "
                f"host `default` ({', '.join(f'{n} at {u}' for u, n in found)}): say which with "
                "TAKOFORM_HOST_URL"
            )
        return None
    (url, name), key = found[0], settings.host_token_secret_key
    token = SecretToken(reader, SecretKeyRef(name, key), DEFAULT_HOST, url, refresh_seconds=300)
    return Endpoint(url, token, settings.host_timeout_seconds), url
