"""Does drawing the decoder's witness among variants (`policy.witness_variants`) keep the answers it completes
apart? The SFT policy answers the holdout briefs under brief decoding, once with one variant (every answer
lacking the same requirement gets the same term) and once with the configured number, same seeds; for each,
the answers the decoder completed for a lacking requirement (`forced_lacking`), the valid answers' distinct
canonical forms, and the train P&L of the valid answers: the mean |corr| between two answers to one brief,
and the effective bets of all of them (`books.metrics.effective_bets`); the decoding's seconds beside.

    python tools/witness_variety.py --results results --variants 1,8
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from alphagym.runtime import configure_runtime

configure_runtime()

from alphagym.books.metrics import effective_bets  # noqa: E402
from alphagym.briefs.catalogue import CHECKS, load_catalogue  # noqa: E402
from alphagym.briefs.generate import read_briefs  # noqa: E402
from alphagym.config import load_params  # noqa: E402
from alphagym.panel import Panel  # noqa: E402
from alphagym.policy.model import load_policy, set_decoding  # noqa: E402
from alphagym.verifier.verifier import Verifier  # noqa: E402


def _brief_corr(pnls: list[np.ndarray]) -> float | None:
    """Mean |corr| over the pairs of one brief's valid answers' P&L (None with fewer than two)."""
    if len(pnls) < 2:
        return None
    c = np.abs(np.nan_to_num(np.corrcoef(np.stack(pnls))))
    return float(c[np.triu_indices_from(c, k=1)].mean())


def measure(params, results: Path, variants: int, samples: int, seed: int) -> dict[str, float]:
    cat = load_catalogue()
    briefs = read_briefs(results / "briefs" / "holdout.jsonl", cat)
    verifier = Verifier(Panel.read_parquet(results / "panel" / "train.parquet"), params)
    policy = set_decoding(load_policy(results / "sft" / "tiny" / "policy"), "brief", params.dsl.limits,
                          params.briefs.horizon_tolerance, variants)
    t0 = time.perf_counter()
    answers = policy.generate(briefs, n=samples, temperature=params.sft.eval.temperature,
                              seed=seed)
    seconds = time.perf_counter() - t0
    n = len(briefs) * samples
    out = {"variants": variants, "answers": n, "seconds": seconds,
           "forced_lacking": policy.decode_stats.get("forced_lacking", 0) / n,
           **{f"lacking_{c}": policy.decode_stats.get(f"forced_lacking_{c}", 0) / n for c in CHECKS}}
    pnls, per_brief, canon = [], [], set()
    for group in answers:
        own = []
        for a in group:
            card = verifier.score(a, answer=True)
            if card.valid and card.pnl is not None and np.std(card.pnl) > 0:
                own.append(card.pnl)
                canon.add(card.canonical)
        pnls += own
        corr = _brief_corr(own)
        if corr is not None:
            per_brief.append(corr)
    out.update(valid=len(pnls) / n, distinct_canonical=len(canon),
               brief_abs_corr=float(np.mean(per_brief)) if per_brief else float("nan"),
               effective_bets=effective_bets(np.stack(pnls)) if pnls else 0.0)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default="results", help="a run's results folder (briefs, panel, sft/tiny)")
    ap.add_argument("--variants", default="1,8", help="witness variants to compare, comma-separated")
    ap.add_argument("--samples", type=int, default=4, help="answers per holdout brief")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    params = load_params("params.yaml")
    rows = [measure(params, Path(args.results), int(v), args.samples, args.seed) for v in args.variants.split(",")]
    keys = list(rows[0])
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for r in rows:
        print("| " + " | ".join(f"{r[k]:.3f}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |")


if __name__ == "__main__":
    main()
