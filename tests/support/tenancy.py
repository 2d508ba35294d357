"""TakoformHosts, their token Secrets and TakoformSpaceGrants on the real API server, for tests."""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
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


def host_manifest(name: str, url: str, secret: str, *, default: bool = False) -> str:
    return json.dumps(
        {
            "apiVersion": GROUP_VERSION,
            "kind": "TakoformHost",
            "metadata": {"name": name},
            "spec": {
                "url": url,
                "tokenSecretRef": {"name": secret, "key": "token"},
                "timeoutSeconds": 5,
                "default": default,
            },
        }
    )
