"""The plugin's help texts in docs/operator.md are the commands' own: each block marked
`<!-- help: kubectl takoform ... --help -->` is compared with what that command prints."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

from takoform_operator.plugin import cli

DOC = Path(__file__).resolve().parents[2] / "docs" / "operator.md"
BLOCK = re.compile(r"<!-- help: (kubectl takoform[^>]*) -->\n```text\n\$ \1\n(.*?)```", re.S)
COMMANDS = ["", "import", "blocked", "trace", "bindings", "release"]


def help_of(argv: list[str]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exited:
        cli.main([*argv, "--help"])
    assert exited.value.code == 0
    return out.getvalue()


def documented() -> dict[str, str]:
    return {command: text for command, text in BLOCK.findall(DOC.read_text(encoding="utf-8"))}


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c or "top")
def test_the_documented_help_is_the_real_one(command: str) -> None:
    argv = command.split()
    title = " ".join(["kubectl takoform", *argv, "--help"])
    blocks = documented()
    assert title in blocks, f"docs/operator.md has no help block for `{title}`"
    assert blocks[title] == help_of(argv), (
        f"the help of `{title}` changed; paste it into docs/operator.md:\n{help_of(argv)}"
    )


def test_every_documented_help_is_a_command() -> None:
    expected = {" ".join(["kubectl takoform", *c.split(), "--help"]) for c in COMMANDS}
    assert set(documented()) == expected


def test_the_operator_command_has_the_plugins_commands() -> None:
    from takoform_operator import cli as operator_cli

    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        operator_cli.main(["blocked", "--help"])
    # Past the usage lines (wrapped by the length of the program's name) the help is the same.
    assert out.getvalue().split("\n\n", 1)[1] == help_of(["blocked"]).split("\n\n", 1)[1]
