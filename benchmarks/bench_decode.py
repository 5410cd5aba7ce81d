"""Sampling one RL batch with the tiny SFT policy: `LlamaDecoder` (what `generate` uses for a plain Llama
on the CPU) against the model's own forward over its key/value cache (the reference), alternating in one
process, one torch thread (a rung's budget at 1:1). The batch is the default recipe's: 4 filtered briefs x
8 answers, at most 64 new tokens, grammar-constrained, each round on the next 4 briefs with its own seed.
Both write the same answers (tests/test_decode.py); an untimed pass of the round's batch first fills the
grammar checker's caches, so neither timed pass pays the grammar's parsing for new texts (whichever ran
first would) and the difference is the forward and the loop around it. Medians and p90 of the seconds a
batch, never best-of; needs the pipeline's SFT policy and filtered briefs (`make run` up to `filter`).

    python benchmarks/bench_decode.py --rounds 12

Last lines: `decode_<reference|ours>_<median|p90>=<seconds>` and `decode_speedup_median=<ratio>`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from alphagym.config import load_params  # noqa: E402
from alphagym.policy.model import Policy, load_policy, set_decoding  # noqa: E402
from common import ROOT


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    args = ap.parse_args()
    torch.set_num_threads(1)
    params = load_params(ROOT / "params.yaml")
    recipe = params.rl.recipe
    policy = set_decoding(load_policy(ROOT / params.paths.results / "sft" / "tiny" / "policy"), params.policy.decoding,
                          params.dsl.limits, params.briefs.horizon_tolerance, params.policy.witness_variants)
    policy.max_new_tokens, policy.micro_batch = int(recipe.max_new_tokens), int(recipe.micro_batch)
    lines = (ROOT / params.paths.results / "filter" / "briefs.jsonl").read_text().splitlines()
    briefs = [json.loads(line) for line in lines]          # brief records: the decoder keeps their fields
    k = int(recipe.briefs_per_step)
    times: dict[str, list[float]] = {"model": [], "auto": []}
    policy.generate(briefs[:k], n=int(recipe.answers_per_brief), seed=0)          # warm-up
    for r in range(args.rounds):
        batch = [briefs[(r * k + i) % len(briefs)] for i in range(k)]
        policy.generate(batch, n=int(recipe.answers_per_brief), temperature=1.0, seed=100 + r)     # untimed
        for stepper in ("model", "auto") if r % 2 == 0 else ("auto", "model"):
            Policy.stepper = stepper
            t0 = time.perf_counter()
            policy.generate(batch, n=int(recipe.answers_per_brief), temperature=1.0, seed=100 + r)
            times[stepper].append(time.perf_counter() - t0)
        print(f"round {r + 1}: reference {times['model'][-1]:.3f} s, ours {times['auto'][-1]:.3f} s", flush=True)
    Policy.stepper = "auto"
    for name, key in (("reference", "model"), ("ours", "auto")):
        print(f"decode_{name}_median={np.median(times[key]):.3f}")
        print(f"decode_{name}_p90={np.percentile(times[key], 90):.3f}")
    ratio = [a / b for a, b in zip(times["model"], times["auto"], strict=True)]
    print(f"decode_speedup_median={np.median(ratio):.2f}")
    print(f"decode_speedup_p90={np.percentile(ratio, 10):.2f}  (the 10th percentile of the per-round ratio)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
