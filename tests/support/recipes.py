"""docs/deployment.md's recipes as written: the sh blocks of a section, its helm commands, and the
values they set, for the tests that run or render them."""

from __future__ import annotations

import re
import shlex

from fixtures_kube import REPO

DOC = (REPO / "docs/deployment.md").read_text()


def sh_blocks(heading: str) -> list[str]:
    """The sh blocks of the section under `heading`, continuation lines joined."""
    section = DOC[DOC.index(heading) :].split("\n## ", 1)[0]
    return [block.replace("\\\n", " ") for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def helm_commands(heading: str) -> list[list[str]]:
    """The `helm install` and `helm upgrade` commands of the first sh block under `heading`."""
    commands = [shlex.split(line) for line in sh_blocks(heading)[0].splitlines()]
    return [c for c in commands if c[:1] == ["helm"] and c[1] in ("install", "upgrade")]


def option(command: list[str], *names: str) -> str:
    return next(command[i + 1] for i, arg in enumerate(command) if arg in names)


def set_values(command: list[str]) -> list[str]:
    """The values a helm command gives with --set, but command substitutions ($(...))."""
    return [
        value
        for i, value in enumerate(command)
        if i and command[i - 1] == "--set" and "$(" not in value
    ]
