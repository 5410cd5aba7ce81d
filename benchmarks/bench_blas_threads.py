"""numpy's BLAS threads and full scoring: one thread (alphagym's setting) against two (OpenBLAS's default on
2 cores), in one process, idle and under a competing CPU-bound process on the other core.

Workload: the five probe formulas and every usable Alpha101 as raw model answers, scored with R3 on when
--stress-worlds gives world panels (as `bench_verifier.py`), one numba thread. Each round scores the whole
workload once per setting, the settings alternating (1, 2, 2, 1, 1, 2, ...) so drift of the machine falls on
both; medians and p90s of the round times, never best-of.
Last lines: `blas2_vs_blas1_<idle|load>_<median|p90>=<time with 2 threads / time with 1>` (above 1: the
second thread costs time).
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")        # one core, before numba is imported

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

from threadpoolctl import threadpool_limits  # noqa: E402

from alphagym.config import load_params  # noqa: E402
from alphagym.dsl.alpha101 import alpha101  # noqa: E402
from alphagym.panel import DSL_FIELDS  # noqa: E402
from common import PROBES, ROOT, CompetingLoad, median_p90, print_ratios, scoring_verifier  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="rounds per setting and condition")
    ap.add_argument("--stress-worlds", metavar="DIR", help="R3 on with the worlds in DIR (results/world_model/worlds)")
    ap.add_argument("--kept-only", metavar="GATES_JSON", help="only the worlds this gate report kept")
    args = ap.parse_args()
    train, verifier = scoring_verifier(load_params(ROOT / "params.yaml"), args.stress_worlds, args.kept_only)
    worlds = verifier.stress_worlds
    alphas = [a.text for a in alpha101(panel_fields=frozenset(DSL_FIELDS)) if a.usable]
    answers = [f"<think>probe</think><alpha>{f}</alpha>" for f in PROBES + alphas]

    def one_pass(threads: int) -> float:
        with threadpool_limits(limits=threads, user_api="blas"):
            t0 = time.perf_counter()
            for a in answers:
                verifier.score(a, answer=True)
            return time.perf_counter() - t0

    one_pass(1)                                             # JIT and field-rank warm-up
    r3 = f"R3 on with {len(worlds)} worlds ({', '.join(worlds)})" if worlds else "R3 off"
    print(f"panel {train.shape[0]} x {train.shape[1]}; {len(answers)} answers; one numba thread; {r3}; "
          f"{args.rounds} rounds per setting")
    ratios = {}
    for condition in ("idle", "load"):
        times: dict[int, list[float]] = {1: [], 2: []}
        with CompetingLoad(condition == "load"):
            for r in range(args.rounds):
                for threads in ((1, 2) if r % 2 == 0 else (2, 1)):
                    times[threads].append(one_pass(threads))
        (m1, p1), (m2, p2) = median_p90(times[1]), median_p90(times[2])
        print(f"[{condition}] BLAS 1 thread: median {m1:.3f} s, p90 {p1:.3f} s; 2 threads: median {m2:.3f} s, "
              f"p90 {p2:.3f} s (a pass over the workload)")
        ratios[condition] = (m2 / m1, p2 / p1)
    print_ratios("blas2_vs_blas1", ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
