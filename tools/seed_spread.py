"""Spread over seed replicas of one probe checkpoint: the noise floor at a fixed step.

The report's seed table compares replicas' shipped checkpoints; this compares them at the same step, which is
what replicas run shorter than the ladder's rungs can give (the noise floor: docs/results.md, "With seeds at
600 steps").

    python tools/seed_spread.py --step 100 \
        cispo_repo=results/probe/tiny/cispo_repo,results/seeds/probe/tiny/cispo_repo-s1,...
"""

from __future__ import annotations

import argparse

import pandas as pd

COLUMNS = ["train_cpcv", "valid", "families", "holdout_score", "holdout_book_return", "holdout_book_sharpe",
           "holdout_book_beta"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--step", type=int, required=True, help="the checkpoint step every replica has")
    ap.add_argument("rungs", nargs="+", metavar="RUNG=DIR,DIR,...", help="probe folders of one rung's replicas")
    args = ap.parse_args()
    for item in args.rungs:
        rung, _, dirs = item.partition("=")
        rows = []
        for d in dirs.split(","):
            table = pd.read_parquet(f"{d}/checkpoints.parquet")
            at = table[table["step"] == args.step]
            if at.empty:
                raise SystemExit(f"{d}: no checkpoint at step {args.step} (steps {table['step'].tolist()})")
            rows.append({"probe": d, **at.iloc[0][COLUMNS].to_dict()})
        t = pd.DataFrame(rows)
        print(f"{rung} at step {args.step}, {len(t)} replicas")
        print(t.round(3).to_string(index=False))
        for c in ("train_cpcv", "holdout_score"):
            print(f"  {c}: mean {t[c].mean():.3f}  sd {t[c].std(ddof=1):.3f}  min {t[c].min():.3f}  "
                  f"max {t[c].max():.3f}")


if __name__ == "__main__":
    main()
