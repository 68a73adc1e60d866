"""glibc's mmap threshold fixed, so a large block freed and made again is a mapping again."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from controller import allocator

# Run in a process of its own: the threshold is process-wide.
PROBE = """
import ctypes, sys
from controller.allocator import give_large_blocks_back

class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd",
        "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Mallinfo2
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
if sys.argv[1] == "fixed":
    assert give_large_blocks_back()
size = 512 * 1024
libc.free(libc.malloc(size))  # the first free of a mapped block
before = libc.mallinfo2().hblks
block = libc.malloc(size)
print(libc.mallinfo2().hblks - before)  # blocks held as mappings: is the new one?
libc.free(block)
"""

ON_GLIBC = platform.libc_ver()[0] == "glibc"


def mapped_blocks_after_a_free(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, check=True
    )
    return int(done.stdout.strip())


@pytest.mark.parametrize(
    ("mode", "want_mapped"),
    [
        pytest.param("default", 0, id="glibc's own way: the second block comes from the heap"),
        pytest.param("fixed", 1, id="the threshold fixed: the second block is a mapping"),
    ],
)
def test_a_large_block_made_again_after_a_free(mode: str, want_mapped: int) -> None:
    if not ON_GLIBC:
        assert allocator.give_large_blocks_back() is False
        return
    assert mapped_blocks_after_a_free(mode) == want_mapped
