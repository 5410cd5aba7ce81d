"""How often the equal-weight book of N independent planted edges shows a one-year Sharpe at least `ratio`
times the best single edge's, when each edge's true Sharpe is S (the market issue's "EW >= 1.5x the best
single edge" on every test seed).

Monte Carlo over the one-year estimates only: each edge's annualised Sharpe over 252 days is S plus noise of
sd sqrt(1 + S^2 / 504) (the standard error of a Sharpe estimate, annualised); the edges' daily P&L is
standardised and pairwise correlated `rho`, and the book's estimate shares their noise (a lucky year for one
edge is a lucky year for the book too). The best single edge is the largest of N noisy estimates, which is
what makes the ratio hard to reach: its expectation is S plus about 1.4 at N = 8.

    .venv/bin/python tools/ew_best_odds.py --edges 8 --sharpe 1.12 --seeds 3
"""

from __future__ import annotations

import argparse

import numpy as np


def ratio_draws(n: int, sharpe: float, rho: float, trials: int, rng: np.random.Generator) -> np.ndarray:
    """`trials` draws of (book's one-year Sharpe) / (best single edge's one-year Sharpe)."""
    cov = np.full((n, n), rho) + np.eye(n) * (1 - rho)
    z = rng.standard_normal((trials, n)) @ np.linalg.cholesky(cov).T
    single = sharpe + z * np.sqrt(1 + sharpe ** 2 / 504)
    book_true = n * sharpe / np.sqrt(n + n * (n - 1) * rho)
    book_noise = z.mean(1) / np.sqrt((1 + (n - 1) * rho) / n)      # unit variance, shared with the edges
    book = book_true + book_noise * np.sqrt(1 + book_true ** 2 / 504)
    return book / single.max(1)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edges", type=int, nargs="+", default=[8, 12, 16])
    ap.add_argument("--sharpe", type=float, nargs="+", default=[0.8, 1.12, 1.6, 2.5],
                    help="each edge's true annualised Sharpe on the holdout year, after costs")
    ap.add_argument("--rho", type=float, default=0.0, help="pairwise correlation of the edges' daily P&L")
    ap.add_argument("--ratio", type=float, default=1.5)
    ap.add_argument("--seeds", type=int, default=3, help="market seeds on which the ratio must hold at once")
    ap.add_argument("--trials", type=int, default=200_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    print(f"| edges | edge Sharpe | median book / best | P(>= {args.ratio}) one seed | "
          f"P(>= {args.ratio}) on {args.seeds} seeds |")
    print("|---|---|---|---|---|")
    for n in args.edges:
        for s in args.sharpe:
            r = ratio_draws(n, s, args.rho, args.trials, rng)
            p = float((r >= args.ratio).mean())
            print(f"| {n} | {s:.2f} | {np.median(r):.2f} | {p:.2f} | {p ** args.seeds:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
