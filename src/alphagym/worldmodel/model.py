"""The JEPA world model: context encoder, EMA target encoder, predictor, geometry head, decoder.

Shapes: a window is (batch, stocks, days, features). The encoder embeds each stock-day (features, with
masked cells zeroed and flagged), runs a transformer over time per stock, pools to one token per stock,
and mixes stocks with a transformer over the stock axis: one latent per stock. The predictor maps the
context latents of a window to the latents the target encoder gives the *next* window; the geometry head
reads the pooled prediction and predicts the next window's correlation geometry; the decoder maps
latents back to a full window of features as a mean and a scale per cell (Gaussian likelihood), so shifted
latents can be decoded into stress markets that keep the data's own standardised residuals.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from alphagym.params import WorldModel as WorldModelParams


class Encoder(nn.Module):
    def __init__(self, n_features: int, window: int, d: int, heads: int, time_layers: int, stock_layers: int):
        super().__init__()
        self.embed = nn.Linear(n_features + 1, d)
        self.pos = nn.Parameter(torch.zeros(1, window, d))
        nn.init.normal_(self.pos, std=0.02)
        self.time = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True), time_layers,
            enable_nested_tensor=False)
        self.stocks = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(d, heads, 2 * d, dropout=0.0, batch_first=True), stock_layers,
            enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        b, n, w, f = x.shape
        if mask is None:
            mask = torch.zeros(b, n, w, dtype=torch.bool, device=x.device)
        x = torch.where(mask[..., None], torch.zeros_like(x), x)
        h = self.embed(torch.cat([x, mask[..., None].float()], dim=-1)).reshape(b * n, w, -1) + self.pos[:, :w]
        h = self.time(h).mean(dim=1).reshape(b, n, -1)
        return self.norm(self.stocks(h))


class WorldModel(nn.Module):
    def __init__(self, n_stocks: int, n_features: int, n_geometry: int, cfg: WorldModelParams):
        super().__init__()
        d, w = cfg.d_model, cfg.window
        self.window, self.n_features = w, n_features
        self.context = Encoder(n_features, w, d, cfg.heads, cfg.time_layers, cfg.stock_layers)
        self.target = copy.deepcopy(self.context)
        for p in self.target.parameters():
            p.requires_grad_(False)
        self.predictor = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, d))
        self.geometry = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.Linear(d, n_geometry))
        # location-scale decoder: a mean and a log-scale per stock, day and feature
        self.decoder = nn.Sequential(nn.Linear(d, 2 * d), nn.GELU(), nn.Linear(2 * d, 2 * w * n_features))
        self.stock_bias = nn.Parameter(torch.zeros(1, n_stocks, d))

    @torch.no_grad()
    def update_target(self, momentum: float) -> None:
        for pt, pc in zip(self.target.parameters(), self.context.parameters()):
            pt.mul_(momentum).add_(pc.detach(), alpha=1.0 - momentum)

    def encode(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        return self.context(x, mask) + self.stock_bias

    def decode(self, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(mean, log-scale), each (batch, stocks, days, features)."""
        b, n, _ = z.shape
        out = self.decoder(z).reshape(b, n, self.window, 2, self.n_features)
        return out[..., 0, :], out[..., 1, :].clamp(-5.0, 3.0)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        z = self.encode(x, mask)
        pred = self.predictor(z)
        mean, log_scale = self.decode(z)
        return {"latent": z, "pred": pred, "geometry": self.geometry(pred.mean(dim=1)), "recon": mean,
                "log_scale": log_scale}


def span_mask(shape: tuple[int, int, int], share: float, span: int, gen: torch.Generator) -> torch.Tensor:
    """Hide about `share` of the stock-day cells in contiguous spans of `span` days (per stock)."""
    b, n, w = shape
    mask = torch.zeros(b, n, w, dtype=torch.bool)
    spans = max(1, round(share * w / span))
    starts = torch.randint(0, max(1, w - span + 1), (b, n, spans), generator=gen)
    for k in range(span):
        idx = (starts + k).clamp(max=w - 1)
        mask.scatter_(2, idx, True)
    return mask
