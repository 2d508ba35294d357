#!/usr/bin/env python3
"""The walk of one CR body through the operator's code: how many modules ("rooms") one look
passes through, how many times execution moves into one ("stays"), and how many of those are
returns to a room already left. A short walk is one a reader can follow.

Starts `takoform-host serve` (commit delay 0) and looks at one new Bucket with the operator's
own look (`kube.cr_step.CrSteps.look`, what the kopf handlers run), on a CR held in memory as the
API server would hold it: the first look (finalizer, binding, create), the looks until Ready,
then one steady look. Every Python call and return is followed with sys.setprofile. The rooms
are the operator's modules outside its pure core: the core (takoform_operator.core,
takoform_spec) is what the look calls, read as one call each, like a library's (httpx,
asyncio), and does not end a stay. `--with-core` counts the core's modules as rooms too.

    .venv/bin/python hack/walk.py [--rooms] [--with-core]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import dis
import sys
import tempfile
from collections.abc import Awaitable
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
# The tests' support modules (builders, looks, one_host, processes) are shared with these scripts.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))
from builders import cr_body
from looks import MemoryCr, steps_over
from memory_bindings import MemoryBindings
from one_host import OneHost

from bench_host import SPACE, start_host
from takoform_operator.core.conditions import ConditionType
from takoform_operator.host_client.client import HostClient
from takoform_operator.host_client.port import HostClientPort

PACKAGES = ("takoform_operator", "takoform_spec")
#: The pure core: what a look calls, not where it walks (unless --with-core).
CORE = ("takoform_operator.core", "takoform_spec")
_YIELDS = {dis.opmap["YIELD_VALUE"], dis.opmap["SEND"]}
_RESUME = dis.opmap["RESUME"]


class Walk:
    """The rooms one traced call passes through, in order, each stay once."""

    def __init__(self, with_core: bool) -> None:
        self.stays: list[str] = []
        self._with_core = with_core
        #: The frames the walk follows: the look's, and those their calls made.
        self._followed: set[int] = set()

    def _room(self, frame: FrameType | None, *, core: bool = False) -> str | None:
        """The frame's module, when it is a room (`core`: or a module of the core)."""
        module = str(frame.f_globals.get("__name__", "")) if frame is not None else ""
        if module.split(".", 1)[0] not in PACKAGES:
            return None
        if not (self._with_core or core) and module.startswith(CORE):
            return None
        return module

    def _enter(self, frame: FrameType | None) -> None:
        room = self._room(frame)
        if room is not None and (not self.stays or self.stays[-1] != room):
            self.stays.append(room)

    def _profile(self, frame: FrameType, event: str, _arg: Any) -> None:
        if event == "call" and not _at_yield(frame):
            # A call from code the walk follows (a library calling back into ours, httpx
            # reading a property, is the library's business: a reader does not step into it).
            if id(frame.f_back) in self._followed and self._room(frame, core=True):
                self._followed.add(id(frame))
                self._enter(frame)
        elif event == "return" and not _at_yield(frame):
            self._followed.discard(id(frame))
            if id(frame.f_back) in self._followed:
                self._enter(frame.f_back)

    async def follow(self, look: Awaitable[Any]) -> Any:
        self._followed.add(id(sys._getframe()))  # the look is awaited from here
        sys.setprofile(self._profile)
        try:
            return await look
        finally:
            sys.setprofile(None)

    def figures(self) -> tuple[int, int, int]:
        """(stays, rooms, returns to a room already left)."""
        rooms = len(set(self.stays))
        return len(self.stays), rooms, len(self.stays) - rooms


def _at_yield(frame: FrameType) -> bool:
    """A coroutine that awaits I/O "returns" up the chain of awaiting frames, and that chain is
    "called" again when it resumes, both at the await: neither is a move through the code."""
    code, at = frame.f_code.co_code, frame.f_lasti
    if at < 0:
        return False
    # At the yield itself, or at the RESUME after it (its argument: 0 only at a function's start).
    return code[at] in _YIELDS or (code[at] == _RESUME and code[at + 1] != 0)


async def walks(url: str, token: str, *, with_core: bool = False) -> list[tuple[str, Walk]]:
    """Each look of one new Bucket, on the host at `url` (space SPACE), and its walk."""
    found = []
    async with HostClient(url, token) as client:
        cr = MemoryCr(cr_body(space=SPACE))
        steps = steps_over(cr, OneHost(HostClientPort(client)), MemoryBindings())
        for name in ("first (create)", "until Ready", "steady"):
            for _ in range(20):
                tracked = Walk(with_core)
                looked = await tracked.follow(steps.look(copy.deepcopy(cr.body)))
                found.append((name, tracked))
                outcome = looked.outcome
                ready = outcome is not None and outcome.asserted().get(ConditionType.READY)
                if name != "until Ready" or ready:
                    break
    return found


async def walk(show_rooms: bool, with_core: bool) -> None:
    with tempfile.TemporaryDirectory() as workdir:
        host = start_host(Path(workdir))
        try:
            found = await walks(host.url, host.token, with_core=with_core)
        finally:
            host.stop()
    print(f"{'look':<28} {'stays':>6} {'rooms':>6} {'returns':>8}")
    for name, tracked in found:
        stays, rooms, returns = tracked.figures()
        print(f"{name:<28} {stays:>6} {rooms:>6} {returns:>8}")
        if show_rooms:
            print("    " + " > ".join(m.removeprefix("takoform_") for m in tracked.stays))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rooms", action="store_true", help="print each look's rooms in order")
    parser.add_argument("--with-core", action="store_true", help="the core's modules are rooms")
    arguments = parser.parse_args()
    asyncio.run(walk(arguments.rooms, arguments.with_core))


if __name__ == "__main__":
    main()
