"""Stress worlds: shift the world model's latents along five directions and decode complete panels.

Directions come from the data through the model. For each channel's window statistic (dispersion between
stocks, market trend, mean correlation, volatility, crash depth), the direction is the latent shift, common
to every stock of a window, that moves the statistic of the *decoded* window fastest: the gradient of the
statistic, averaged over the training windows, with respect to that shift. A world moves every window
along it by the step that shifts the statistic by `magnitude` standard deviations (found by bisection on
the training windows, capped at `max_step` latent norms); the crash world moves only a seeded share of the
windows, since crashes are episodes; trend is flipped instead (each window by the step
that takes its trend to minus itself). Ridge probes from the latents to each statistic are a diagnostic
only (how much of each statistic the latents hold): a probe direction is not one the decoder responds to,
so moving along it barely moves the decoded statistic (docs/notes/worldmodel-experiments.md).

Decoding keeps the data's own noise: with the location-scale decoder, a window's standardised residuals
r = (x - mu(z)) / sigma(z) are carried into the shifted world x' = mu(z') + sigma(z') * r. An unshifted world
reproduces the real panel exactly; a shifted one moves levels and scales without erasing fat tails or the
cross-stock structure of the residuals. Windows are decoded one by one and stitched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from alphagym.panel import Panel
from alphagym.params import WORLD_CHANNELS
from alphagym.worldmodel.features import FEATURES, FeatureScaler, features_to_panel, make_features
from alphagym.worldmodel.geometry import correlation
from alphagym.worldmodel.model import WorldModel

CHANNELS = WORLD_CHANNELS          # the stress channels, named once (params validates `facts_moved` against them)
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


def torch_window_statistics(cc: torch.Tensor) -> dict[str, torch.Tensor]:
    """`window_statistics` for a batch of windows (K, stocks, days) of log returns, differentiable."""
    market = cc.mean(dim=1)                                   # (K, W)
    c = cc - cc.mean(dim=-1, keepdim=True)
    cov = torch.einsum("knw,kmw->knm", c, c) / cc.shape[-1]
    sd = torch.sqrt(torch.diagonal(cov, dim1=1, dim2=2).clamp_min(1e-20))
    n = cc.shape[1]
    corr = cov / (sd[:, :, None] * sd[:, None, :])
    five = market.unfold(-1, min(5, market.shape[-1]), 1).sum(dim=-1)
    return {"dispersion": cc.std(dim=1, unbiased=False).mean(dim=-1), "trend": market.sum(dim=-1),
            "correlation": (corr.sum(dim=(1, 2)) - n) / (n * (n - 1)), "volatility": sd.mean(dim=-1),
            "crash": five.min(dim=-1).values}


@dataclass
class WorldGenerator:
    model: WorldModel
    scaler: FeatureScaler
    ridge: float = 1.0
    max_step: float = 0.5          # largest shift, in mean latent norms (params: worldmodel.max_latent_step)
    crash_share: float = 1.0       # share of windows a crash world shifts (params: worldmodel.crash_window_share)
    seed: int = 0                  # picks those windows
    directions: dict[str, np.ndarray] = field(default_factory=dict)
    slopes: dict[str, float] = field(default_factory=dict)
    stat_sd: dict[str, float] = field(default_factory=dict)
    probe_r2: dict[str, float] = field(default_factory=dict)
    latent_norm: float = 1.0

    def _windows(self, panel: Panel) -> tuple[np.ndarray, np.ndarray, list[int]]:
        raw = make_features(panel)
        z = np.nan_to_num(self.scaler.transform(raw)).astype(np.float32)
        w = self.model.window
        starts = list(range(1, panel.shape[0] - w + 1, w))
        return raw, z, starts

    def _decoder(self, z: np.ndarray, starts: list[int]) -> tuple[torch.Tensor, Any]:
        """Latents of the windows and a function: latent shift (K or 1, 1, d) -> decoded standardised
        features (K, N, W, F), the data's residuals carried over."""
        w = self.model.window
        x = torch.from_numpy(np.stack([z[s:s + w].transpose(1, 0, 2) for s in starts]))
        with torch.no_grad():
            lat = self.model.encode(x)
            mu, ls = self.model.decode(lat)
            resid = (x - mu) / torch.exp(ls)

        def decode(delta: torch.Tensor) -> torch.Tensor:
            mu2, ls2 = self.model.decode(lat + delta)
            return mu2 + torch.exp(ls2) * resid
        return lat, decode

    def _stat(self, decode: Any, key: str, delta: torch.Tensor) -> torch.Tensor:
        """Per window statistic of the decoded log close-to-close returns."""
        k = FEATURES.index("cc")
        sd = torch.from_numpy(self.scaler.std[:, k]).float()[None, :, None]
        mean = torch.from_numpy(self.scaler.mean[:, k]).float()[None, :, None]
        return torch_window_statistics(decode(delta)[..., k] * sd + mean)[key]

    def fit(self, panel: Panel) -> WorldGenerator:
        """Directions from the decoder's response on the train window's windows; probes as a diagnostic."""
        raw, z, starts = self._windows(panel)
        lat, decode = self._decoder(z, starts)
        d = lat.shape[-1]
        self.latent_norm = float(lat.norm(dim=-1).mean())
        pooled = lat.mean(dim=1).numpy().astype(np.float64)
        x = pooled - pooled.mean(axis=0)
        for ch, key in STATISTIC.items():
            delta = torch.zeros(1, 1, d, requires_grad=True)
            stat = self._stat(decode, key, delta)
            (grad,) = torch.autograd.grad(stat.mean(), delta)
            self.directions[ch] = (grad / grad.norm().clamp_min(1e-12)).reshape(-1).numpy().astype(np.float64)
            self.slopes[ch] = float(grad.norm())
            y = stat.detach().numpy().astype(np.float64)
            self.stat_sd[ch] = float(y.std()) or 1.0
            yz = (y - y.mean()) / self.stat_sd[ch]
            beta = np.linalg.solve(x.T @ x + self.ridge * np.eye(x.shape[1]), x.T @ yz)
            self.probe_r2[ch] = float(1 - np.var(yz - x @ beta) / np.var(yz))
        return self

    @torch.no_grad()
    def _step(self, decode: Any, key: str, unit: torch.Tensor, target: float) -> float:
        """Step along `unit` (zero in windows left alone) that moves the mean statistic of the shifted
        windows by `target` (bisection; capped)."""
        zero = self._stat(decode, key, torch.zeros_like(unit))
        moved = (unit.abs().sum(dim=(1, 2)) > 0).expand_as(zero)
        base = float(zero[moved].mean())
        cap = self.max_step * self.latent_norm
        if target == 0.0:
            return 0.0
        sign = 1.0 if target > 0 else -1.0
        lo, hi = 0.0, cap
        if sign * (float(self._stat(decode, key, sign * hi * unit)[moved].mean()) - base) < abs(target):
            return sign * hi                                     # the cap: moves as far as allowed
        for _ in range(30):
            mid = 0.5 * (lo + hi)
            if sign * (float(self._stat(decode, key, sign * mid * unit)[moved].mean()) - base) < abs(target):
                lo = mid
            else:
                hi = mid
        return sign * hi

    def crash_windows(self, n_windows: int) -> np.ndarray:
        """Which windows a crash world shifts: a seeded `crash_share` of them. Crashes are episodes; a shift
        of every window raised volatility evenly and on the real data halved the clustering of squared
        returns (ACF 0.26 -> 0.12)."""
        k = min(n_windows, max(1, int(round(self.crash_share * n_windows))))
        rng = np.random.default_rng(self.seed)
        return np.sort(rng.choice(n_windows, size=k, replace=False))

    @torch.no_grad()
    def generate(self, panel: Panel, channel: str, magnitude: float) -> Panel:
        """A complete panel (sessions 1..T-1 of `panel`) with the channel's shift applied to every window."""
        raw, z, starts = self._windows(panel)
        w = self.model.window
        lat, decode = self._decoder(z, starts)
        unit = torch.from_numpy(self.directions[channel]).float()[None, None, :]
        key = STATISTIC[channel]
        if magnitude == 0.0:
            delta = torch.zeros_like(unit)
        elif channel == "trend_flip":
            # each window along its own steepest direction, by the linearised step that takes its trend to
            # minus itself (windows respond differently; one common direction flipped some the wrong way)
            with torch.enable_grad():
                per_window = torch.zeros(len(starts), 1, unit.shape[-1], requires_grad=True)
                trend = self._stat(decode, key, per_window)
                (grad,) = torch.autograd.grad(trend.sum(), per_window)
            norm = grad.norm(dim=-1, keepdim=True).clamp_min(1e-12)
            cap = self.max_step * self.latent_norm
            steps = (-2.0 * trend.detach()[:, None, None] / norm).clamp(-cap, cap)
            delta = steps * grad / norm
        else:
            target = DIRECTION[channel] * magnitude * self.stat_sd[channel]
            if channel == "crash":
                which = torch.zeros(len(starts), 1, 1)
                which[torch.from_numpy(self.crash_windows(len(starts)))] = 1.0
                unit = unit * which
            delta = self._step(decode, key, unit, target) * unit
        out = z.copy()
        shifted_all = decode(delta)
        vol_change = FEATURES.index("dlogvol")
        for k, s in enumerate(starts):
            x = torch.from_numpy(z[s:s + w].transpose(1, 0, 2))
            shifted = shifted_all[k].clone()
            # a shift may reshape volume within the window but not drift its level across it (a drift
            # compounds into trending volume and inflates volume persistence far beyond the data's)
            dv = shifted[..., vol_change] - x[..., vol_change]
            shifted[..., vol_change] = x[..., vol_change] + dv - dv.mean(dim=1, keepdim=True)
            out[s:s + w] = shifted.numpy().transpose(1, 0, 2)
        world_raw = self.scaler.inverse(out.astype(np.float64))
        world_raw = np.where(np.isnan(raw), np.nan, world_raw)[1:]
        return features_to_panel(np.nan_to_num(world_raw), panel["close"][0], panel["volume"][0],
                                 panel.slice_days(1, panel.shape[0]))


def panel_window_statistics(panel: Panel, window: int) -> dict[str, np.ndarray]:
    """Window statistics of a panel, one value per consecutive window."""
    cc = np.log(panel["close"][1:] / panel["close"][:-1])
    rows = [window_statistics(cc[s:s + window]) for s in range(0, len(cc) - window + 1, window)]
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}


def panel_statistics(panel: Panel, window: int) -> dict[str, float]:
    """Window statistics of a panel, averaged over its consecutive windows."""
    return {k: float(v.mean()) for k, v in panel_window_statistics(panel, window).items()}
