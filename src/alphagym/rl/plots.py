"""Training curves of one rung: raw per-step values faint, a 25-step rolling mean on top."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from alphagym.plotting import pyplot, save

PANELS = (("reward", "reward (priority-weighted sum)"), ("core_score/mean", "core score (train CPCV)"),
          ("frac_invalid", "invalid share"), ("frac_nonzero_advantage", "non-zero advantage share"),
          ("kl", "KL to the SFT policy (k3)"), ("entropy", "token entropy"), ("repo/zeta", "REPO-R zeta"),
          ("distinct_canonical_forms", "distinct canonical forms per step"))


def rolling(x: np.ndarray, w: int = 25) -> np.ndarray:
    if len(x) < 2:
        return x
    w = min(w, len(x))
    c = np.cumsum(np.insert(x, 0, 0.0))
    head = c[1:w] / np.arange(1, w)
    return np.concatenate([head, (c[w:] - c[:-w]) / w])


def curves_figure(history: Sequence[Mapping[str, float]], rung: str, path: Path) -> Path:
    plt = pyplot()
    fig, axes = plt.subplots(3, 3, figsize=(12, 8.5))
    steps = np.array([h["step"] for h in history])
    for ax, (key, title) in zip(axes.flat, PANELS):
        y = np.array([h.get(key, np.nan) for h in history], float)
        ax.plot(steps, y, lw=0.6, alpha=0.35, color="C0")
        ax.plot(steps, rolling(y), lw=1.6, color="C0")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    ax = axes.flat[-1]
    parts = ("time/generation", "time/scoring", "time/reference", "time/update")
    stack = np.array([[h.get(p, 0.0) for h in history] for p in parts])
    ax.stackplot(steps, stack, labels=[p.split("/")[1] for p in parts], alpha=0.8)
    ax.set_title("seconds per step", fontsize=9)
    ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(f"rung {rung}: {len(history)} steps", fontsize=11)
    return save(fig, path)
