"""Ladder throughput on this machine: one rung at a time with every core, against two rungs at once with
one core each (what `snakemake --cores 2` runs when each rung declares one thread).

Each condition runs `bench_rl_step.py` in fresh processes on the pipeline's own outputs (run the stages up
to `filter` first): `--warmup` untimed steps, then `--steps` timed ones, medians and p90s of the step time,
never best-of. "alone": `--rung` with torch:numba threads `--alone` (default 2:2). "pair": the same rung
and a replica under another seed (so the two do not run in lockstep), both at `--pair` (default 1:1),
started together. Throughput = rung steps finished per minute by the whole machine (2 / median step for
the pair). The conditions alternate `--rounds` times (alone, pair, alone, pair, ...); each process's
median (p90) of each phase (generation, scoring, reference, update) is printed with its round.
Last lines: `pair_vs_alone_throughput_<median|p90>=<ratio>`; above 1 means two rungs at once finish the
ladder sooner.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np

from common import ROOT

BENCH = ROOT / "benchmarks" / "bench_rl_step.py"
PARTS = ("time/generation", "time/scoring", "time/reference", "time/update")


def _launch(rung: str, budget: str, steps: int, warmup: int, sets: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, str(BENCH), "--rung", rung, "--budgets", budget, "--steps", str(steps),
           "--warmup", str(warmup)]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen, budget: str) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"bench_rl_step.py failed ({proc.returncode}):\n{err[-3000:]}")
    start = out.index("\n{") + 1
    end = out.index("\n}", start) + 2
    return json.loads(out[start:end])[budget]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rung", default="cispo_repo")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--alone", default="2:2", help="torch:numba threads of the rung run alone")
    ap.add_argument("--pair", default="1:1", help="torch:numba threads of each of the two rungs run together")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    alone, pair = [], []
    for r in range(args.rounds):
        t0 = time.perf_counter()
        res = _result(_launch(args.rung, args.alone, args.steps, args.warmup, args.set), args.alone)
        alone.append((res["step_time"], time.perf_counter() - t0))
        print(f"round {r + 1} alone ({args.alone}): step {res['step_time'][0]:.2f} s (p90 {res['step_time'][1]:.2f})"
              f", wall {alone[-1][1]:.0f} s", flush=True)
        t0 = time.perf_counter()
        procs = [_launch(args.rung, args.pair, args.steps, args.warmup, args.set),
                 _launch(args.rung, args.pair, args.steps, args.warmup, [*args.set, "seed=8"])]
        both = [_result(p, args.pair) for p in procs]
        pair.append(([b["step_time"] for b in both], time.perf_counter() - t0))
        print(f"round {r + 1} pair ({args.pair} each): steps "
              + ", ".join(f"{b['step_time'][0]:.2f} s (p90 {b['step_time'][1]:.2f})" for b in both)
              + f", wall {pair[-1][1]:.0f} s", flush=True)
        for name, b in (("alone", res), *((f"pair {i + 1}", x) for i, x in enumerate(both))):
            print(f"  {name} phases, median (p90) s: " + ", ".join(
                f"{k.split('/')[-1]} {b[k][0]:.2f} ({b[k][1]:.2f})" for k in PARTS), flush=True)
    a_med = float(np.median([a[0][0] for a in alone]))
    a_p90 = float(np.median([a[0][1] for a in alone]))
    p_med = float(np.median([s[0] for p in pair for s in p[0]]))
    p_p90 = float(np.median([s[1] for p in pair for s in p[0]]))
    print(f"alone: {a_med:.2f} s a step (p90 {a_p90:.2f}): {60 / a_med:.1f} rung steps a minute")
    print(f"pair: {p_med:.2f} s a step each (p90 {p_p90:.2f}): {120 / p_med:.1f} rung steps a minute")
    print(f"pair_vs_alone_throughput_median={2 * a_med / p_med:.2f}")
    print(f"pair_vs_alone_throughput_p90={2 * a_p90 / p_p90:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
