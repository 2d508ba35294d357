"""TakoformHosts, their token Secrets and TakoformSpaceGrants on the real API server, for tests."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
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
        cluster.kubectl("delete", "takoformspacegrant", name, "--wait=false", check=False)


def token_secret(cluster: Any, namespace: str, name: str, token: str) -> None:
    """Create or replace the Secret holding a host token (key `token`)."""
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "stringData": {"token": token},
    }
    cluster.apply(json.dumps(secret))


def tls_secrets(
    cluster: Any, namespace: str, ca: tuple[str, Path], client: tuple[str, tuple[Path, Path]]
) -> None:
    """Create or replace a host's CA bundle Secret (key ca.crt) and client certificate Secret
    (kubernetes.io/tls) from PEM files."""
    (ca_name, ca_file), (client_name, (cert, key)) = ca, client
    for name, kind, data in (
        (ca_name, "Opaque", {"ca.crt": ca_file}),
        (client_name, "kubernetes.io/tls", {"tls.crt": cert, "tls.key": key}),
    ):
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": kind,
            "metadata": {"name": name, "namespace": namespace},
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
) -> str:
    spec: dict[str, Any] = {
        "url": url,
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
