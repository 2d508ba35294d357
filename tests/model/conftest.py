"""The model checker's session: one reference host process, one event loop, one client.

The host runs with commit delay 0 and one extra definition: a synthetic additive minor of
Bucket (1.2.0) that the "upgraded" registry supports, so a registry upgrade can move the line's
DefaultCreates to a definition the production build does not have.
"""

from __future__ import annotations

import asyncio
import itertools
import secrets
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from processes import HostProcess

from takoform_operator.host_client.client import HostClient
from takoform_operator.registry_data import load_registry
from takoform_spec.catalog import CATALOG_DIR, load_definition_file
from takoform_spec.identity import FormLine

from .cluster import API_VERSION, KIND, HostView
from .machine import World

BUCKET = FormLine(API_VERSION, KIND)


def write_bucket_minor(directory: Path) -> Path:
    """Bucket 1.2.0: 1.1.0 plus one optional field (an additive minor, sharing its codec)."""
    source = CATALOG_DIR / "definitions" / "storage.takoform.io" / "bucket-1.1.0.yaml"
    doc: dict[str, Any] = yaml.safe_load(source.read_text(encoding="utf-8"))
    doc["package"] = {"publisher": "tests.model", "source": "synthetic"}
    doc["definitionVersion"] = "1.2.0"
    doc["fields"].append(
        {
            "name": "storageClass",
            "type": "string",
            "enum": ["standard", "archive"],
            "description": "Storage class objects are written with.",
        }
    )
    path = directory / "bucket-1.2.0.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def model_world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    workdir = tmp_path_factory.mktemp("model")
    package = write_bucket_minor(workdir)
    # The host's database on a memory file system where there is one: the checker's sequences
    # then wait on no disk flush (the host's durability is proven elsewhere, not here).
    shm = Path("/dev/shm")
    hostdir = Path(tempfile.mkdtemp(prefix="takoform-model-", dir=shm)) if shm.is_dir() else workdir
    runner = asyncio.Runner()
    hosts = itertools.count()

    def start_host() -> tuple[Callable[[], None], HostClient, HostView]:
        host = HostProcess(hostdir / f"host-{next(hosts)}", commit_delay=0.0, packages=[package])
        host.start()
        # No read retries: a fault is seen by the reconcile at once, never waited out.
        client = runner.run(_client(host.url, host.token))
        view = HostView(host.url, host.token, host.admin_token)

        def stop() -> None:
            runner.run(client.aclose())
            view.close()
            host.stop()
            shutil.rmtree(host.workdir, ignore_errors=True)

        return stop, client, view

    production = load_registry()
    upgraded = production.register(load_definition_file(package))
    refs = {ref.definition_version: ref for ref in upgraded.known_refs(BUCKET)}
    refs.pop("2.0.0", None)
    world = World(
        runner=runner,
        start_host=start_host,
        refs=refs,
        production=production,
        upgraded=upgraded,
        run_id=secrets.token_hex(3),
        counter=itertools.count(),
    )
    try:
        yield world
    finally:
        world.close()
        runner.close()
        if hostdir != workdir:
            shutil.rmtree(hostdir, ignore_errors=True)


async def _client(url: str, token: str) -> HostClient:
    return HostClient(url, token, read_retries=0)
