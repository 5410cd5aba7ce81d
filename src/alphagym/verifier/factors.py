"""Five factor returns built from the panel with the same timing and construction as the book.

market: equal weight long all stocks (open-to-open, same holding period as the book);
size: dollar volume as the size proxy (panels carry no market cap), big minus small;
momentum: 12-1 month return; reversal: minus the 5-day return; low volatility: minus the 63-day return std.
The last four are rank / demean / gross-1 books of their signal, exactly like an answer's book.
"""

from __future__ import annotations

import numpy as np

from alphagym.engine.book import gross_pnl, market_forward, weights_from_signal
from alphagym.kernels import K_MEAN, K_STD, ts_moments
from alphagym.panel import Panel
from alphagym.params import FactorNeutrality

FACTOR_NAMES = ("market", "size", "momentum", "reversal", "low_volatility")


def factor_signals(panel: Panel, cfg: FactorNeutrality) -> dict[str, np.ndarray]:
    close = panel["close"]
    dv = np.ascontiguousarray(panel["dollar_volume"])
    r = np.ascontiguousarray(panel["returns"])
    skip, look = cfg.momentum_skip, cfg.momentum_lookback
    mom = np.full_like(close, np.nan)
    mom[look:] = close[look - skip:-skip] / close[:-look] - 1.0
    rev = np.full_like(close, np.nan)
    d = cfg.reversal_days
    rev[d:] = -(close[d:] / close[:-d] - 1.0)
    return {
        "size": np.log(ts_moments(dv, dv, cfg.size_adv_days, K_MEAN)),
        "momentum": mom,
        "reversal": rev,
        "low_volatility": -ts_moments(r, r, cfg.lowvol_days, K_STD),
    }


def factor_returns(panel: Panel, fwd: np.ndarray, cfg: FactorNeutrality, min_valid: int) -> np.ndarray:
    """(T-2, 5) daily factor returns, aligned with an answer's P&L rows."""
    cols = [np.nan_to_num(market_forward(fwd))]
    for sig in factor_signals(panel, cfg).values():
        cols.append(gross_pnl(weights_from_signal(sig, min_valid), fwd))
    return np.column_stack(cols)


def residual_sharpe_gap(pnl: np.ndarray, factors: np.ndarray) -> tuple[float, float, np.ndarray, float]:
    """(raw Sharpe, residual Sharpe, factor betas, R^2) after OLS of daily P&L on the factor returns.

    The residual (intercept + error) is measured in units of the raw book's volatility, so raw - residual
    is exactly the Sharpe explained by factor exposure (sum_k beta_k * mean f_k / sd(pnl)). Dividing by the
    residual's own volatility instead would explode for a book that *is* a factor (its residual vol -> 0).
    """
    sd = float(pnl.std())
    if sd == 0:
        return 0.0, 0.0, np.zeros(factors.shape[1]), 0.0
    x = np.column_stack([np.ones(len(pnl)), factors])
    coef, *_ = np.linalg.lstsq(x, pnl, rcond=None)
    residual = pnl - factors @ coef[1:]
    ann = np.sqrt(252.0)
    r2 = 1.0 - float(np.var(pnl - x @ coef)) / float(np.var(pnl))
    return float(pnl.mean() / sd * ann), float(residual.mean() / sd * ann), coef[1:], r2
