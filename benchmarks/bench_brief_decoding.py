"""Brief-constrained sampling of one RL batch against the grammar-only sampler, with the tiny SFT policy, alternating
in one process, one torch thread (a rung's budget at 1:1). Three sides, each writing the default recipe's batch (4
filtered briefs x 8 answers, at most 64 new tokens) with the same seed: `grammar` (the grammar-only sampler,
untraced), `grammar_traced` (the same, recording each draw's refused tokens for the restricted log-probabilities,
as the RL trainer samples) and `brief` (each brief's contract, traced, as the RL trainer samples under
`policy.decoding: brief`). Each round takes the next 4 briefs, its own seed and fresh checkers (a rung meets new
texts at every step). Reported: medians and p90 of the seconds a batch, the per-round ratios brief / grammar and
brief / grammar_traced, and the share of valid answers that pass every hard check of their brief on each side
(train-window validity is not scored here: a parseable formula counts), the watch searches a batch, `forced_late`
(completions forced with fewer tokens left than their text needs: cut at the cap), `forced_lacking` (answers still
lacking a requirement of their brief when their completion was forced: the decoder wrote it), `growth_max`
(`policy.grammar`: the most one written token grew a row's completion between two searches of it) and
`lacking_completion_max` (the longest completion found for a row lacking a requirement: `grammar.LACK_ROOM` must
hold it). `--dense-watch` searches a watched row at every token (no spacing), which is how the growth bound
`grammar.GROWTH` is observed; its timings are not the decoder's. Needs the pipeline's SFT policy and filtered
briefs (`make run` up to `filter`; `--briefs` names another brief file, e.g. the training briefs).

`--answers FILE` writes every side's answers, a JSON line a round and side, so that two checkouts can be shown
to sample the same bytes for the same seeds (`cmp` of the two files).

    python benchmarks/bench_brief_decoding.py --rounds 12 [--results DIR] [--briefs FILE] [--dense-watch]
                                              [--answers FILE]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from alphagym.briefs.catalogue import load_catalogue  # noqa: E402
from alphagym.briefs.compliance import check  # noqa: E402
from alphagym.config import load_params  # noqa: E402
from alphagym.dsl.errors import DslError  # noqa: E402
from alphagym.dsl.parser import parse  # noqa: E402
from alphagym.dsl.prefix import PrefixChecker  # noqa: E402
from alphagym.policy import grammar  # noqa: E402
from alphagym.policy.model import load_policy, set_decoding  # noqa: E402
from common import ROOT

SIDES = {"grammar": ("grammar", False), "grammar_traced": ("grammar", True), "brief": ("brief", True)}


def compliant(answer: str, brief: dict, cat, tol: float) -> bool | None:
    """None when the answer is no parseable formula, else whether it passes every hard check."""
    if PrefixChecker().state(answer) != "done":
        return None
    try:
        ast = parse(answer.strip()[len("<alpha>"):-len("</alpha>")])
    except DslError:
        return None
    return check(brief, ast, cat, tol).ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--results", type=Path, default=None, help="a results folder (default: params' paths.results)")
    ap.add_argument("--briefs", type=Path, default=None,
                    help="a brief file (default: the filter stage's kept briefs in the results folder)")
    ap.add_argument("--dense-watch", action="store_true",
                    help="search a watched row at every token, to observe the completion's growth per token")
    ap.add_argument("--answers", type=Path, default=None, help="write each round's answers of each side here")
    args = ap.parse_args()
    written: list[str] = []
    if args.dense_watch:
        grammar.DENSE_WATCH = True
    torch.set_num_threads(1)
    params = load_params(ROOT / "params.yaml")
    results = args.results or ROOT / params.paths.results
    recipe, tol, cat = params.rl.recipe, params.briefs.horizon_tolerance, load_catalogue()
    policy = load_policy(results / "sft" / "tiny" / "policy")
    policy.max_new_tokens, policy.micro_batch = int(recipe.max_new_tokens), int(recipe.micro_batch)
    source = args.briefs or results / "filter" / "briefs.jsonl"
    briefs = [json.loads(line) for line in source.read_text().splitlines()]       # brief records: fields and text
    rel = lambda path: path.resolve().relative_to(ROOT) if path.resolve().is_relative_to(ROOT) else path  # noqa: E731
    print(f"policy {rel(results / 'sft' / 'tiny' / 'policy')}; briefs {rel(source)}")
    k, n = int(recipe.briefs_per_step), int(recipe.answers_per_brief)
    set_decoding(policy, "brief", params.dsl.limits, tol, params.policy.witness_variants)
    policy.generate(briefs[:k], n=n, seed=0, trace=True)                  # warm-up
    times: dict[str, list[float]] = {s: [] for s in SIDES}
    kept: dict[str, list[bool]] = {s: [] for s in SIDES}
    searches: dict[str, list[float]] = {s: [] for s in SIDES}
    late, lacking = dict.fromkeys(SIDES, 0.0), dict.fromkeys(SIDES, 0.0)
    growth, lacking_max = dict.fromkeys(SIDES, 0.0), dict.fromkeys(SIDES, 0)
    for r in range(args.rounds):
        batch = [briefs[(r * k + i) % len(briefs)] for i in range(k)]
        order = list(SIDES) if r % 2 == 0 else list(reversed(SIDES))
        for side in order:
            decoding, trace = SIDES[side]
            set_decoding(policy, decoding, params.dsl.limits, tol, params.policy.witness_variants)
            policy.decode_stats.clear()
            t0 = time.perf_counter()
            out = policy.generate(batch, n=n, temperature=1.0, seed=100 + r, trace=trace)
            times[side].append(time.perf_counter() - t0)
            searches[side].append(policy.decode_stats.get("watch_searches", 0))
            growth[side] = max(growth[side], policy.decode_stats.get("growth_max", 0.0))
            lacking_max[side] = max(lacking_max[side], policy.decode_stats.get("lacking_completion_max", 0))
            late[side] += policy.decode_stats.get("forced_late", 0)
            lacking[side] += policy.decode_stats.get("forced_lacking", 0)
            written.append(json.dumps({"round": r + 1, "side": side, "answers": out}))
            for fields, answers in zip(batch, out):
                kept[side] += [c for c in (compliant(a, fields, cat, tol) for a in answers) if c is not None]
        print(f"round {r + 1}: " + ", ".join(f"{s} {times[s][-1]:.3f} s" for s in SIDES), flush=True)
    if args.answers is not None:
        args.answers.write_text("".join(line + "\n" for line in sorted(written)))
    for s in SIDES:
        print(f"brief_decoding_{s}_median={np.median(times[s]):.3f}")
        print(f"brief_decoding_{s}_p90={np.percentile(times[s], 90):.3f}")
        print(f"brief_decoding_{s}_compliant_share={np.mean(kept[s]):.3f}  ({len(kept[s])} parseable answers)")
        print(f"brief_decoding_{s}_watch_searches_median={np.median(searches[s]):.0f}")
        print(f"brief_decoding_{s}_growth_max={growth[s]:.2f}")
        print(f"brief_decoding_{s}_lacking_completion_max={lacking_max[s]}  (the longest completion found for a row "
              "lacking a requirement, in tokens with the end token: what grammar.LACK_ROOM must hold)")
        print(f"brief_decoding_{s}_forced_late={late[s]:.0f}  (completions longer than the tokens left)")
        print(f"brief_decoding_{s}_forced_lacking={lacking[s]:.0f}  (answers whose brief requirement the decoder "
              f"wrote, of {args.rounds * k * n})")
    for ref in ("grammar", "grammar_traced"):
        ratio = [a / b for a, b in zip(times["brief"], times[ref], strict=True)]
        print(f"brief_decoding_over_{ref}_median={np.median(ratio):.2f}")
        print(f"brief_decoding_over_{ref}_p90={np.percentile(ratio, 90):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
