"""glibc's malloc told to give large blocks back to the system when the controller frees them.

Each pass makes numpy arrays of tens to hundreds of KiB (the risk model's draws for a batch of
deadlines) and frees them before it ends. glibc serves a block of at least its mmap threshold
(128 KiB) with a mapping of its own and unmaps it when freed, but freeing one also raises the
threshold to that block's size (glibc's "dynamic mmap threshold", meant for programs that keep
such blocks), and the trim threshold to twice that. From then on the arrays come from the heap,
between the small blocks that outlive the pass, and the heap holds its high-water mark: in the
soak the controller's resident memory grew for its first quarter hour while what it held did
not. Setting the threshold turns the adjustment off, as `M_MMAP_THRESHOLD`'s documentation
says, so every large block is a mapping again, given back when freed, and the heap's top is
trimmed at 128 KiB again. What it costs is a mapping and its page faults per large array, some
microseconds each.

Only glibc has `mallopt` with these numbers; elsewhere (musl, macOS) nothing is changed.
"""

from __future__ import annotations

import ctypes
import platform

M_MMAP_THRESHOLD = -3
"""glibc's parameter number for the mmap threshold (malloc.h)."""
MMAP_THRESHOLD_BYTES = 128 * 1024
"""glibc's default threshold, fixed: blocks of this size and more are mappings of their own."""


def give_large_blocks_back() -> bool:
    """Fix glibc's mmap threshold at its default; whether it was set (False off glibc)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
