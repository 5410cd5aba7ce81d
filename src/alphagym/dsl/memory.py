"""Keep freed panel-sized arrays in the process heap, so that the next one does not page-fault.

Why: every kernel returns a fresh (days x stocks) array of about 1.3 MB. glibc serves blocks that large
with mmap and returns them to the OS on free, so each new array costs one page fault per 4 KiB page when
it is first written, and on a panel this size the page faults cost more than the kernel itself
(docs/notes/evaluator-performance.md). Raising glibc's mmap and trim thresholds serves those blocks from the heap
and keeps them there for reuse. Process-wide and harmless elsewhere (numpy and pandas allocate the same
way, so the pandas reference in the benchmark gains from it too). A no-op on non-glibc platforms.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

M_TRIM_THRESHOLD = -1          # glibc mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 256 * 2**20      # blocks above this still come from mmap
TRIM_THRESHOLD_BYTES = 512 * 2**20      # free heap above this goes back to the OS

_done = False


def keep_large_blocks_in_heap() -> bool:
    """Set the thresholds once per process; True if glibc took them."""
    global _done
    if _done:
        return True
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
        ok = libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1 and ok
    except (OSError, AttributeError):
        return False
    _done = ok
    return ok
