"""Freed array memory kept for the next pass, not handed back to the system each time.

A decision pass works in arrays of up to some megabytes (a batch of estimates is problems x
jobs x samples in float32), made and freed many times a pass. glibc's allocator serves a
request above its mmap threshold with fresh pages from the system and unmaps them when it is
freed; the threshold starts at 128 KiB and rises only as such chunks are freed, and the top of
the heap goes back to the system once more than the trim threshold (twice that) is free
there. So a pass's arrays came as fresh pages again and again, each page's first touch a fault
the kernel serves by zeroing it: 112,000 faults in the decision benchmark's learned pass (1,000
projects x 10,000 pending workloads), 31,000 with the thresholds fixed here, and 6 % of the
pass's CPU (`bench/bench_decide.py`, which sets them as the controller does). The most the
process holds at once does not change (its largest arrays are what they were); what changes
is that memory freed by one pass stays in the process for the next.

Process-wide, and set once at start: the controller (`quartermaster run`), the replays (each
worker) and the decision benchmark call `keep_freed_memory`. Elsewhere than glibc (musl, macOS)
it does nothing and says so.

**Given back now and then.** Kept for good, freed memory is what the process's RSS grows by
when a rare pass or response needs a block the free lists cannot serve: the heap grows, and
what is freed around the block later stays resident, counted by every RSS-based alert and
limit though nothing uses it. Over two 40-minute soaks (`bench/soak.py`, 20 projects) glibc's
memory in use held within 0.6 MiB while the free memory it kept rose 1.3-1.8 MiB, in steps;
given back, it held at 4.5-5.7 MiB and RSS fell as well as rose (bench/SOAKS.md). The controller's
loop therefore gives it back (`give_back_freed_memory`, glibc's `malloc_trim`) after each full
collection, at most every two minutes: the next pass's arrays fault in again once, one pass in
some sixty.
"""

from __future__ import annotations

import ctypes
import platform
from typing import Any

MMAP_THRESHOLD_BYTES = 32 * 1024 * 1024
"""Requests below this come from the heap: every array a pass makes (the largest, a few
megabytes at 1,000 projects, far under it); glibc's own ceiling for the threshold it moves."""
TRIM_THRESHOLD_BYTES = 64 * 1024 * 1024
"""Free memory at the top of the heap kept rather than given back: a pass's worth of arrays."""

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
"""`mallopt` parameters, from glibc's malloc.h."""


def _glibc(name: str, *argtypes: type[ctypes._SimpleCData[int]]) -> Any | None:
    """glibc's function `name` taking `argtypes` and returning an int; None elsewhere than
    glibc, or where it is not found."""
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        function = getattr(ctypes.CDLL(None), name)
    except (OSError, AttributeError):
        return None
    function.argtypes = argtypes
    function.restype = ctypes.c_int
    return function


def keep_freed_memory() -> bool:
    """Fix glibc's mmap and trim thresholds (see the module docstring); whether it could."""
    mallopt = _glibc("mallopt", ctypes.c_int, ctypes.c_int)
    return mallopt is not None and bool(
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        and mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)
    )


def give_back_freed_memory() -> bool:
    """Hand the pages of free heap memory back to the system (glibc's `malloc_trim(0)`, which
    releases whole free pages anywhere in the heap, not only at its top); whether any were.
    Elsewhere than glibc it does nothing."""
    malloc_trim = _glibc("malloc_trim", ctypes.c_size_t)
    return malloc_trim is not None and bool(malloc_trim(0))
