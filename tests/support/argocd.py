"""The chart's Argo CD health check run by a real Lua 5.1 interpreter (Debian's `lua5.1`, the
language of Argo CD's gopher-lua), on a CR body as Argo CD hands it over: a Lua table `obj`."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
HEALTH_LUA = REPO / "charts" / "takoform-operator" / "files" / "argocd-health.lua"


def lua_interpreter() -> str:
    found = shutil.which("lua5.1")
    if found is None:
        pytest.fail("lua5.1 is missing: run `make tools` (Debian package lua5.1)", pytrace=False)
    return found


def lua_literal(value: Any) -> str:
    """A JSON value as a Lua literal (JSON null: nil, so the key is absent, as in Argo CD)."""
    if value is None:
        return "nil"
    if value is True or value is False:
        return "true" if value else "false"
    if isinstance(value, int | float):
        assert math.isfinite(value)
        return repr(value)
    if isinstance(value, str):
        # Three-digit decimal escapes (a shorter one would swallow a following digit) for every
        # byte but the plainest: any UTF-8 text, exactly.
        plain = set(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,:;-_/()=+*")
        return '"' + "".join(chr(b) if b in plain else f"\\{b:03d}" for b in value.encode()) + '"'
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(item) for item in value) + "}"
    assert isinstance(value, dict), type(value)
    return (
        "{"
        + ", ".join(f"[{lua_literal(str(k))}] = {lua_literal(v)}" for k, v in value.items())
        + "}"
    )


def health(body: dict[str, Any], script: Path = HEALTH_LUA) -> tuple[str, str]:
    """(status, message) the health check returns for `body` (round-tripped through JSON)."""
    obj = json.loads(json.dumps(body))
    driver = (
        f"obj = {lua_literal(obj)}\n"
        f"local check = assert(loadfile({lua_literal(str(script))}))\n"
        "local answer = check()\n"
        "io.write(answer.status, '\\n', answer.message or '')\n"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".lua", encoding="utf-8") as file:
        file.write(driver)
        file.flush()
        run = subprocess.run(
            [lua_interpreter(), file.name], capture_output=True, text=True, timeout=30
        )
    assert run.returncode == 0, run.stderr
    status, _, message = run.stdout.partition("\n")
    return status, message
