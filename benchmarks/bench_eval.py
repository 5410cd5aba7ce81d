"""Evaluator speed: the project's evaluator against the slow pandas reference, in the same process.

Workload: the five probe formulas plus every usable Alpha101, on the simulated 3,556 x 46 panel. Both
evaluators run each formula after a JIT warm-up; ours takes the best of 5 runs, the reference the best of 2
(1 with --quick). The two results are compared (NaN pattern, and the share of cells equal to 1e-7) so a fast
wrong answer shows. Cells can differ where a rank orders near-ties: pandas' online rolling moments leave
1e-18 residues where ours are exactly 0 (constant windows), and a rank then breaks the tie differently.
Last line: geomean_speedup=<x>. --quick: the probes and 10 alphas, in under a minute.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from alphagym.dsl.alpha101 import alpha101
from alphagym.dsl.evaluate import Evaluator
from alphagym.dsl.parser import parse
from alphagym.panel import DSL_FIELDS
from common import PROBES, best_time, geomean, simulated_panel
from reference_eval import ReferenceEvaluator

BUILTIN_ONLY = {"ts_argmax", "ts_argmin", "ts_product", "ts_decay_linear", "ts_ema", "ts_slope"}


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
    args = ap.parse_args()
    panel = simulated_panel()
    ours, ref = Evaluator(panel), ReferenceEvaluator(panel)
    items = workload(args.quick)
    for _, ast in items:                       # JIT warm-up of every kernel the workload touches
        ours.evaluate(ast)
    print(f"panel {panel.shape[0]} x {panel.shape[1]}; {len(items)} formulas")
    print(f"{'formula':<10} {'ours ms':>9} {'pandas ms':>10} {'speedup':>8}  same-NaN  cells-within-1e-7")
    speedups, builtin_speedups = [], []
    for name, ast in items:
        a = ours.evaluate(ast)
        b = ref.evaluate(ast)
        same_nan = np.array_equal(np.isnan(a), np.isnan(b))
        both = ~np.isnan(a) & ~np.isnan(b)
        close = np.isclose(a[both], b[both], rtol=1e-7, atol=1e-9)
        share = float(close.mean()) if close.size else 1.0
        # from scratch every time: the field ranks the evaluator keeps across formulas are dropped first
        t_ours = best_time(lambda ast=ast: (ours.forget_field_ranks(), ours.evaluate(ast)), 5)
        t_ref = best_time(lambda ast=ast: ref.evaluate(ast), 1 if args.quick else 2)
        s = t_ref / t_ours
        speedups.append(s)
        from alphagym.dsl.canonical import operators_used

        if not set(operators_used(ast)) & BUILTIN_ONLY:
            builtin_speedups.append(s)
        print(f"{name:<10} {t_ours * 1e3:9.2f} {t_ref * 1e3:10.1f} {s:8.1f}  {'yes' if same_nan else 'NO':>8}  "
              f"{share:.4%}", flush=True)
    print(f"geomean over formulas using only pandas built-in rolling ops ({len(builtin_speedups)}): "
          f"{geomean(builtin_speedups):.1f}")
    print(f"geomean_speedup={geomean(speedups):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
