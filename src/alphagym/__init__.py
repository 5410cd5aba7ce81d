"""alphagym: teach a language model to write formulaic alphas, and prove on a holdout year that it did."""

import os
import sys

# numba's parallel kernels and torch share one OpenMP runtime. With its default active wait policy the
# threads that ran a numba kernel keep spinning afterwards and starve torch's threads (BENCHMARKS.md,
# "OpenMP wait policy"). Set before numba or torch loads OpenMP; a user's own value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

# numpy's OpenBLAS starts one thread per core. Every BLAS product here is small (the verifier's CPCV masks,
# factor regression and novelty archive: a few thousand rows by at most a thousand columns), and with the
# other core busy a two-thread product waits for its second thread: alternating in one process, two BLAS
# threads made R3-on scoring under load 1.40x slower than one and gained nothing idle, and two rungs side
# by side stepped 1.41x slower (BENCHMARKS.md, "Why scoring slowed under load"). One thread, unless the
# user set a value; the variable reaches child processes (the verifier's worker pool), and an OpenBLAS
# loaded before this import is resized.
if "OPENBLAS_NUM_THREADS" not in os.environ:
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    if "numpy" in sys.modules:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")

__version__ = "0.1.0"
