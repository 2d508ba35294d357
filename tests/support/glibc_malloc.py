"""glibc's malloc as the tests and tools read it: its figures now (mallinfo2, glibc 2.33 on)."""

from __future__ import annotations

import ctypes


class MallInfo2(ctypes.Structure):
    """malloc.h's struct mallinfo2: arena is the heap's size, uordblks what is in use in it,
    hblks and hblkhd the chunks mapped on their own and their bytes."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]  # fmt: skip


def mallinfo2() -> MallInfo2:
    libc = ctypes.CDLL(None)  # the C library Python runs on
    libc.mallinfo2.restype = MallInfo2
    return libc.mallinfo2()
