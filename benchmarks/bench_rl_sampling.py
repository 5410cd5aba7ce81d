"""What merged-adapter sampling and `disable_dropout` buy a rung, measured as the ladder runs: two rungs at
once with one core each (a LoRA rung beside a DoRA rung, as `make run` pairs `cispo_repo_all` with
`cispo_repo_dora`), so each condition runs under the load of the other rung.

Conditions, each a pair of fresh `bench_rl_step.py` processes (`--warmup` untimed steps, `--steps` timed
ones, medians and p90s, never best-of), alternating `--rounds` times:
  reference: sampling through the unmerged adapter, adapter dropout 0.05 (`disable_dropout: false`);
  merged:    the merged copy samples (`Policy.sampling_model`), dropout as the reference;
  default:   merged sampling and `disable_dropout: true` (params.yaml).
Run the stages up to `filter` first. Last lines: `<rung>_<condition>_step_median=<s>` and the speedups of
`default` over `reference` at the median and the p90.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys

import numpy as np

from common import ROOT

BENCH = ROOT / "benchmarks" / "bench_rl_step.py"
PARTS = ("step_time", "time/generation", "time/scoring", "time/reference", "time/update")
CONDITIONS = {
    "reference": (["--sampling", "adapter"], ["rl.recipe.disable_dropout=false"]),
    "merged": (["--sampling", "merged"], ["rl.recipe.disable_dropout=false"]),
    "default": (["--sampling", "merged"], ["rl.recipe.disable_dropout=true"]),
}


def _launch(rung: str, steps: int, warmup: int, flags: list[str], sets: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, str(BENCH), "--rung", rung, "--budgets", "1:1", "--steps", str(steps),
           "--warmup", str(warmup), *flags]
    for s in sets:
        cmd += ["--set", s]
    return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _result(proc: subprocess.Popen) -> dict:
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"bench_rl_step.py failed ({proc.returncode}):\n{err[-3000:]}")
    start = out.index("\n{") + 1
    end = out.index("\n}", start) + 2
    return json.loads(out[start:end])["1:1"]


def main(conditions: dict[str, tuple[list[str], list[str]]] = CONDITIONS, doc: str = __doc__) -> int:
    """Run `conditions` (name -> bench_rl_step.py flags, params overrides; the first is the reference, the
    last the default) on two rungs side by side."""
    ap = argparse.ArgumentParser(description=doc.splitlines()[0])
    ap.add_argument("--rungs", default="cispo_repo,cispo_repo_dora", help="the two rungs run side by side")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    rungs = args.rungs.split(",")
    res: dict[str, dict[str, list[dict]]] = {r: {c: [] for c in conditions} for r in rungs}
    for rnd in range(args.rounds):
        for cond, (flags, sets) in conditions.items():
            procs = [_launch(r, args.steps, args.warmup, flags, [*args.set, *sets]) for r in rungs]
            for r, p in zip(rungs, procs):
                res[r][cond].append(_result(p))
                m = res[r][cond][-1]
                print(f"round {rnd + 1} {cond:9s} {r}: step {m['step_time'][0]:.2f} s (p90 {m['step_time'][1]:.2f}) "
                      + " ".join(f"{k.split('/')[-1]}={m[k][0]:.2f}" for k in PARTS[1:]), flush=True)
    print("| rung | condition | step, median (p90) | generation | scoring | reference | update |")
    print("|---|---|---|---|---|---|---|")
    summary = {}
    for r in rungs:
        for cond in conditions:
            med = {k: float(np.median([m[k][0] for m in res[r][cond]])) for k in PARTS}
            p90 = float(np.median([m["step_time"][1] for m in res[r][cond]]))
            summary[(r, cond)] = (med["step_time"], p90)
            print(f"| {r} | {cond} | {med['step_time']:.2f} s ({p90:.2f}) | "
                  + " | ".join(f"{med[k]:.2f}" for k in PARTS[1:]) + " |")
    first, last = list(conditions)[0], list(conditions)[-1]
    for r in rungs:
        for cond in conditions:
            print(f"{r}_{cond}_step_median={summary[(r, cond)][0]:.3f}")
        ref, new = summary[(r, first)], summary[(r, last)]
        print(f"{r}_default_vs_reference_speedup_median={ref[0] / new[0]:.2f}")
        print(f"{r}_default_vs_reference_speedup_p90={ref[1] / new[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
