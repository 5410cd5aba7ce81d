"""Evaluate a policy on the holdout briefs as the SFT stage does, for other sampling seeds or decodings:
a saved policy folder, or a pretrained backend zero-shot (`--zero-shot smollm2`).

    python tools/eval_policy.py results/sft/tiny/policy --seeds 9 10 11
    python tools/eval_policy.py results/sft/smollm2/policy --samples 2 --decoding grammar free
    python tools/eval_policy.py --zero-shot smollm2 --samples 2

One JSON line per (seed, decoding): the stage's `evaluate_policy` statistics, the grammar's refusal share
and the wall time. Reads the default profile's train panel and holdout briefs (`make run` first); `--set`
overrides params as on the command line.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from alphagym.briefs.catalogue import load_catalogue
from alphagym.briefs.generate import read_briefs
from alphagym.config import load_params, results_dir
from alphagym.panel import Panel
from alphagym.policy.evaluate import evaluate_policy
from alphagym.policy.grammar import rejected_share
from alphagym.policy.model import build_policy, load_policy, set_decoding
from alphagym.verifier.verifier import Verifier

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("policy", nargs="?", help="a policy folder written by the sft stage")
    ap.add_argument("--zero-shot", metavar="BACKEND", help="a pretrained backend as loaded, before any SFT")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="sampling seeds (default: the stage's)")
    ap.add_argument("--samples", type=int, default=None, help="answers per brief (default sft.eval.samples)")
    ap.add_argument("--decoding", nargs="+", choices=["brief", "grammar", "free"], default=["grammar"])
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    ap.add_argument("--answers", metavar="PARQUET", help="also write every answer with its validity and reason "
                    "(columns seed and decoding added)")
    args = ap.parse_args()
    if bool(args.policy) == bool(args.zero_shot):
        ap.error("give a policy folder or --zero-shot BACKEND, not both")
    params = load_params(ROOT / "params.yaml", args.set)
    torch.set_num_threads(params.policy.threads)      # as the sft stage runs the policy
    r = results_dir(params)
    ev, cat = params.sft.eval, load_catalogue()
    seeds = args.seeds or [int(params.seed) + 1]      # the stage evaluates after SFT with seed + 1
    samples = args.samples or int(ev.samples)
    holdout = read_briefs(r / "briefs" / "holdout.jsonl", cat)
    verifier = Verifier(Panel.read_parquet(r / "panel" / "train.parquet"), params)   # as the sft stage
    policy = (load_policy(args.policy, params.policy.hf.nf4) if args.policy
              else build_policy(args.zero_shot, params.policy, [], int(params.seed)))
    table: list[dict] = []
    for seed in seeds:
        for decoding in args.decoding:
            set_decoding(policy, decoding, params.dsl.limits, params.briefs.horizon_tolerance,
                         params.policy.witness_variants)
            t0 = time.perf_counter()
            stats, rows = evaluate_policy(policy, holdout, verifier, cat, float(params.briefs.horizon_tolerance),
                                       samples, float(ev.temperature), seed)
            d = policy.decode_stats
            print(json.dumps({"policy": args.policy or f"{args.zero_shot} (zero-shot)", "seed": seed,
                              "decoding": decoding, **stats,
                              "decode_rejected_share": rejected_share(d),
                              "forced": d.get("forced", 0), "seconds": round(time.perf_counter() - t0, 1)},
                             default=float), flush=True)
            policy.decode_stats.clear()
            table += [{**row, "seed": seed, "decoding": decoding} for row in rows]
    if args.answers:
        import pandas as pd

        pd.DataFrame(table).to_parquet(args.answers, index=False)


if __name__ == "__main__":
    main()
