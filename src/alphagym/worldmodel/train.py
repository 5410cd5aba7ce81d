"""Train the JEPA world model on the train window only: seeded, deterministic on CPU, early stopping on a
validation slice from the end of the train window, per-epoch metrics to a callback (MLflow in the stage).

Why a hand-written loop: the EMA target update, the span masking and the three losses (latent prediction,
correlation geometry, decoding) are specific to this model; the loop is short enough to read in one go.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch.nn import functional as F  # noqa: N812

from alphagym.panel import Panel
from alphagym.params import WorldModel as WorldModelParams
from alphagym.worldmodel.features import FeatureScaler, make_features
from alphagym.worldmodel.geometry import TARGET_NAMES, correlation, geometry_targets
from alphagym.worldmodel.model import WorldModel, span_mask


@dataclass
class WindowData:
    x: np.ndarray          # (K, N, W, F) standardised window
    y: np.ndarray          # (K, N, W, F) the next window
    geom: np.ndarray       # (K, G) geometry of the next window (drift against this window)
    geom_now: np.ndarray   # (K, G) geometry of this window (the persistence baseline)
    starts: np.ndarray     # (K,) first session of each window


def build_windows(z: np.ndarray, raw_cc: np.ndarray, window: int, stride: int) -> WindowData:
    """Windows of `window` sessions every `stride` sessions, each paired with the window right after it."""
    t_len = z.shape[0]
    starts = np.arange(1, t_len - 2 * window + 1, stride)
    xs, ys, gs, gn = [], [], [], []
    for s in starts:
        xs.append(z[s:s + window].transpose(1, 0, 2))
        ys.append(z[s + window:s + 2 * window].transpose(1, 0, 2))
        c_now = correlation(raw_cc[s:s + window])
        c_next = correlation(raw_cc[s + window:s + 2 * window])
        gs.append(geometry_targets(c_next, c_now))
        prev = raw_cc[max(1, s - window):s] if s - window >= 1 else raw_cc[s:s + window]
        gn.append(geometry_targets(c_now, correlation(prev)))
    f32 = np.float32
    return WindowData(np.array(xs, f32), np.array(ys, f32), np.array(gs, f32), np.array(gn, f32), starts)


@dataclass
class TrainResult:
    model: WorldModel
    scaler: FeatureScaler
    geom_mean: np.ndarray
    geom_std: np.ndarray
    history: list[dict[str, float]] = field(default_factory=list)
    best_epoch: int = 0
    validation: dict[str, float] = field(default_factory=dict)


def _split(data: WindowData, val_share: float, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Validation = the last windows; training windows end (incl. their next window) before them."""
    k = len(data.starts)
    n_val = max(1, int(round(val_share * k)))
    val = np.arange(k - n_val, k)
    first_val = data.starts[val[0]]
    train = np.flatnonzero(data.starts + 2 * window <= first_val)
    return train, val


def _losses(model: WorldModel, x: torch.Tensor, y: torch.Tensor, g: torch.Tensor, mask: torch.Tensor,
            cfg: WorldModelParams) -> dict[str, torch.Tensor]:
    out = model(x, mask)
    with torch.no_grad():
        target = F.layer_norm(model.target(y), (out["pred"].shape[-1],))
    jepa = F.smooth_l1_loss(F.layer_norm(out["pred"], (out["pred"].shape[-1],)), target)
    geom = F.mse_loss(out["geometry"], g)
    recon = F.gaussian_nll_loss(out["recon"], x, torch.exp(2 * out["log_scale"]))
    total = jepa + cfg.geometry_weight * geom + cfg.decoder_weight * recon
    return {"total": total, "jepa": jepa, "geometry": geom, "recon": recon}


EVAL_BATCH = 16      # windows per forward pass when scoring: all 322 at once spent 8 s an epoch on memory


def _in_batches(fn: Callable[[torch.Tensor], torch.Tensor], a: np.ndarray) -> torch.Tensor:
    return torch.cat([fn(torch.from_numpy(a[i:i + EVAL_BATCH])) for i in range(0, len(a), EVAL_BATCH)])


