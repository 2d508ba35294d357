"""The C heap the operator runs on (main.tune_c_heap): a large buffer the heap has no room for
gets a mapping of its own, however large the buffers freed before it, so what a large page or
watch line held goes back to the system when it is freed instead of staying resident in
glibc's heap."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# Run in a process of its own: mallopt changes the whole process. mallinfo2's hblks counts the
# chunks glibc has mapped on their own, live now.
_PROBE = """
import sys
from glibc_malloc import mallinfo2
from takoform_operator.main import tune_c_heap

if sys.argv[1] == "tuned":
    tune_c_heap()
large = bytearray(16 * 1024 * 1024)
del large  # freed: glibc's own threshold rises to its size
before = mallinfo2().hblks
page = bytearray(4 * 1024 * 1024)  # more than the heap has free: it grows, or a mapping
print(mallinfo2().hblks - before)
"""
SUPPORT = Path(__file__).resolve().parents[1] / "support"


def _mapped_on_their_own(mode: str) -> int:
    found = subprocess.run(
        [sys.executable, "-c", _PROBE, mode],
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")]),
        },
        capture_output=True,
        text=True,
        check=True,
    )
    return int(found.stdout)


def test_a_large_buffer_is_mapped_on_its_own_after_a_larger_one_was_freed() -> None:
    assert _mapped_on_their_own("tuned") == 1


def test_glibc_alone_puts_it_in_its_heap() -> None:
    """What tune_c_heap is for: without it the buffer lands in the heap (this test fails the
    day glibc's default changes, and tune_c_heap can go)."""
    assert _mapped_on_their_own("default") == 0
