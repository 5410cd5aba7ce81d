"""Trading costs. Training: a flat charge per unit of turnover. Holdout: per stock and trade, harsher.

Holdout model, for a book of `book_usd` gross: fees + half-spread on traded dollars; square-root impact
Y * sigma_i * sqrt(traded_i / ADV_i) on traded dollars (sigma: `vol_window`-day return std, ADV:
`adv_window`-day dollar volume, both known at the decision close); a capacity charge on the part of a
position above `capacity_adv_share` of ADV; borrow on the short side. All as fractions of the gross book.
"""

from __future__ import annotations

import numpy as np

from alphagym.kernels import K_MEAN, K_STD, ts_moments
from alphagym.params import HoldoutCosts as HoldoutCostParams
from alphagym.params import TrainCosts


def train_cost_bps(cfg: TrainCosts) -> float:
    """(2 fee + 1 slippage + 0.5 half-spread) + 0.5 impact = 4.0 bps per unit of turnover by default."""
    return float(cfg.fee_bps + cfg.slippage_bps + cfg.half_spread_bps + cfg.impact_bps)


def train_cost(turnover: np.ndarray, cfg: TrainCosts) -> np.ndarray:
    return turnover * train_cost_bps(cfg) / 1e4


class HoldoutCosts:
    """Precomputes sigma and ADV once per panel; `cost(weights)` gives the daily cost series."""

    def __init__(self, returns: np.ndarray, dollar_volume: np.ndarray, cfg: HoldoutCostParams) -> None:
        self.cfg = cfg
        r = np.ascontiguousarray(returns)
        dv = np.ascontiguousarray(dollar_volume)
        self.sigma = ts_moments(r, r, cfg.vol_window, K_STD)
        self.adv = ts_moments(dv, dv, cfg.adv_window, K_MEAN)

    def cost(self, w: np.ndarray) -> np.ndarray:
        c = self.cfg
        book = c.book_usd
        prev = np.vstack([np.zeros((1, w.shape[1])), w[:-1]])
        traded = np.abs(w - prev)                                  # share of gross book traded at open t+1
        sigma = np.nan_to_num(self.sigma, nan=np.nanmedian(self.sigma))
        adv = np.nan_to_num(self.adv, nan=np.nanmedian(self.adv))
        adv = np.maximum(adv, 1.0)
        linear = traded * (c.fee_bps + c.half_spread_bps) / 1e4
        impact = traded * c.impact_y * sigma * np.sqrt(traded * book / adv)
        excess = np.maximum(np.abs(w) * book - c.capacity_adv_share * adv, 0.0) / book
        capacity = excess * c.capacity_penalty_bps / 1e4
        borrow = np.maximum(-w, 0.0) * c.borrow_bps_annual / 1e4 / 252.0
        return (linear + impact + capacity + borrow).sum(axis=1)[:-2]
