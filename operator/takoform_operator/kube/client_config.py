"""Where the API server is and who the operator is to it: the kubeconfig (KUBECONFIG or
~/.kube/config) when there is one, else the pod's ServiceAccount. Read by the operator itself,
which covers what a pod or `make run` gives it; a kubeconfig whose user runs a credential plugin
(`exec`, `auth-provider`) is handed to the official client, imported only then."""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from takoform_operator.kube.api import ApiConnection
from takoform_spec.errors import TakoformError

#: Where a pod's ServiceAccount is mounted.
SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


class KubeConfigUnusable(TakoformError):
    """Neither a kubeconfig nor a pod's ServiceAccount that can be used: one line for the user,
    never a traceback."""


def load_connection() -> ApiConnection:
    """The connection the configuration describes, read afresh (a rotated token is picked up).
    Raises KubeConfigUnusable."""
    named = os.environ.get("KUBECONFIG")
    default = os.path.expanduser("~/.kube/config")
    where = f"KUBECONFIG={named}" if named else default
    try:
        if named or os.path.exists(default):
            paths = [Path(os.path.expanduser(p)) for p in (named or default).split(os.pathsep) if p]
            return _from_kubeconfig(paths)
        where = "no kubeconfig and not in a pod"
        return _in_cluster()
    except _Unusable as exc:
        reason = str(exc)
    except OSError as exc:
        reason = f"{exc.strerror or exc}: {exc.filename}" if exc.filename else str(exc)
    except Exception as exc:  # the official client, for credential plugins: its own errors
        reason = str(exc).rstrip(".") or type(exc).__name__
    raise KubeConfigUnusable(
        f"cannot use the Kubernetes configuration ({where}): {reason}; set KUBECONFIG to a "
        "valid kubeconfig file, or run in a pod with a ServiceAccount"
    ) from None


class _Unusable(Exception):
    """What is wrong with the configuration, said for the user."""


def _in_cluster() -> ApiConnection:
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    port = os.environ.get("KUBERNETES_SERVICE_PORT")
    token = SERVICE_ACCOUNT / "token"
    if not host or not port:
        raise _Unusable("KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not set")
    if not token.exists():
        raise _Unusable(f"no ServiceAccount token at {token}")
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    ca = SERVICE_ACCOUNT / "ca.crt"
    return ApiConnection(
        server=f"https://{host}:{port}",
        ca_path=str(ca) if ca.exists() else None,
        token=token.read_text().strip() or None,
    )


def _from_kubeconfig(paths: list[Path]) -> ApiConnection:
    """The current context of the merged files: the first file to set a value wins, as in
    kubectl. Relative paths in a file are relative to that file."""
    current: str | None = None
    entries: dict[str, dict[str, tuple[Mapping[str, Any], Path]]] = {
        "contexts": {},
        "clusters": {},
        "users": {},
    }
    for path in paths:
        if not path.exists() and len(paths) > 1:
            continue  # kubectl skips a missing file of several
        try:
            config = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as exc:
            raise _Unusable(f"the file is not YAML ({path}: {_first_line(exc)})") from None
        if not isinstance(config, dict):
            raise _Unusable("the file is not a kubeconfig")
        current = current or config.get("current-context")
        for kind, known in entries.items():
            for item in config.get(kind) or ():
                if isinstance(item, dict) and isinstance(item.get("name"), str):
                    key = kind[:-1]  # "context", "cluster", "user"
                    known.setdefault(item["name"], (item.get(key) or {}, path.parent))
    if not current:
        raise _Unusable("no current-context")
    context = _entry(entries["contexts"], current, "context")[0]
    cluster, cluster_dir = _entry(entries["clusters"], context.get("cluster"), "cluster")
    user, user_dir = _entry(entries["users"], context.get("user"), "user")
    if not isinstance(cluster.get("server"), str):
        raise _Unusable(f"cluster {context.get('cluster')} has no server")
    if "exec" in user or "auth-provider" in user:
        return _through_official_client(paths)
    return ApiConnection(
        server=cluster["server"],
        ca_path=_path(cluster, "certificate-authority", cluster_dir),
        ca_data=_pem(cluster, "certificate-authority-data"),
        insecure=bool(cluster.get("insecure-skip-tls-verify")),
        token=_token(user, user_dir),
        certificate_path=_path(user, "client-certificate", user_dir),
        certificate_data=_pem(user, "client-certificate-data"),
        private_key_path=_path(user, "client-key", user_dir),
        private_key_data=_pem(user, "client-key-data"),
    )


def _entry(
    known: Mapping[str, tuple[Mapping[str, Any], Path]], name: Any, kind: str
) -> tuple[Mapping[str, Any], Path]:
    if not isinstance(name, str) or name not in known:
        raise _Unusable(f"{kind} {name!r} is not defined")
    entry, directory = known[name]
    if not isinstance(entry, Mapping):
        raise _Unusable(f"{kind} {name!r} is not a mapping")
    return entry, directory


def _path(entry: Mapping[str, Any], key: str, directory: Path) -> str | None:
    value = entry.get(key)
    return str(directory / os.path.expanduser(value)) if isinstance(value, str) and value else None


def _pem(entry: Mapping[str, Any], key: str) -> bytes | None:
    value = entry.get(key)
    if not value:
        return None
    try:
        return base64.b64decode(str(value), validate=True)
    except (binascii.Error, ValueError):
        raise _Unusable(f"{key} is not base64") from None


def _token(user: Mapping[str, Any], directory: Path) -> str | None:
    if isinstance(user.get("token"), str):
        return str(user["token"])
    token_file = _path(user, "tokenFile", directory)
    return Path(token_file).read_text().strip() if token_file else None


def _first_line(exc: Exception) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _through_official_client(paths: list[Path]) -> ApiConnection:
    """A credential plugin runs through the official client (it knows them all); it writes
    certificates given as data to files of its own."""
    from kubernetes import client, config  # megabytes: only for such a kubeconfig

    configuration = client.Configuration()
    # The files named: the client reads KUBECONFIG once, when it is first imported.
    config.load_kube_config(  # type: ignore[no-untyped-call]
        os.pathsep.join(str(p) for p in paths), client_configuration=configuration
    )
    header = configuration.get_api_key_with_prefix(
        "BearerToken"
    ) or configuration.get_api_key_with_prefix("authorization")
    token = header.split(" ", 1)[-1] if header else None
    return ApiConnection(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )
