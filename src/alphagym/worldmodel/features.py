"""Panel <-> world-model features.

Per stock-day features: log open-to-open return, log close-to-close return, log high/low range, log volume
change, overnight gap. They are standardised per stock with statistics of the train window only. The way
back (`features_to_panel`) compounds close-to-close returns from a starting level, places the open by the
overnight gap, spreads the range around the open-close body, and compounds volume, so every decoded window
is a complete OHLCV panel with high >= max(open, close) >= min(open, close) >= low > 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alphagym.panel import Panel, typical_price

FEATURES = ("oo", "cc", "range", "dlogvol", "gap")


def make_features(panel: Panel) -> np.ndarray:
    """(T, N, 5) raw features; row 0 (no previous day) is NaN."""
    o, h, lo, c, v = (panel[k] for k in ("open", "high", "low", "close", "volume"))
    out = np.full((*o.shape, len(FEATURES)), np.nan)
    with np.errstate(all="ignore"):
        out[1:, :, 0] = np.log(o[1:] / o[:-1])
        out[1:, :, 1] = np.log(c[1:] / c[:-1])
        out[:, :, 2] = np.log(h / lo)
        out[1:, :, 3] = np.log(v[1:] / v[:-1])
        out[1:, :, 4] = np.log(o[1:] / c[:-1])
    return out


@dataclass(frozen=True)
class FeatureScaler:
    mean: np.ndarray   # (N, F)
    std: np.ndarray    # (N, F)

    @classmethod
    def fit(cls, feats: np.ndarray) -> FeatureScaler:
        mean = np.nanmean(feats, axis=0)
        std = np.nanstd(feats, axis=0)
        return cls(mean, np.where(std > 0, std, 1.0))

    def transform(self, feats: np.ndarray) -> np.ndarray:
        return (feats - self.mean) / self.std

    def inverse(self, z: np.ndarray) -> np.ndarray:
        return z * self.std + self.mean


def features_to_panel(raw: np.ndarray, start_close: np.ndarray, start_volume: np.ndarray, template: Panel) -> Panel:
    """Complete OHLCV panel from raw (unstandardised) features (T, N, 5); `template` gives dates, tickers,
    sectors. Open-to-open returns are implied by cc and gap, so they are not used on the way back."""
    cc, rng, dlv, gap = raw[..., 1], np.maximum(raw[..., 2], 0.0), raw[..., 3], raw[..., 4]
    close = start_close[None, :] * np.exp(np.cumsum(cc, axis=0))
    prev_close = np.vstack([start_close[None, :], close[:-1]])
    opn = prev_close * np.exp(gap)
    body = np.abs(np.log(close / opn))
    extra = np.maximum(rng - body, 0.0) / 2.0
    high = np.maximum(opn, close) * np.exp(extra)
    low = np.minimum(opn, close) * np.exp(-extra)
    volume = start_volume[None, :] * np.exp(np.cumsum(dlv, axis=0))
    fields = {"open": opn, "high": high, "low": low, "close": close, "volume": volume}
    fields["returns"] = close / prev_close - 1.0
    fields["vwap"] = typical_price(high, low, close)
    fields["dollar_volume"] = close * volume
    oo = np.vstack([np.zeros((1, opn.shape[1])), opn[1:] / opn[:-1] - 1.0])
    market = oo.mean(axis=1, keepdims=True)
    market[0] = np.nan                     # no previous open on the first decoded day
    fields["market_return"] = np.repeat(market, opn.shape[1], axis=1)
    return Panel(template.dates, template.tickers, template.sectors, fields, np.zeros(len(template.dates), bool))
