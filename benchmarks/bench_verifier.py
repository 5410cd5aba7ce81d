"""Verifier throughput: full score cards per second on one core (one numba thread; numpy's BLAS on one
thread, as in every alphagym process), against the pandas reference evaluating the same formulas without
any scoring, in the same process. R3 is off unless --stress-worlds gives world panels.

Workload: the five probe formulas, every usable Alpha101, and invalid answers (missing and doubled tags,
syntax errors, limit violations, a self-cancelling formula), each as a raw model answer. Ours: 5 runs per
answer; pandas: 3 evaluations per parseable formula, right after ours of the same answer (so a drift of
the machine's speed falls on both sides). Totals of per-answer medians (and p90s), never the best run;
idle, and under a competing CPU-bound process on the other core that the benchmark starts.
Last lines: full_scoring_vs_pandas_eval_<idle|load>_<median|p90>=<pandas total / scoring total>.
"""

from __future__ import annotations

import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")        # one core, before numba is imported

import argparse  # noqa: E402
import sys  # noqa: E402

from alphagym.config import load_params  # noqa: E402
from alphagym.dsl.alpha101 import alpha101  # noqa: E402
from alphagym.dsl.errors import DslError  # noqa: E402
from alphagym.dsl.parser import parse  # noqa: E402
from alphagym.panel import DSL_FIELDS  # noqa: E402
from common import PROBES, ROOT, CompetingLoad, median_p90, print_ratios, scoring_verifier, times  # noqa: E402
from reference_eval import ReferenceEvaluator  # noqa: E402

INVALID = [
    "rank(close)",                                               # no tag
    "<alpha>rank(close)</alpha><alpha>rank(open)</alpha>",       # doubled tag
    "<alpha>rank(close</alpha>",                                 # syntax
    "<alpha>ts_mean(ts_mean(close, 200), 100)</alpha>",          # lookback limit
    "<alpha>scale(ts_rank(ts_delta(volume, 23), 47) - ts_rank(ts_delta(volume, 23), 47))</alpha>",
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--stress-worlds", metavar="DIR",
                    help="score with R3 on, using every world panel (*.parquet) in DIR (results/world_model/worlds)")
    ap.add_argument("--kept-only", metavar="GATES_JSON",
                    help="with --stress-worlds: only the worlds this gate report kept, as the pipeline's verifier "
                         "loads them (results/world_model/gates.json)")
    ap.add_argument("--cold", action="store_true",
                    help="drop the rank(<field>) arrays the evaluators keep across formulas before every timed "
                         "call (by default they stay, as in a stream of formulas, and fill during the warm-up)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override params.yaml, e.g. verifier.jepa_stress.sessions=null (R3 on whole worlds)")
    args = ap.parse_args()
    params = load_params(ROOT / "params.yaml", args.set)
    train, verifier = scoring_verifier(params, args.stress_worlds, args.kept_only)
    worlds = verifier.stress_worlds
    alphas = [a.text for a in alpha101(panel_fields=frozenset(DSL_FIELDS)) if a.usable]
    if args.quick:
        alphas = alphas[::10]
    answers = [f"<think>probe</think><alpha>{f}</alpha>" for f in PROBES + alphas] + INVALID
    for a in answers:                                            # JIT warm-up
        verifier.score(a, answer=True)
    ref_ev = ReferenceEvaluator(train)
    evaluators = [verifier.evaluator, *verifier.stress_evaluators.values()]
    evaluators += [verifier.stress_base_evaluator] if verifier.stress_base_evaluator is not None else []

    def score(a: str) -> None:
        if args.cold:
            for ev in evaluators:
                ev.forget_field_ranks()
        verifier.score(a, answer=True)

    valid = sum(verifier.score(a, answer=True).valid for a in answers)
    parsed = {}                   # answer index -> the formula pandas evaluates (one well-tagged, parseable)
    for i, a in enumerate(answers):
        formula = a.split("<alpha>")[-1].split("</alpha>")[0]
        try:
            ast = parse(formula)
        except DslError:
            continue
        if "<alpha>" in a and a.count("<alpha>") == 1:
            parsed[i] = ast
    n = len(answers)
    span = params.verifier.jepa_stress.sessions
    span = "whole worlds" if verifier.stress_base is None else f"over the last {span} sessions"
    r3 = f"R3 on with {len(worlds)} worlds ({', '.join(worlds)}), {span}" if worlds else "R3 off"
    kept = "dropped before every call" if args.cold else "kept across formulas"
    print(f"panel {train.shape[0]} x {train.shape[1]} (train window); {n} answers, {valid} valid; one core; {r3}; "
          f"field ranks {kept}")
    results = {}
    for condition in ("idle", "load"):
        with CompetingLoad(condition == "load"):
            ours, ref = [], []
            for i, a in enumerate(answers):       # interleaved per answer: the VM's drift falls on both sides
                ours.append(median_p90(times(lambda a=a: score(a), 5)))
                if i in parsed:
                    ref.append(median_p90(times(lambda ast=parsed[i]: ref_ev.evaluate(ast), 3)))
        t_med, t_p90 = sum(t[0] for t in ours), sum(t[1] for t in ours)
        r_med, r_p90 = sum(t[0] for t in ref), sum(t[1] for t in ref)
        print(f"[{condition}] scoring: medians {t_med:.3f} s ({t_med / n * 1e3:.2f} ms per answer), p90s "
              f"{t_p90:.3f} s; pandas evaluation only: medians {r_med:.3f} s, p90s {r_p90:.3f} s")
        results[condition] = (r_med / t_med, r_p90 / t_p90)
    print_ratios("full_scoring_vs_pandas_eval", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
