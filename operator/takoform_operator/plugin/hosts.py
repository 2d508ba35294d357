"""The host a plugin command talks to, with the credentials of the host configuration.

The same rules as the operator (docs/tenancy.md): the TakoformHosts of the cluster, their token
Secrets in the operator's namespace, and the single-host settings (TAKOFORM_HOST_URL,
TAKOFORM_HOST_TOKEN / TAKOFORM_HOST_TOKEN_FILE, ...) as the implicit host named `default`, which a
TakoformHost of that name replaces. Without a name, the host marked default, else the implicit one.
When the shell does not configure the implicit host, the operator's in the cluster is looked up
(plugin.host_reach), and --host-url dials any host through a port-forward.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable

from takoform_operator.core.state import DEFAULT_HOST
from takoform_operator.core.tenancy import (
    InvalidPolicy,
    host_config_from_body,
    implicit_host_refusal,
    url_refusal,
)
from takoform_operator.host_client.pool import Endpoint, HostPool
from takoform_operator.host_port import (
    HostError,
    HostRejected,
    HostUnavailable,
    SecretNotFound,
    StoredSecret,
)
from takoform_operator.plugin.cluster import Cluster, Forbidden, PluginError
from takoform_operator.plugin.host_reach import (
    cluster_implicit,
    configured_in_shell,
    dialled_url,
    secret_forbidden,
)
from takoform_operator.settings import Settings

#: Where the token Secrets live when neither --operator-namespace nor
#: TAKOFORM_OPERATOR_NAMESPACE says (the namespace docs/tenancy.md installs the chart into).
DEFAULT_OPERATOR_NAMESPACE = "takoform-system"


class _ClusterSecrets:
    """The pool's SecretReader: `get` of one Secret in the operator's namespace."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        self._cluster, self.namespace = cluster, namespace

    async def read(self, name: str) -> StoredSecret | None:
        try:
            found = await asyncio.to_thread(self._cluster.secret_data, self.namespace, name)
        except Forbidden as exc:
            raise secret_forbidden(self.namespace, name, exc) from None
        return None if found is None else StoredSecret(*found)


def implicit_endpoint(settings: Settings) -> Endpoint:
    """The implicit host `default` from the single-host settings."""
    verify, cert = settings.host_tls()
    try:
        token = settings.token()
    except OSError as exc:
        raise PluginError(f"cannot read TAKOFORM_HOST_TOKEN_FILE: {exc}") from None
    return Endpoint(settings.host_url, token, settings.host_timeout_seconds, verify, cert)


def host_pool(
    cluster: Cluster,
    settings: Settings,
    operator_namespace: str | None,
    warn: Callable[[str], None],
    *,
    wanted: str | None = None,
    host_url: str | None = None,
) -> tuple[HostPool, str | None]:
    """Every host the cluster configures, plus the implicit one (unless switched off), and why
    the TakoformHosts could not be listed (None: they were). A user who may not list them gets
    the implicit host only, and a warning saying so. `wanted`: the host the command reaches
    (None: the default one); `host_url`: --host-url."""
    namespace = operator_namespace or settings.operator_namespace or DEFAULT_OPERATOR_NAMESPACE
    reader = _ClusterSecrets(cluster, namespace)
    dial = dialled_url(host_url)
    unlisted = None
    try:
        bodies = cluster.takoform_hosts()
    except Forbidden as exc:
        warn(f"{exc}; only the implicit host `default` (TAKOFORM_HOST_URL) is known")
        bodies, unlisted = [], str(exc)
    configs = []
    for body in bodies:
        try:
            configs.append(host_config_from_body(body))
        except InvalidPolicy:
            continue  # the operator ignores it too
    implicit, found = None, None
    refusal = implicit_host_refusal(settings.host_url, settings.host_insecure)
    if settings.implicit_host:
        implicit = implicit_endpoint(settings)
        if (
            wanted in (None, DEFAULT_HOST)
            and unlisted is None  # else a TakoformHost `default` may be hidden from the user
            and not configured_in_shell(settings)
            and all(config.name != DEFAULT_HOST for config in configs)
        ):
            found = cluster_implicit(cluster, reader, settings, warn)
    if found is not None:
        implicit, url = found
        where = f"the implicit host {DEFAULT_HOST!r} at {url} (its credential Secret's URL)"
        refusal = url_refusal(url, settings.host_insecure, where, "TAKOFORM_HOST_INSECURE")
        if refusal is not None:
            refusal += " Or connect through a port-forward: --host-url http://127.0.0.1:PORT."
    if dial is not None:
        refusal = None  # dialled_url: https, or plain http to this machine only
    pool = HostPool(
        reader,
        read_retries=settings.host_read_retries,
        implicit=implicit,
        implicit_refusal=refusal,
        dial=dial,
    )
    for config in configs:
        pool.observe(config)
    return pool, unlisted


def chosen_host(pool: HostPool, name: str | None, unlisted: str | None = None) -> str:
    """The host named by --host (or recorded in a CR's status), else the default host.
    `unlisted`: why the TakoformHosts could not be listed (host_pool)."""
    known = pool.names()
    if name is None:
        default = pool.default_host()
        if default is None:
            raise PluginError(
                "no default host: more than one TakoformHost is marked default, or none is and "
                f"the implicit host is switched off; name one with --host (known: "
                f"{', '.join(known) or 'none'})"
            )
        return default
    if name not in known and unlisted is not None:
        raise PluginError(
            f"cannot read TakoformHost {name!r} with your rights (listing TakoformHosts is "
            "forbidden): reaching the host needs a cluster admin's rights (takoform-admin) and "
            "its credentials in the operator's namespace"
        )
    if name not in known:
        implicit = (
            " (the implicit host `default` is switched off: TAKOFORM_IMPLICIT_HOST=false)"
            if name == DEFAULT_HOST
            else ""
        )
        raise PluginError(
            f"no TakoformHost named {name!r}{implicit}; known hosts: {', '.join(known) or 'none'}"
        )
    return name


def host_problem(host: str, exc: HostError) -> str:
    """What a command says about a host read that failed."""
    if isinstance(exc, SecretNotFound):
        return str(exc)
    if isinstance(exc, HostUnavailable):
        return f"cannot reach host {host}: {exc}"
    if isinstance(exc, HostRejected):
        return f"host {host} refused: {exc}"
    return f"host {host}: {exc}"


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
