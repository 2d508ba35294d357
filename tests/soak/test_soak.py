"""The chaos soak's CI variant: hack/soak.py --ci (>= 20 operator SIGKILLs, host faults, a
kube-apiserver and an etcd restart, out-of-band recreates) must end with every invariant of
docs/soak.md holding; once with one operator process, once with two replicas electing a leader,
every kill the Lease holder's, and once with three replicas that are active shards
(TAKOFORM_SHARDING=hash), every kill a random replica's. The seed is printed;
TAKOFORM_SOAK_SEED replays one."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kube, pytest.mark.host, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("replicas", "sharded"),
    [(1, False), (2, False), (3, True)],
    ids=["one-process", "two-replicas", "three-shards"],
)
def test_chaos_soak_ci_variant(tmp_path: Path, replicas: int, sharded: bool) -> None:
    seed = os.environ.get("TAKOFORM_SOAK_SEED") or str(random.SystemRandom().randrange(10**6))
    soak = subprocess.run(
        [sys.executable, str(REPO / "hack" / "soak.py"), "--ci", "--seed", seed,
         "--replicas", str(replicas), *(["--sharded"] if sharded else []),
         "--workdir", str(tmp_path / "soak")],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    print(soak.stdout)
    summary = soak.stdout[soak.stdout.find("\nsoak seed") :]
    assert soak.returncode == 0, (
        f"the soak failed (replay: TAKOFORM_SOAK_SEED={seed}):\n{summary}\n{soak.stderr[-3000:]}"
    )
    assert "all invariants hold" in soak.stdout
    kills = int(summary.split(" operator kills")[0].rsplit(" ", 1)[1])
    assert kills >= 20, summary
    if replicas > 1 and not sharded:
        # Most kills find a leader (a kill right after the previous one may find none yet).
        leader_kills = int(re.search(r"operator SIGKILL of the Lease holder (\d+)", summary)[1])
        assert leader_kills >= kills // 2, summary
