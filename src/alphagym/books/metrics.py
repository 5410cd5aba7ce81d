"""Book metrics and the correlation-capped selector: small pure functions of daily return series.

A book here is a set of answers whose daily net P&L series (each a dollar-neutral book at unit gross, after
costs) are averaged with equal weights. Returns are simple daily returns; growth of $1 compounds them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

DAYS = 252


def sharpe(r: np.ndarray) -> float:
    """Annualised: mean / std (ddof 1) * sqrt(252); 0 for a flat or too-short series."""
    r = np.asarray(r, float)
    if len(r) < 2:
        return 0.0
    sd = float(r.std(ddof=1))
    return float(r.mean() / sd * np.sqrt(DAYS)) if sd > 0 else 0.0


def total_return(r: np.ndarray) -> float:
    """Growth of $1 over the series, minus 1: prod(1 + r) - 1."""
    return float(np.prod(1.0 + np.asarray(r, float)) - 1.0)


def max_drawdown(r: np.ndarray) -> float:
    """Largest fall of the growth of $1 from its running peak, as a positive share (0.25 = -25%)."""
    growth = np.cumprod(1.0 + np.asarray(r, float))
    peak = np.maximum.accumulate(np.concatenate([[1.0], growth]))[1:]
    return float(np.max(1.0 - growth / peak)) if len(growth) else 0.0


def beta_corr(r: np.ndarray, market: np.ndarray) -> tuple[float, float]:
    """OLS beta of the book on the market (cov / var) and their correlation."""
    r, m = np.asarray(r, float), np.asarray(market, float)
    var = float(m.var())
    if var == 0 or float(r.var()) == 0:
        return 0.0, 0.0
    cov = float(((r - r.mean()) * (m - m.mean())).mean())
    return cov / var, cov / np.sqrt(var * float(r.var()))


def effective_bets(pnls: np.ndarray) -> float:
    """Effective number of independent bets among the answers (rows): the participation ratio of the
    eigenvalues of their correlation matrix, (sum l)^2 / sum l^2. n uncorrelated answers give n, n copies
    of one answer give 1."""
    pnls = np.asarray(pnls, float)
    if pnls.ndim != 2 or pnls.shape[0] == 0:
        return 0.0
    if pnls.shape[0] == 1:
        return 1.0
    lam = np.clip(np.linalg.eigvalsh(np.corrcoef(pnls)), 0.0, None)
    return float(lam.sum() ** 2 / (lam ** 2).sum())


def mean_pairwise_corr(pnls: np.ndarray) -> float:
    pnls = np.asarray(pnls, float)
    if pnls.ndim != 2 or pnls.shape[0] < 2:
        return 0.0
    c = np.corrcoef(pnls)
    return float(c[np.triu_indices_from(c, k=1)].mean())


def book_metrics(pnls: np.ndarray, market: np.ndarray, down_day: float = -0.015) -> dict[str, float]:
    """The equal-weight book of the rows of `pnls` (answers x days) against the market's daily return."""
    pnls = np.atleast_2d(np.asarray(pnls, float))
    book = pnls.mean(axis=0)
    beta, corr = beta_corr(book, market)
    down = np.asarray(market) < down_day
    return {"answers": float(pnls.shape[0]), "return": total_return(book), "sharpe": sharpe(book),
            "max_drawdown": max_drawdown(book), "beta": beta, "market_corr": corr,
            "market_return": total_return(market), "market_sharpe": sharpe(market),
            "market_max_drawdown": max_drawdown(market), "down_days": float(down.sum()),
            # a mean over no day is no number: NaN ("-" in the report), not a flat 0
            "book_mean_on_down_days": float(book[down].mean()) if down.any() else float("nan"),
            "market_mean_on_down_days": float(np.asarray(market)[down].mean()) if down.any() else float("nan"),
            "mean_pairwise_corr": mean_pairwise_corr(pnls), "effective_bets": effective_bets(pnls)}


def capped_selection(train_cpcv: Sequence[float], turnover: Sequence[float], train_pnls: np.ndarray,
                     min_turnover: float = 0.02, max_corr: float = 0.5) -> list[int]:
    """Indices of the correlation-capped book, chosen on train-window numbers only: answers by train CPCV,
    best first; skip turnover below `min_turnover`; skip an answer whose train P&L has |corr| >= `max_corr`
    with any answer already chosen (`capped_stream` over P&L already computed, no size cap)."""
    return capped_stream(list(zip(train_cpcv, turnover, strict=True)), lambda i: train_pnls[i], len(train_cpcv),
                         min_turnover, max_corr)

def capped_stream(candidates: Sequence[tuple[float, float]], train_pnl: Callable[[int], np.ndarray | None],
                  size: int, min_turnover: float = 0.02, max_corr: float = 0.5) -> list[int]:
    """`capped_selection` over a pool too large to score whole: candidates (train CPCV, turnover) walked in
    train-CPCV order, each one's train P&L computed only when it is reached (`train_pnl(i)`, None when it no
    longer scores valid), until `size` are chosen. Train numbers only."""
    order = np.argsort(-np.asarray([c[0] for c in candidates], float), kind="stable")
    chosen: list[int] = []
    pnls: list[np.ndarray] = []
    for i in order:
        if len(chosen) >= size:
            break
        if candidates[i][1] < min_turnover:
            continue
        p = train_pnl(int(i))
        if p is None or any(abs(float(np.corrcoef(p, q)[0, 1])) >= max_corr for q in pnls):
            continue
        chosen.append(int(i))
        pnls.append(p)
    return chosen


BOOTSTRAP_DRAWS = 2000


def bootstrap_interval(stat: Callable[[np.ndarray, np.ndarray], float], seeds: int, briefs: int,
                       level: float = 0.95, draws: int = BOOTSTRAP_DRAWS, seed: int = 0) -> tuple[float, float]:
    """The percentile interval of `stat(seed_rows, brief_columns)` under a two-way bootstrap: each draw
    resamples the seed replicas (when there are two or more) and the holdout briefs, with replacement, and the
    same resampled briefs serve every replica (they answered the same briefs). Seeded, so the same inputs
    give the same interval."""
    rng = np.random.default_rng([seed, 61])
    out = np.empty(draws)
    for i in range(draws):
        ks = rng.integers(seeds, size=seeds) if seeds > 1 else np.zeros(1, int)
        bs = rng.integers(briefs, size=briefs)
        out[i] = stat(ks, bs)
    a = (1.0 - level) / 2
    if np.isnan(out).all():            # no valid answer to score (a checkpoint the probe did not answer with)
        return float("nan"), float("nan")
    return float(np.nanquantile(out, a)), float(np.nanquantile(out, 1.0 - a))
