"""The host token read from a mounted file is re-read when the file changes (a rotated Secret),
against the reference host as a real process: no restart, the next request carries the new
token. The file is replaced the way the kubelet updates a Secret volume (an atomic rename)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from takoform_operator.core.state import DEFAULT_HOST
from takoform_operator.host_client.pool import HostPool
from takoform_operator.host_port import Unauthenticated
from takoform_operator.main import implicit_endpoint
from takoform_operator.settings import Settings

pytestmark = pytest.mark.host


def _write(path: Path, token: str) -> None:
    tmp = path.with_suffix(".new")
    tmp.write_text(token + "\n")
    os.replace(tmp, path)


async def test_a_rotated_token_file_is_used_without_a_restart(
    host_factory: Any, tmp_path: Path
) -> None:
    host = host_factory()
    token_file = tmp_path / "token"
    _write(token_file, "not-the-token")
    settings = Settings(host_url=host.url, host_token_file=token_file)
    pool = HostPool(None, read_retries=0, implicit=implicit_endpoint(settings))
    client = await pool.client(DEFAULT_HOST)
    try:
        with pytest.raises(Unauthenticated):
            await client.ensure_space("team-a")  # refused: the file holds a wrong token
        _write(token_file, host.token)
        await client.ensure_space("team-a")  # the same client, the new token
        _write(token_file, "revoked")
        with pytest.raises(Unauthenticated):
            await client.ensure_space("team-b")
    finally:
        await pool.aclose()
