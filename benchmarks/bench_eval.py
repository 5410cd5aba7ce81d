"""Evaluator speed: the project's evaluator against the slow pandas reference, in the same process.

Workload: the five probe formulas plus every usable Alpha101, on the simulated 3,556 x 46 panel. Both
evaluators run each formula after a JIT warm-up. Each formula is timed `--repeats` times (ours, every
evaluation from scratch: the field ranks the evaluator keeps across formulas are dropped first) and 3 times
(pandas), the three timings of a formula (pandas, ours on 2 threads, ours on 1) one right after the other so
a drift of the machine's speed falls on all of them; the tables give medians and p90s, never the best run.
Two conditions, each in this process: idle, and under a competing CPU-bound process on one core that the
benchmark starts itself; and two numba thread counts for our kernels (2 = both cores, 1). The speed-up of a
formula is the pandas median over ours (median, and p90 over p90). The two results are compared (NaN
pattern, share of cells equal to 1e-7) so a fast wrong answer shows.
Last lines: geomean_speedup_<condition>_<threads>t_<median|p90>=<x>. --quick: the probes and 10 alphas.
"""

from __future__ import annotations

import argparse
import sys

import numba
import numpy as np

from alphagym.dsl.alpha101 import alpha101
from alphagym.dsl.evaluate import Evaluator
from alphagym.dsl.parser import parse
from alphagym.panel import DSL_FIELDS
from common import PROBES, CompetingLoad, geomean, median_p90, simulated_panel, times
from reference_eval import ReferenceEvaluator


def workload(quick: bool) -> list[tuple[str, object]]:
    items = [(f"probe{i + 1}", parse(f)) for i, f in enumerate(PROBES)]
    alphas = [a for a in alpha101(panel_fields=frozenset(DSL_FIELDS)) if a.usable]
    if quick:
        alphas = alphas[::10]
    items += [(f"alpha{a.number:03d}", a.ast) for a in alphas]
    return items


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=11)
    args = ap.parse_args()
    panel = simulated_panel()
    ours, ref = Evaluator(panel), ReferenceEvaluator(panel)
    items = workload(args.quick)
    for _, ast in items:                       # JIT warm-up of every kernel the workload touches
        ours.evaluate(ast)
    print(f"panel {panel.shape[0]} x {panel.shape[1]}; {len(items)} formulas; {args.repeats} runs of ours, "
          f"3 of pandas per formula and condition; numba layer {numba.threading_layer()}")
    agree = []
    for _, ast in items:
        a, b = ours.evaluate(ast), ref.evaluate(ast)
        both = ~np.isnan(a) & ~np.isnan(b)
        close = np.isclose(a[both], b[both], rtol=1e-7, atol=1e-9)
        agree.append((np.array_equal(np.isnan(a), np.isnan(b)), float(close.mean()) if close.size else 1.0))
    print(f"same NaN pattern: {sum(s for s, _ in agree)} of {len(agree)}; all cells within 1e-7: "
          f"{sum(c == 1.0 for _, c in agree)} of {len(agree)}")
    summary = {}
    for condition in ("idle", "load"):
        with CompetingLoad(condition == "load"):
            ratios: dict[int, tuple[list[float], list[float]]] = {2: ([], []), 1: ([], [])}
            rows: dict[int, list[str]] = {2: [], 1: []}
            for name, ast in items:            # interleaved per formula: the VM's drift falls on every side
                r = median_p90(times(lambda ast=ast: ref.evaluate(ast), 3))
                for threads in (2, 1):
                    numba.set_num_threads(threads)
                    t = median_p90(times(lambda ast=ast: (ours.forget_field_ranks(), ours.evaluate(ast)),
                                         args.repeats))
                    ratios[threads][0].append(r[0] / t[0])
                    ratios[threads][1].append(r[1] / t[1])
                    rows[threads].append(f"{name:<10} {t[0] * 1e3:8.2f} {t[1] * 1e3:8.2f} {r[0] * 1e3:9.1f} "
                                         f"{ratios[threads][0][-1]:7.1f}")
            for threads in (2, 1):
                print(f"\n[{condition}, {threads} numba thread(s)]  formula  ours-median-ms  ours-p90-ms  "
                      f"pandas-median-ms  speedup-median")
                print("\n".join(rows[threads][:5]) + ("\n..." if len(rows[threads]) > 5 else ""))
                summary[(condition, threads)] = (geomean(ratios[threads][0]), geomean(ratios[threads][1]))
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
    print()
    for (condition, threads), (m, p) in summary.items():
        print(f"geomean_speedup_{condition}_{threads}t_median={m:.2f}")
        print(f"geomean_speedup_{condition}_{threads}t_p90={p:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
