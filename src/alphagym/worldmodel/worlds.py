"""Stress worlds: shift the world model's latents along five directions and decode complete panels.

Directions are found from the data: a ridge probe from each window's pooled latent to a window statistic
(dispersion between stocks, market trend, mean correlation, volatility, crash depth); the direction of a
channel is its probe's coefficient vector. A window's latents move along it (every stock by the same
vector, so the pooled latent moves by exactly that much) by `magnitude` standard deviations of the
statistic; trend is flipped instead (moved by minus twice its predicted value).

Decoding keeps the data's own noise: with the location-scale decoder, a window's standardised residuals
r = (x - mu(z)) / sigma(z) are carried into the shifted world x' = mu(z') + sigma(z') * r. An unshifted world
reproduces the real panel exactly; a shifted one moves levels and scales without erasing fat tails or the
cross-stock structure of the residuals. Windows are decoded one by one and stitched.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from alphagym.data.panel import Panel
from alphagym.worldmodel.features import FEATURES, FeatureScaler, features_to_panel, make_features
from alphagym.worldmodel.geometry import correlation
from alphagym.worldmodel.model import WorldModel

CHANNELS = ("dispersion", "trend_flip", "correlation", "volatility", "crash")
STATISTIC = {"dispersion": "dispersion", "trend_flip": "trend", "correlation": "correlation",
             "volatility": "volatility", "crash": "crash"}
DIRECTION = {"dispersion": 1.0, "correlation": 1.0, "volatility": 1.0, "crash": -1.0}   # sign of the stress


def window_statistics(cc: np.ndarray) -> dict[str, float]:
    """Statistics of a (days x stocks) window of log close-to-close returns."""
    cc = np.nan_to_num(cc)
    market = cc.mean(axis=1)
    five = np.convolve(market, np.ones(5), mode="valid") if len(market) >= 5 else market
    n = cc.shape[1]
    c = correlation(cc)
    return {"dispersion": float(cc.std(axis=1).mean()), "trend": float(market.sum()),
            "correlation": float((c.sum() - n) / (n * (n - 1))), "volatility": float(cc.std(axis=0).mean()),
            "crash": float(five.min())}


@dataclass
class WorldGenerator:
    model: WorldModel
    scaler: FeatureScaler
    ridge: float = 1.0
    directions: dict[str, np.ndarray] = field(default_factory=dict)
    intercepts: dict[str, float] = field(default_factory=dict)
    stat_sd: dict[str, float] = field(default_factory=dict)
    probe_r2: dict[str, float] = field(default_factory=dict)

    def _windows(self, panel: Panel) -> tuple[np.ndarray, np.ndarray, list[int]]:
        raw = make_features(panel)
        z = np.nan_to_num(self.scaler.transform(raw)).astype(np.float32)
        w = self.model.window
        starts = list(range(1, panel.shape[0] - w + 1, w))
        return raw, z, starts

    @torch.no_grad()
    def _latents(self, z: np.ndarray, starts: list[int]) -> torch.Tensor:
        w = self.model.window
        x = torch.from_numpy(np.stack([z[s:s + w].transpose(1, 0, 2) for s in starts]))
        return self.model.encode(x)

    def fit(self, panel: Panel) -> WorldGenerator:
        """Ridge probes from pooled latents to each window statistic (train window only)."""
        raw, z, starts = self._windows(panel)
        pooled = self._latents(z, starts).mean(dim=1).numpy().astype(np.float64)
        stats = [window_statistics(raw[s:s + self.model.window, :, 1]) for s in starts]
        x = pooled - pooled.mean(axis=0)
        for ch, key in STATISTIC.items():
            y = np.array([st[key] for st in stats])
            sd = float(y.std()) or 1.0
            yz = (y - y.mean()) / sd
            beta = np.linalg.solve(x.T @ x + self.ridge * np.eye(x.shape[1]), x.T @ yz)
            fitted = x @ beta
            self.directions[ch] = beta
            self.intercepts[ch] = float(-pooled.mean(axis=0) @ beta)
            self.stat_sd[ch] = sd
            self.probe_r2[ch] = float(1 - np.var(yz - fitted) / np.var(yz))
        return self

    @torch.no_grad()
    def generate(self, panel: Panel, channel: str, magnitude: float) -> Panel:
        """A complete panel (sessions 1..T-1 of `panel`) with the channel's shift applied to every window."""
        raw, z, starts = self._windows(panel)
        w = self.model.window
        lat = self._latents(z, starts)
        u = torch.from_numpy(self.directions[channel]).float()
        unit = u / (u @ u)
        if channel == "trend_flip":
            pred = lat.mean(dim=1) @ u + self.intercepts[channel]            # predicted standardised trend
            delta = (-2.0 * pred)[:, None, None] * unit
        else:
            delta = DIRECTION[channel] * magnitude * unit[None, None, :].expand(len(starts), 1, -1)
        mu, ls = self.model.decode(lat)
        mu2, ls2 = self.model.decode(lat + delta)
        out = z.copy()
        vol_change = FEATURES.index("dlogvol")
        for k, s in enumerate(starts):
            x = torch.from_numpy(z[s:s + w].transpose(1, 0, 2))
            resid = (x - mu[k]) / torch.exp(ls[k])
            shifted = mu2[k] + torch.exp(ls2[k]) * resid
            # a shift may reshape volume within the window but not drift its level across it (a drift
            # compounds into trending volume and inflates volume persistence far beyond the data's)
            dv = shifted[..., vol_change] - x[..., vol_change]
            shifted[..., vol_change] = x[..., vol_change] + dv - dv.mean(dim=1, keepdim=True)
            out[s:s + w] = shifted.numpy().transpose(1, 0, 2)
        world_raw = self.scaler.inverse(out.astype(np.float64))
        world_raw = np.where(np.isnan(raw), np.nan, world_raw)[1:]
        return features_to_panel(np.nan_to_num(world_raw), panel["close"][0], panel["volume"][0],
                                 panel.slice_days(1, panel.shape[0]))


def panel_statistics(panel: Panel, window: int) -> dict[str, float]:
    """Window statistics of a panel, averaged over its consecutive windows."""
    cc = np.log(panel["close"][1:] / panel["close"][:-1])
    rows = [window_statistics(cc[s:s + window]) for s in range(0, len(cc) - window + 1, window)]
    return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]}
