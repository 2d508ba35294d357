"""TakoformHosts, their token Secrets and TakoformSpaceGrants on the real API server, for tests."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

GROUP_VERSION = "operator.takoform.io/v1alpha1"


def grant_manifest(
    name: str,
    host: str,
    spaces: Sequence[str],
    namespaces: Sequence[str] = (),
    selector: dict[str, Any] | None = None,
) -> str:
    target: dict[str, Any] = {}
    if namespaces:
        target["names"] = list(namespaces)
    if selector is not None:
        target["selector"] = selector
    return json.dumps(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "TakoformSpaceGrant",
            "metadata": {"name": name},
            "spec": {"hostRef": host, "spaces": list(spaces), "namespaces": target},
        }
    )


@contextmanager
def granted(
    cluster: Any, namespace: str, spaces: Sequence[str], host: str = "default"
) -> Iterator[str]:
    """A grant of `spaces` on `host` to `namespace` (cluster-scoped, removed afterwards)."""
    name = f"{namespace}-{host}"[:253]
    cluster.apply(grant_manifest(name, host, spaces, [namespace]))
    try:
        yield name
    finally:
        cluster.delete("takoformspacegrant", name)


#: The annotation that opts a Secret in as the credential of hosts, each at one URL.
CREDENTIAL_ANNOTATION = "takoform.io/host-credential-for"


def opt_in(hosts: Mapping[str, str]) -> str:
    """The annotation's value for {host name: URL}: `HOST=URL`, comma-separated."""
    return ",".join(f"{name}={url}" for name, url in hosts.items())


def _opt_in(hosts: Mapping[str, str]) -> dict[str, Any]:
    return {"annotations": {CREDENTIAL_ANNOTATION: opt_in(hosts)}} if hosts else {}


def token_secret(
    cluster: Any, namespace: str, name: str, token: str, hosts: Mapping[str, str] | None = None
) -> None:
    """Create or replace the Secret holding a host token (key `token`), opted in as the
    credential of `hosts`, {host name: URL} (none: not opted in, so the operator never sends
    it)."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, **_opt_in(hosts or {})},
        "stringData": {"token": token},
    }
    cluster.apply(json.dumps(secret))


def tls_secrets(
    cluster: Any,
    namespace: str,
    ca: tuple[str, Path],
    client: tuple[str, tuple[Path, Path]],
    hosts: Mapping[str, str] | None = None,
) -> None:
    """Create or replace a host's CA bundle Secret (key ca.crt) and client certificate Secret
    (kubernetes.io/tls) from PEM files, opted in as credentials of `hosts` ({name: URL})."""
    (ca_name, ca_file), (client_name, (cert, key)) = ca, client
    for name, kind, data in (
        (ca_name, "Opaque", {"ca.crt": ca_file}),
        (client_name, "kubernetes.io/tls", {"tls.crt": cert, "tls.key": key}),
    ):
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": kind,
            "metadata": {"name": name, "namespace": namespace, **_opt_in(hosts or {})},
            "stringData": {key_: path.read_text() for key_, path in data.items()},
        }
        cluster.apply(json.dumps(secret))


def host_manifest(
    name: str,
    url: str,
    secret: str,
    *,
    default: bool = False,
    ca_secret: str | None = None,
    client_secret: str | None = None,
    insecure: bool | None = None,
) -> str:
    """A TakoformHost; a plain http URL (the local reference host) says insecure: true unless
    `insecure` says otherwise."""
    spec: dict[str, Any] = {
        "url": url,
        "insecure": url.startswith("http://") if insecure is None else insecure,
        "tokenSecretRef": {"name": secret, "key": "token"},
        "timeoutSeconds": 5,
        "default": default,
    }
    if ca_secret is not None:
        spec["caBundleSecretRef"] = {"name": ca_secret}
    if client_secret is not None:
        spec["clientCertSecretRef"] = {"name": client_secret}
    return json.dumps(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "TakoformHost",
            "metadata": {"name": name},
            "spec": spec,
        }
    )


def binding_of(
    cluster: Any, kind: str, name: str, space: str = "team-a", host: str = "default"
) -> dict[str, Any] | None:
    """The TakoformBinding of a host resource (a Form kind of the storage group by default, e.g.
    `Bucket`, or `group/version/Kind`), as the API server holds it; None when there is none."""
    from takoform_operator.core.binding import Identity
    from takoform_spec.identity import FormLine

    api_version = "storage.takoform.io/v1"
    if kind.count("/") == 2:
        group, version, kind = kind.split("/")
        api_version = f"{group}/{version}"
    identity = Identity(space, FormLine(api_version, kind), name, host)
    found: dict[str, Any] | None = cluster.get_object("takoformbinding", identity.binding_name())
    return found
