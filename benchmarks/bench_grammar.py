"""Grammar-constrained sampling of one RL batch with the tiny SFT policy: the prefix checker reusing what it
parsed before (`PrefixChecker(reuse=True)`, the default: calls an answer finished are not parsed again, only
the text after its last space is lexed again) against parsing every text from scratch with the same lexer and
parser (the reference), alternating in one process, one torch thread (a rung's budget at 1:1). The batch is
the default recipe's: 4 filtered briefs x 8 answers, at most 64 new tokens, each round on the next 4 briefs
with its own seed and a fresh checker for each side (a rung meets new texts at every step; its checker's
caches would also catch the texts it met before). Both sides write the same answers (checked every round); the
time is the whole `generate` call and the part spent in the grammar sampler (`GrammarSampler.pick`). Medians
and p90 of the seconds a batch, never best-of; needs the pipeline's SFT policy and filtered briefs (`make run`
up to `filter`).

    python benchmarks/bench_grammar.py --rounds 12 [--results DIR]

Last lines: `grammar_<reference|ours>_<generate|pick>_<median|p90>=<seconds>` and `grammar_speedup_*`.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from alphagym.config import load_params  # noqa: E402
from alphagym.dsl.parser import Limits  # noqa: E402
from alphagym.dsl.prefix import PrefixChecker  # noqa: E402
from alphagym.policy import grammar  # noqa: E402
from alphagym.policy.model import load_policy, set_decoding  # noqa: E402
from common import ROOT


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--results", type=Path, default=None, help="a results folder (default: params' paths.results)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    params = load_params(ROOT / "params.yaml")
    results = args.results or ROOT / params.paths.results
    recipe = params.rl.recipe
    policy = set_decoding(load_policy(results / "sft" / "tiny" / "policy"), "grammar",
                          params.dsl.limits, params.briefs.horizon_tolerance)
    policy.max_new_tokens, policy.micro_batch = int(recipe.max_new_tokens), int(recipe.micro_batch)
    briefs = [json.loads(line)["text"] for line in (results / "filter" / "briefs.jsonl").read_text().splitlines()]
    k, n = int(recipe.briefs_per_step), int(recipe.answers_per_brief)
    limits = Limits.from_params(params.dsl.limits)

    picked = [0.0]
    pick = grammar.GrammarSampler.pick

    def timed_pick(self, *a, **kw):
        t0 = time.perf_counter()
        try:
            return pick(self, *a, **kw)
        finally:
            picked[0] += time.perf_counter() - t0

    grammar.GrammarSampler.pick = timed_pick                 # type: ignore[method-assign]
    policy.generate(briefs[:k], n=n, seed=0)                 # warm-up
    times: dict[str, dict[str, list[float]]] = {s: {"generate": [], "pick": []} for s in ("reference", "ours")}
    for r in range(args.rounds):
        batch = [briefs[(r * k + i) % len(briefs)] for i in range(k)]
        written = {}
        for side in ("reference", "ours") if r % 2 == 0 else ("ours", "reference"):
            policy.grammar = PrefixChecker(limits, reuse=side == "ours")
            picked[0] = 0.0
            t0 = time.perf_counter()
            written[side] = policy.generate(batch, n=n, temperature=1.0, seed=100 + r)
            times[side]["generate"].append(time.perf_counter() - t0)
            times[side]["pick"].append(picked[0])
        assert written["ours"] == written["reference"], f"round {r + 1}: the two checkers wrote different answers"
        print(f"round {r + 1}: reference {times['reference']['generate'][-1]:.3f} s "
              f"(grammar {times['reference']['pick'][-1]:.3f}), ours {times['ours']['generate'][-1]:.3f} s "
              f"(grammar {times['ours']['pick'][-1]:.3f}); same answers", flush=True)
    for side in ("reference", "ours"):
        for part in ("generate", "pick"):
            ts = times[side][part]
            print(f"grammar_{side}_{part}_median={np.median(ts):.3f}")
            print(f"grammar_{side}_{part}_p90={np.percentile(ts, 90):.3f}")
    for part in ("generate", "pick"):
        ratio = [a / b for a, b in zip(times["reference"][part], times["ours"][part], strict=True)]
        print(f"grammar_speedup_{part}_median={np.median(ratio):.2f}")
        print(f"grammar_speedup_{part}_p90={np.percentile(ratio, 10):.2f}  "
              "(the 10th percentile of the per-round ratio)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
