"""`kubectl-takoform`: the kubectl plugin (`kubectl takoform ...` once it is on PATH)."""

from __future__ import annotations

import sys

from takoform_operator.plugin.commands import parser

PROG = "kubectl takoform"


def main(argv: list[str] | None = None) -> int:
    args = parser(PROG).parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
