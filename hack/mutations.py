#!/usr/bin/env python3
"""A fixed set of mutations of the rules, run against a checkout's own tests: which ones bite.

Each mutation replaces one exact snippet of product code by a wrong one (a rule of 0011/0017
broken on purpose). For each, in a scratch copy of the checkout, the suite's fast part runs
(`-m "not kube and not node"` without the soak, the model checker's long run and `make host`'s
test, stopping at the first failure): a failure means the mutation is killed, a pass means the
tests do not notice it. A snippet a checkout does not have is reported as n/a, so the same set
can be run against an older commit to compare:

    python hack/mutations.py                      # this checkout
    python hack/mutations.py --commit 76a6491     # an older commit of this repository

Prints a Markdown table (mutation, result, the first failing test) and exits 1 when one survives.
Not part of `make test`: each surviving mutation costs a full run of the fast suite.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CORE = "operator/takoform_operator/core"


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str


MUTATIONS = (
    # The three that passed every non-Kubernetes test when issue #21 was filed.
    Mutation(
        "our operation under another FormRef is adopted",
        f"{CORE}/actions.py",
        "        and operation.form_ref == target.form_ref\n",
        "",
    ),
    Mutation(
        "form_unknown on a read is an absent resource",
        "operator/takoform_operator/host_client/client.py",
        "        except ResourceNotFound:\n            return None\n\n    async def get_operation",
        "        except Exception as exc:\n"
        '            if type(exc).__name__ not in ("ResourceNotFound", "FormUnknown"):\n'
        "                raise\n"
        "            return None\n\n    async def get_operation",
    ),
    Mutation(
        "a bound import claims a new target",
        f"{CORE}/plan.py",
        "return importing(state) and state.uid is None and state.pending is None",
        "return importing(state)",
    ),
    Mutation(
        "ownership proof accepts any create key",
        f"{CORE}/keys.py",
        'key.startswith(key_prefix(desired.cr_uid) + "create:")',
        'key.endswith(":create:0") or key.startswith(key_prefix(desired.cr_uid))',
    ),
    Mutation(
        "an operation of another CR counts as ours",
        f"{CORE}/keys.py",
        ".startswith(key_prefix(desired.cr_uid))\n",
        '.startswith("")\n',
    ),
    Mutation(
        "update key forgets the incarnation (uid)",
        f"{CORE}/keys.py",
        'f"{desired.cr_uid}:update:{uid}:',
        'f"{desired.cr_uid}:update:',
    ),
    Mutation(
        "create key forgets the attempt",
        f"{CORE}/keys.py",
        'return f"{desired.cr_uid}:create:{state.attempt}"',
        'return f"{desired.cr_uid}:create:0"',
    ),
    Mutation(
        "a different uid reads as the same incarnation",
        f"{CORE}/tables.py",
        "return Presence.SAME_UID if resource.uid == expected_uid else Presence.DIFFERENT_UID",
        "return Presence.SAME_UID",
    ),
    Mutation(
        "accept-uid accepts any uid",
        f"{CORE}/tables.py",
        "if accept_uid is not None and accept_uid == found_uid:",
        "if accept_uid is not None:",
    ),
    Mutation(
        "a different uid on a bound CR is adopted, not Blocked",
        f"{CORE}/tables.py",
        "    return UidRule.BLOCKED\n",
        "    return UidRule.MATCH\n",
    ),
    Mutation(
        "a running operation's marker is dropped",
        f"{CORE}/decide.py",
        "base = state if row.marker is Marker.KEEP else state.with_pending(None)",
        "base = state.with_pending(None)",
    ),
    Mutation(
        "adoption without the proof of our key",
        f"{CORE}/decide.py",
        "if row.conclusion is Conclusion.ADOPT_IF_PROVEN and not proves_ours(resource, desired):",
        "if row.conclusion is Conclusion.ADOPT_IF_PROVEN and False:",
    ),
    Mutation(
        "Orphan deletes the host resource",
        f"{CORE}/policy.py",
        "        desired.deletion_policy is DeletionPolicy.ORPHAN\n        or desired.management",
        "        desired.deletion_policy is None\n        or desired.management",
    ),
    Mutation(
        "a vanished bound resource keeps its old uid",
        f"{CORE}/decide.py",
        "_drifted(state.unbound().fresh_attempt(), Reason.RESOURCE_DELETED, message)",
        "_drifted(state.fresh_attempt(), Reason.RESOURCE_DELETED, message)",
    ),
    Mutation(
        "a new incarnation keeps the old key sequence",
        f"{CORE}/decide.py",
        "        state = state.fresh_attempt()  # a new incarnation starts a fresh key sequence\n",
        "        pass\n",
    ),
)

# The fast tests, said without the `slow` marker (older commits have none): the soak and the
# model checker's long run are what it marks outside tests/node. `make host` would set up a
# virtual environment of the scratch copy's own; it tests no rule.
FAST = [
    "-m", "not kube and not node",
    "--ignore=tests/soak", "--ignore=tests/model/test_model.py",
    "--ignore=tests/host/test_make_host.py",
]  # fmt: skip


def _checkout(commit: str | None, into: Path) -> Path:
    tree = into / "tree"
    if commit is None:
        # This checkout as it is, uncommitted edits included (what a reviewer runs).
        skipped = (".git", ".venv", "build", "__pycache__", ".cluster", ".host")
        ignore = shutil.ignore_patterns(*skipped)
        shutil.copytree(REPO, tree, ignore=ignore, symlinks=True)
    else:
        subprocess.run(
            ["git", "-C", str(REPO), "worktree", "add", "--detach", str(tree), commit],
            check=True,
            capture_output=True,
        )
    return tree


def _run_tests(tree: Path, workers: int, deselect: list[str]) -> tuple[bool, str, float, str]:
    """(passed, first failing test, seconds, output) of the fast suite in `tree`, this venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAKOFORM_")}
    env["PYTHONPATH"] = str(tree / "operator")
    # Every test directory, the pure core's first: a killed mutation stops at its first failure.
    order = ("unit", "reconcile", "model", "conformance", "host")
    paths = sorted(
        (p for p in (tree / "tests").iterdir() if p.is_dir() and p.name != "support"),
        key=lambda p: (order.index(p.name) if p.name in order else len(order), p.name),
    )
    cmd = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *FAST]
    cmd += [*(f"--deselect={test}" for test in deselect), *(str(p) for p in paths)]
    if workers > 1:
        cmd += ["-n", str(workers)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=3600)
    failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M) or re.findall(
        r"^ERROR (\S+)", proc.stdout, re.M
    )
    first = failed[0] if failed else ""
    return proc.returncode == 0, first, time.monotonic() - t0, proc.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", help="run against this commit (default: this checkout)")
    parser.add_argument("--workers", type=int, default=2, help="pytest-xdist workers")
    parser.add_argument("--only", action="append", default=[], help="names containing this")
    parser.add_argument(
        "--deselect", action="append", default=[], help="a test id the checkout fails unmutated"
    )
    args = parser.parse_args()
    mutations = [m for m in MUTATIONS if not args.only or any(o in m.name for o in args.only)]
    with tempfile.TemporaryDirectory(prefix="mutations-") as scratch:
        tree = _checkout(args.commit, Path(scratch))
        try:
            ok, first, seconds, output = _run_tests(tree, args.workers, args.deselect)
            if not ok:
                print(output[-6000:])
                print(f"the unmutated checkout fails its fast suite ({first}); nothing to compare")
                return 2
            print(f"unmutated: fast suite passes in {seconds:.0f} s\n")
            print("| mutation | result | killed by |\n|---|---|---|")
            survivors = 0
            for m in mutations:
                target = tree / m.path
                text = target.read_text()
                if text.count(m.old) != 1:
                    print(f"| {m.name} | n/a (snippet not in this checkout) | |", flush=True)
                    continue
                target.write_text(text.replace(m.old, m.new))
                try:
                    ok, first, seconds, _ = _run_tests(tree, args.workers, args.deselect)
                finally:
                    target.write_text(text)
                survivors += ok
                result = f"survived ({seconds:.0f} s)" if ok else "killed"
                print(f"| {m.name} | {result} | {first} |", flush=True)
        finally:
            if args.commit is not None:
                subprocess.run(
                    ["git", "-C", str(REPO), "worktree", "remove", "--force", str(tree)],
                    capture_output=True,
                )
    return 1 if survivors else 0


if __name__ == "__main__":
    sys.exit(main())
