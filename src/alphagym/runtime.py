"""The process-wide settings of an alphagym process, in one explicit call: `configure_runtime()`.

The CLI and the stage runner call it first thing (so every stage Snakemake or DVC runs has it), as do the
verifier's worker processes, the benchmarks and the test session. Importing alphagym changes nothing in the
host process: a notebook that imports `alphagym.dsl` keeps its own thread and allocator settings unless it
calls `configure_runtime()` itself.

- OpenMP's wait policy: numba's parallel kernels and torch share one OpenMP runtime, and with the default
  active policy the threads that ran a numba kernel keep spinning afterwards and starve torch's threads
  (BENCHMARKS.md, "OpenMP wait policy"). PASSIVE, unless the user set a value; it takes effect only if set
  before numba or torch loads OpenMP, which the CLI guarantees by calling this before importing either.
- numpy's BLAS on one thread: every BLAS product here is small (the verifier's CPCV masks, factor
  regression and novelty archive), and with the other core busy a two-thread product waits for its second
  thread: two BLAS threads made R3-on scoring under load 1.40x slower and two rungs side by side 1.41x
  slower (BENCHMARKS.md, "Why scoring slowed under load"). One thread unless the user set
  OPENBLAS_NUM_THREADS; the variable reaches child processes, and an OpenBLAS already loaded is resized.
- glibc's heap thresholds (`keep_large_blocks_in_heap`): every kernel returns a fresh (days x stocks) array
  of about 1.3 MB; glibc serves blocks that large with mmap and returns them to the OS on free, so each new
  array costs a page fault per 4 KiB page when first written, which on a panel this size costs more than
  the kernel itself (docs/notes/evaluator-performance.md). Raised thresholds serve and keep them in the heap
  for reuse. Harmless elsewhere (numpy and pandas allocate the same way); a no-op off glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys


def configure_runtime() -> None:
    """Apply the settings above to this process (idempotent)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if "OPENBLAS_NUM_THREADS" not in os.environ:
        os.environ["OPENBLAS_NUM_THREADS"] = "1"
        if "numpy" in sys.modules:
            from threadpoolctl import threadpool_limits

            threadpool_limits(limits=1, user_api="blas")
    keep_large_blocks_in_heap()


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