def validation_metrics(model: WorldModel, data: WindowData, train_idx: np.ndarray, val_idx: np.ndarray,
                       gz: np.ndarray) -> dict[str, float]:
    """The prediction gate's numbers on the validation slice: the model (unmasked context) against the two
    naive predictors of the next window's target latents and geometry, persistence (this window's) and
    the training mean."""
    with torch.no_grad():
        def target(x: torch.Tensor) -> torch.Tensor:
            t = model.target(x)
            return F.layer_norm(t, (t.shape[-1],))

        def predict(x: torch.Tensor) -> torch.Tensor:
            out = model(x, torch.zeros(x.shape[:3], dtype=torch.bool))
            p = F.layer_norm(out["pred"], (out["pred"].shape[-1],))
            return torch.cat([p.flatten(1), out["geometry"]], dim=1)

        y_val, x_val = _in_batches(target, data.y[val_idx]), _in_batches(target, data.x[val_idx])
        mean_lat = _in_batches(target, data.y[train_idx]).mean(dim=0, keepdim=True).expand_as(y_val)
        both = _in_batches(predict, data.x[val_idx])
        pred, geom = both[:, :y_val[0].numel()].reshape(y_val.shape), both[:, y_val[0].numel():]
        g_val = torch.from_numpy(gz[val_idx])
        g_now = torch.from_numpy(((data.geom_now - data.geom.mean(0)) / data.geom.std(0).clip(1e-6))[val_idx])
        return {
            "jepa_model": float(F.smooth_l1_loss(pred, y_val)),
            "geometry_model": float(F.mse_loss(geom, g_val)),
            "jepa_persistence": float(F.smooth_l1_loss(x_val, y_val)),
            "jepa_window_mean": float(F.smooth_l1_loss(mean_lat, y_val)),
            "geometry_persistence": float(F.mse_loss(g_now.float(), g_val)),
            "geometry_window_mean": float(F.mse_loss(torch.zeros_like(g_val), g_val)),
            "train_windows": float(len(train_idx)), "val_windows": float(len(val_idx)),
        }


def train_world_model(panel: Panel, cfg: WorldModelParams, seed: int,
                      log: Callable[[dict[str, float], int], None] | None = None,
                      progress: bool = True) -> TrainResult:
    """Train the world model on `panel`. torch's thread count and deterministic-algorithms switch are process
    state, set by the caller (the `world_model` stage sets `worldmodel.threads` and determinism)."""
    from tqdm import tqdm

    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    raw = make_features(panel)
    scaler = FeatureScaler.fit(raw)
    z = np.nan_to_num(scaler.transform(raw), nan=0.0)
    w = cfg.window
    data = build_windows(z, np.nan_to_num(raw[..., 1]), w, cfg.stride)
    train_idx, val_idx = _split(data, cfg.val_share, w)
    if len(train_idx) < 2:
        raise ValueError(f"only {len(train_idx)} training windows: the train window is too short for "
                         f"window {w} and stride {cfg.stride}")
    gm, gs = data.geom[train_idx].mean(0), data.geom[train_idx].std(0).clip(1e-6)
    gz = ((data.geom - gm) / gs).astype(np.float32)
    model = WorldModel(panel.shape[1], raw.shape[-1], len(TARGET_NAMES), cfg)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                            weight_decay=cfg.weight_decay)
    result = TrainResult(model, scaler, gm, gs)
    best, best_state, bad = float("inf"), None, 0
    bs = cfg.batch_size
    epochs = tqdm(range(cfg.max_epochs), desc="world model", unit="epoch", disable=not progress)
    for epoch in epochs:
        model.train()
        order = train_idx[torch.randperm(len(train_idx), generator=gen).numpy()]
        sums: dict[str, float] = {}
        for i in range(0, len(order), bs):
            idx = order[i:i + bs]
            x, y, g = (torch.from_numpy(a[idx]) for a in (data.x, data.y, gz))
            mask = span_mask(tuple(x.shape[:3]), cfg.mask_share, cfg.mask_span, gen)
            losses = _losses(model, x, y, g, mask, cfg)
            opt.zero_grad()
            losses["total"].backward()
            opt.step()
            model.update_target(cfg.ema)
            for k, v in losses.items():
                sums[k] = sums.get(k, 0.0) + float(v.detach()) * len(idx)
        model.eval()
        with torch.no_grad():
            xv, yv, gv = (torch.from_numpy(a[val_idx]) for a in (data.x, data.y, gz))
            vmask = span_mask(tuple(xv.shape[:3]), cfg.mask_share, cfg.mask_span,
                              torch.Generator().manual_seed(seed + 1))
            val = {k: float(v) for k, v in _losses(model, xv, yv, gv, vmask, cfg).items()}
        row = {**{f"train_{k}": v / len(order) for k, v in sums.items()}, **{f"val_{k}": v for k, v in val.items()}}
        gate = validation_metrics(model, data, train_idx, val_idx, gz)
        row.update({f"gate_{k}": v for k, v in gate.items() if not k.endswith("_windows")})
        result.history.append(row)
        if log is not None:
            log(row, epoch)
        epochs.set_postfix(val=f"{val['total']:.4f}")
        # stop on what does not move with the target encoder: the latent loss is measured against an EMA
        # target that changes every step, so it is not comparable across epochs
        criterion = row["val_stop_criterion"] = (val["geometry"] * cfg.geometry_weight
                                                 + val["recon"] * cfg.decoder_weight)
        if criterion < best - 1e-6:
            best, bad, result.best_epoch = criterion, 0, epoch
            best_state = {k: v.detach().clone() for k, v in model.state_dict().items()}
            result.validation = gate          # the gate's numbers of exactly this state
        else:
            bad += 1
            if bad >= cfg.patience:
                break
    model.eval()
    if best_state is not None:
        model.load_state_dict(best_state)
    else:                                     # no epoch improved on inf (NaN losses): score what is left
        result.validation = validation_metrics(model, data, train_idx, val_idx, gz)
    return result
