"""Seconds per RL step of a rung's recipe on this machine, split into generation, scoring, the reference pass
and the update (all passes), with the thread budget of each library.

Runs the trainer of `--rung` on the pipeline's own outputs (the SFT policy of `rl.policy`, the filtered
briefs, the archive, the kept stress worlds: run `make run` first), `--warmup` steps untimed, then `--steps`
timed steps; medians and p90s per part, never best-of, and the share of the step the four parts explain.
`--set` takes params overrides (e.g. `--set rl.policy=smollm2`); `--sampling adapter` samples through the
unmerged adapter (the reference for the merged copy the trainer samples with); `--prompts each` runs every
answer's whole prompt when sampling and in the reference and update passes (`Policy.share_prompts` off: the
reference for `_prefill` and `_grouped_logits`, which run a repeated prompt once per group). Each thread
budget runs in a fresh trainer (same seed, so the same briefs and answers up to the thread-dependent float rounding).
Last lines: `rl_step_<part>_<median|p90>=<seconds>` for the first budget, the mean share of answers whose score
card came from the verifier's cache (`rl_step_cache_hit_rate`), and the projected rung hours.

Sides compared in one process (`--sft` given more than once, or `--rungs`): each SFT policy under each rung, in
turn at the first budget, on the same inputs and seed; `rl_step_side<i>_...` per side and its ratio to side 0.

    python benchmarks/bench_rl_step.py --rung cispo_repo --sft results/sft/tiny/policy \
        --sft results/capacity/sft/tiny/policy --sft results/sft/tiny/policy --budgets 1:1   # first again last
    python benchmarks/bench_rl_step.py --rungs cispo_repo,cispo_repo_grammar,cispo_repo --budgets 1:1
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from alphagym.config import load_params
from alphagym.pipeline import stage_table
from alphagym.rl.stage import build_trainer
from common import ROOT

PARTS = ("time/generation", "time/scoring", "time/reference", "time/update")


def run(params, rung: str, warmup: int, steps: int, sft: Path | None = None) -> dict:
    key = f"train@{rung}"
    deps = stage_table(params)[key].paths("deps")
    if sft is not None:
        deps["policy"] = sft
    t0 = time.perf_counter()
    trainer = build_trainer(params, deps, rung, None)
    setup = time.perf_counter() - t0
    rows = []
    for s in range(warmup + steps):
        m = trainer.train_step(s)
        if s >= warmup:
            rows.append(m)
        print(f"  step {s}{' (warm-up)' if s < warmup else ''}: {m['step_time']:.2f} s "
              + " ".join(f"{p.split('/')[1]}={m[p]:.2f}" for p in PARTS)
              + f" cache_hits={m.get('verifier/cache_hit_rate', 0.0):.2f}", flush=True)
    out = {"setup_s": setup}
    for k in ("step_time", *PARTS):
        v = [r[k] for r in rows]
        out[k] = (float(np.median(v)), float(np.percentile(v, 90)))
    out["parts_share_of_step"] = float(np.median([sum(r[p] for p in PARTS) / r["step_time"] for r in rows]))
    out["completions_mean_length"] = float(np.mean([r["completions/mean_length"] for r in rows]))
    out["cache_hit_rate"] = float(np.mean([r.get("verifier/cache_hit_rate", 0.0) for r in rows]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rung", default=None, help="a rung of rl.ladder (default: the ladder's first)")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--budgets", default="2:2,2:1,1:1",
                    help="torch:numba thread budgets to measure, comma-separated (first one is reported last)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--sft", action="append", type=Path, default=[], metavar="DIR",
                    help="an SFT policy folder to train from instead of the stage table's, e.g. another size's "
                         "(profile `capacity`); with several (or --rungs), each side is measured in turn at the "
                         "first budget on the same briefs, archive and worlds, with its step's ratio to the first")
    ap.add_argument("--rungs", default=None, metavar="R1,R2",
                    help="rungs measured in turn as sides (e.g. cispo_repo,cispo_repo_grammar: brief decoding "
                         "against the grammar alone)")
    ap.add_argument("--sampling", choices=("merged", "adapter"), default="merged",
                    help="merged: what the trainer does (Policy.sampling_model); adapter: sample through the "
                         "unmerged adapter, the reference")
    ap.add_argument("--prompts", choices=("grouped", "each"), default="grouped",
                    help="grouped: what the trainer does (a group's prompt runs once); each: every answer runs "
                         "its whole prompt (after the shared system turn in the update), the reference")
    args = ap.parse_args()
    if args.prompts == "each":
        from alphagym.policy.model import Policy

        Policy.share_prompts = False
    if args.sampling == "adapter":
        from alphagym.policy.model import Policy

        Policy.sampling_model = lambda self: self.model     # type: ignore[method-assign]
    base = load_params(ROOT / "params.yaml", args.set)
    rung = args.rung or base.rl.ladder[0]
    recipe = base.rl.recipe_of(rung)
    n = recipe.briefs_per_step * recipe.answers_per_brief
    if args.sft or args.rungs:              # each side prints its own rung and policy
        return compare(args, recipe.steps)
    print(f"rung {rung} on {base.rl.policy}: {recipe.briefs_per_step} x {recipe.answers_per_brief} = {n} answers, "
          f"max {recipe.max_new_tokens} new tokens, {recipe.updates_per_batch} update passes, "
          f"loss {recipe.loss}, R3 {'on' if base.verifier.jepa_stress.enabled else 'off'}")
    results = {}
    for budget in args.budgets.split(","):
        t, nb = budget.split(":")
        params = load_params(ROOT / "params.yaml", [*args.set, f"rl.recipe.torch_threads={t}",
                                                    f"rl.recipe.numba_threads={nb}"])
        print(f"torch {t} threads, numba {nb}:")
        results[budget] = run(params, rung, args.warmup, args.steps)
    print(json.dumps(results, indent=1))
    first = results[args.budgets.split(",")[0]]
    for k in ("step_time", *PARTS):
        name = k.replace("time/", "")
        print(f"rl_step_{name}_median={first[k][0]:.3f}")
        print(f"rl_step_{name}_p90={first[k][1]:.3f}")
    print(f"rl_step_cache_hit_rate={first['cache_hit_rate']:.3f}")
    hours = first["step_time"][0] * recipe.steps / 3600
    print(f"projected_rung_hours={hours:.2f} ({recipe.steps} steps at the median)")
    return 0


def compare(args, steps: int) -> int:
    """Each side, in turn in this process at the first budget, on the same inputs and seed: every `--sft`
    policy (else the stage table's) under every rung of `--rungs` (else `--rung`); ratios to the first side."""
    t, nb = args.budgets.split(",")[0].split(":")
    # the rungs compared join the ladder, so that the stage table has their training stages
    ladder = [f"rl.ladder=[{','.join(dict.fromkeys(args.rungs.split(',')))}]"] if args.rungs else []
    params = load_params(ROOT / "params.yaml", [*args.set, *ladder, f"rl.recipe.torch_threads={t}",
                                                f"rl.recipe.numba_threads={nb}"])
    rungs = args.rungs.split(",") if args.rungs else [args.rung or params.rl.ladder[0]]
    sides = [(rung, sft) for sft in (args.sft or [None]) for rung in rungs]
    first = None
    for i, (rung, sft) in enumerate(sides):
        size = json.loads(((sft or stage_table(params)[f"train@{rung}"].paths("deps")["policy"]) / "config.json")
                          .read_text())
        print(f"side{i}: rung {rung}, policy {sft or 'of the stage table'}: hidden {size.get('hidden_size')}, "
              f"layers {size.get('num_hidden_layers')}; torch {t} threads, numba {nb}:")
        out = run(params, rung, args.warmup, args.steps, sft)
        first = first or out
        for k in ("step_time", *PARTS):
            name = k.replace("time/", "")
            print(f"rl_step_side{i}_{name}_median={out[k][0]:.3f}")
            print(f"rl_step_side{i}_{name}_p90={out[k][1]:.3f}")
        print(f"rl_step_side{i}_completions_mean_length={out['completions_mean_length']:.1f}")
        print(f"rl_step_side{i}_over_side0_median={out['step_time'][0] / first['step_time'][0]:.2f}")
        print(f"projected_rung_hours_side{i}={out['step_time'][0] * steps / 3600:.2f} ({steps} steps)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
