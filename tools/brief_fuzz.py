"""Does every satisfiable brief get closed, parseable answers? Draws briefs over every family of the catalogue
(training and held-out alike, every field uniform, contradictory ones never drawn), has a policy answer each
`--answers` times under brief decoding at temperature 1, and reports per brief the share of answers that close
(`</alpha>`) and parse: the mean, the lowest, the share of briefs at 95% or more, and the worst briefs with
an example. `--checkpoint` puts an RL checkpoint on the SFT policy, as the probe does.

`--only FIELD=VALUE` keeps the drawn briefs with that field value (e.g. `forbidden=compact`, the node limit),
drawing until `--briefs` of them are kept.

    python tools/brief_fuzz.py --sft results/sft/tiny/policy [--checkpoint DIR] --briefs 100 --answers 16
                               [--only FIELD=VALUE]
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

import numpy as np

from alphagym.runtime import configure_runtime

configure_runtime()

from alphagym.briefs.catalogue import load_catalogue  # noqa: E402
from alphagym.briefs.generate import draw, families  # noqa: E402
from alphagym.config import load_params  # noqa: E402
from alphagym.dsl.prefix import PrefixChecker  # noqa: E402
from alphagym.rl.checkpoints import at_checkpoint, sft_base  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sft", type=Path, required=True, help="the SFT policy folder")
    ap.add_argument("--checkpoint", type=Path, default=None, help="an RL checkpoint on it (default: the SFT policy)")
    ap.add_argument("--briefs", type=int, default=100)
    ap.add_argument("--answers", type=int, default=16)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--only", default=None, metavar="FIELD=VALUE", help="keep only briefs with this field value")
    args = ap.parse_args()
    params = load_params("params.yaml")
    cat = load_catalogue()
    rng = np.random.default_rng(args.seed)
    if args.only is None:
        briefs = draw(cat, families(cat), args.briefs, "fuzz", rng)
    else:
        key, value = args.only.split("=", 1)
        kept: dict[str, dict] = {}                     # text -> brief: the draws are distinct only within one
        for _ in range(200):
            for b in draw(cat, families(cat), 100, "fuzz", rng):
                if str(b.get(key)) == value:
                    kept.setdefault(b["text"], b)
            if len(kept) >= args.briefs:
                break
        if not kept:
            raise SystemExit(f"no drawn brief has {key}={value}")
        briefs = list(kept.values())[:args.briefs]
    base = sft_base(args.sft, params.policy, params.dsl.limits, params.briefs.horizon_tolerance, "brief")
    policy = at_checkpoint(base, args.checkpoint) if args.checkpoint is not None else base
    policy.max_new_tokens = params.policy.max_new_tokens
    answers = policy.generate(briefs, n=args.answers, temperature=1.0, seed=args.seed)
    grammar = PrefixChecker()
    rows = []
    for b, group in zip(briefs, answers, strict=True):
        ok = [grammar.state(a) == "done" for a in group]
        rows.append((float(np.mean(ok)), b, next((a for a, good in zip(group, ok) if not good), None)))
    shares = np.array([r[0] for r in rows])
    who = args.checkpoint or args.sft
    print(f"{who}: {len(briefs)} briefs x {args.answers} answers under brief decoding")
    print(f"closed and parseable: mean {shares.mean():.3f}, lowest {shares.min():.3f}, "
          f"briefs at >= 95%: {(shares >= 0.95).mean():.3f} ({int((shares >= 0.95).sum())} of {len(briefs)})")
    print("decoder: " + ", ".join(f"{k} {v}" for k, v in sorted(Counter(policy.decode_stats).items())
                                  if k in ("dead_ends", "forced", "forced_late", "forced_lacking")))
    for share, b, bad in sorted(rows, key=lambda r: r[0])[:5]:
        fields = " ".join(f"{k}={b[k]}" for k in ("mechanism", "horizon", "input_rule", "structure", "forbidden"))
        print(f"  {share:.2f}  {fields}  e.g. {bad!r}")


if __name__ == "__main__":
    main()
