"""The operator's own API client (kube.api) on a real API server: a token refused with 401 is
read again from the configuration once (a ServiceAccount's token is rotated on disk), and the
request goes through with the new one; without a way to log in again, the 401 is the answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fixtures_kube import KubeCluster

from takoform_operator.kube.api import ApiConnection, ApiError, KubeApi
from takoform_operator.kube.client_config import load_connection

pytestmark = pytest.mark.kube


def _token_file_kubeconfig(cluster: KubeCluster, token_file: Path) -> Path:
    config = cluster.kubectl_json("config", "view", "--minify", "--raw", "--flatten")
    config["users"][0]["user"] = {"tokenFile": str(token_file)}
    path = token_file.with_suffix(".kubeconfig")
    path.write_text(json.dumps(config))
    return path


async def test_a_refused_token_is_read_again_once(
    kube_cluster: KubeCluster, kube_namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("a-token-rotated-away\n")
    monkeypatch.setenv("KUBECONFIG", str(_token_file_kubeconfig(kube_cluster, token_file)))
    current: list[ApiConnection] = [load_connection()]

    def log_in() -> None:
        current[0] = load_connection()

    api = KubeApi(lambda: current[0], log_in=log_in)
    stale = KubeApi(lambda: current[0])
    try:
        with pytest.raises(ApiError) as refused:
            await stale.request("GET", "/version")
        assert refused.value.status == 401
        fresh = kube_cluster.kubectl("create", "token", "default", namespace=kube_namespace)
        token_file.write_text(fresh.stdout.strip() + "\n")  # rotated on disk
        answer = await api.request("GET", "/version")
    finally:
        await api.close()
        await stale.close()
    assert answer["gitVersion"].startswith("v1.")
    assert current[0].token == fresh.stdout.strip()
