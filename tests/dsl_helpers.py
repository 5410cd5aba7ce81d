"""A small random panel with the hard cases: NaN holes, late listings, ties, constant stretches, negatives."""

from __future__ import annotations

import numpy as np
import pandas as pd

from alphagym.panel import Panel, typical_price


def random_panel(days: int = 160, stocks: int = 9, seed: int = 0) -> Panel:
    rng = np.random.default_rng(seed)
    close = 50 * np.exp(np.cumsum(rng.normal(0, 0.02, (days, stocks)), axis=0))
    close[:, 0] = np.round(close[:, 0])                  # ties across days
    close[40:70, 1] = close[40, 1]                       # a constant stretch
    opn = close * np.exp(rng.normal(0, 0.01, (days, stocks)))
    high = np.maximum(opn, close) * 1.01
    low = np.minimum(opn, close) * 0.99
    volume = rng.integers(1, 6, (days, stocks)).astype(float) * 1e5   # many ties
    volume[90:120, 2] = 3e5
    f = {"open": opn, "high": high, "low": low, "close": close, "volume": volume}
    for k in f:
        f[k][100:104, 3] = np.nan                        # a hole
        f[k][:30, 4] = np.nan                            # a late listing
    f["returns"] = np.vstack([np.full((1, stocks), np.nan), close[1:] / close[:-1] - 1])
    f["returns"][100:105, 3] = np.nan
    f["returns"][:31, 4] = np.nan
    f["vwap"] = typical_price(f["high"], f["low"], f["close"])
    sectors = tuple("ABC"[i % 3] for i in range(stocks))
    dates = pd.bdate_range("2020-01-01", periods=days)
    return Panel(dates, tuple(f"T{i}" for i in range(stocks)), sectors, f, np.zeros(days, bool))
