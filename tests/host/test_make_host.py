"""`make host` serves what the examples need: every space docs/examples/ names, with the token
and admin token the Makefile documents."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from processes import free_port
from waiting import wait_until

pytestmark = pytest.mark.host

REPO = Path(__file__).resolve().parents[2]


def _example_spaces() -> set[str]:
    spaces = set()
    for path in (REPO / "docs" / "examples").glob("*.yaml"):
        for document in yaml.safe_load_all(path.read_text()):
            if document and "space" in (document.get("spec") or {}):
                spaces.add(document["spec"]["space"])
    return spaces


def test_make_host_serves_every_space_of_the_examples(tmp_path: Path) -> None:
    spaces = _example_spaces()
    assert spaces, "the examples name a space"
    listen = f"127.0.0.1:{free_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TAKOFORM_", "MAKE"))}
    proc = subprocess.Popen(
        ["make", "--no-print-directory", "host", f"HOST_LISTEN={listen}",
         f"HOST_DB={tmp_path / 'host.db'}"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        with httpx.Client(base_url=f"http://{listen}", timeout=5) as client:

            def healthy() -> bool:
                assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
                try:
                    return client.get("/healthz").status_code == 200
                except httpx.TransportError:
                    return False

            wait_until(healthy, "make host answering /healthz", timeout=60)
            auth = {"Authorization": "Bearer dev-token"}
            served = client.get("/v1alpha3/spaces", headers=auth)
            assert served.status_code == 200, served.text
            names = {item["name"] for item in served.json()["items"]}
            assert spaces <= names, f"make host serves {names}, the examples need {spaces}"
            assert client.get("/v1alpha3/spaces").status_code == 401, "a token is required"
    finally:
        # make and the host it started: their own process group.
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
