"""Two rungs at once at one core each (the ladder's default on 2 cores), with numpy's BLAS on one thread
(alphagym's setting) against two (OpenBLAS's default), each pair in fresh processes.

Each condition runs two `bench_rl_step.py` processes side by side, a rung and its replica under another seed,
as `bench_rung_concurrency.py` does; the conditions alternate `--rounds` times (1, 2, then 2, 1, ...).
Medians and p90s of the step times, never best-of.
Last lines: `blas2_vs_blas1_pair_step_<median|p90>=<step time with 2 threads / with 1>` (above 1: the second
BLAS thread slows the rungs).
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

from bench_rung_concurrency import _launch, _result
from common import print_ratios


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rung", default="cispo_repo")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    steps: dict[int, list[tuple[float, float]]] = {1: [], 2: []}
    for r in range(args.rounds):
        for blas in ((1, 2) if r % 2 == 0 else (2, 1)):
            os.environ["OPENBLAS_NUM_THREADS"] = str(blas)       # the children inherit it; alphagym keeps a set value
            procs = [_launch(args.rung, "1:1", args.steps, args.warmup, []),
                     _launch(args.rung, "1:1", args.steps, args.warmup, ["seed=8"])]
            both = [_result(p, "1:1")["step_time"] for p in procs]
            steps[blas] += both
            print(f"round {r + 1}, BLAS {blas} thread(s): steps "
                  + ", ".join(f"{m:.2f} s (p90 {p:.2f})" for m, p in both), flush=True)
    med = {b: float(np.median([m for m, _ in v])) for b, v in steps.items()}
    p90 = {b: float(np.median([p for _, p in v])) for b, v in steps.items()}
    for b in (1, 2):
        print(f"BLAS {b} thread(s): {med[b]:.2f} s a step (p90 {p90[b]:.2f}), median over {len(steps[b])} rung runs")
    print_ratios("blas2_vs_blas1", {"pair_step": (med[2] / med[1], p90[2] / p90[1])})
    return 0


if __name__ == "__main__":
    sys.exit(main())
