"""alphagym: teach a language model to write formulaic alphas, and prove on a holdout year that it did."""

import os

# numba's parallel kernels and torch share one OpenMP runtime. With its default active wait policy the
# threads that ran a numba kernel keep spinning afterwards and starve torch's threads (BENCHMARKS.md,
# "OpenMP wait policy"). Set before numba or torch loads OpenMP; a user's own value wins.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__version__ = "0.1.0"
