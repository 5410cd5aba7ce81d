"""Figure: the simulator's stylized facts next to real data's."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from alphagym.panel import Panel
from alphagym.plotting import pyplot, save


def _acf_curve(x: np.ndarray, lags: int) -> np.ndarray:
    out = []
    for k in range(1, lags + 1):
        vals = []
        for col in x.T:
            col = col[np.isfinite(col)]
            col = col - col.mean()
            den = col @ col
            if den > 0 and len(col) > k:
                vals.append(col[k:] @ col[:-k] / den)
        out.append(np.median(vals))
    return np.array(out)


def _rolling_corr(logret: np.ndarray, window: int = 63, step: int = 5) -> tuple[np.ndarray, np.ndarray]:
    idx, vals = [], []
    n = logret.shape[1]
    for t in range(window, len(logret), step):
        c = np.corrcoef(logret[t - window:t].T)
        vals.append((c.sum() - n) / (n * (n - 1)))
        idx.append(t)
    return np.array(idx), np.array(vals)


def stylized_figure(real: Panel, sim: Panel, path: str | Path, title: str = "") -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(2, 2, figsize=(11, 7.5))
    for panel, label, color in ((real, "real", "black"), (sim, "simulator", "tab:orange")):
        c = panel["close"]
        lr = np.log(c[1:] / c[:-1])
        z = (lr - np.nanmean(lr, axis=0)) / np.nanstd(lr, axis=0)
        ax[0, 0].hist(z[np.isfinite(z)].ravel(), bins=121, range=(-12, 12), density=True, histtype="step",
                      color=color, label=label, log=True)
        t, rc = _rolling_corr(lr)
        ax[0, 1].plot(panel.dates[1:][t], rc, color=color, lw=1, label=label)
        ax[1, 0].plot(range(1, 21), _acf_curve(lr**2, 20), "o-", color=color, ms=3, label=label)
        ax[1, 1].plot(range(1, 21), _acf_curve(np.log(panel["volume"]), 20), "o-", color=color, ms=3, label=label)
    xs = np.linspace(-12, 12, 400)
    ax[0, 0].plot(xs, np.exp(-xs**2 / 2) / np.sqrt(2 * np.pi), ":", color="gray", label="normal")
    ax[0, 0].set(title="standardised daily returns (fat tails)", ylim=(1e-6, 1))
    ax[0, 1].set(title="mean pairwise correlation, 63-day windows (regimes)")
    ax[1, 0].set(title="autocorrelation of squared returns (vol clustering)", xlabel="lag (sessions)")
    ax[1, 1].set(title="autocorrelation of log volume (persistence)", xlabel="lag (sessions)")
    for a in ax.ravel():
        a.legend(fontsize=8)
        a.grid(alpha=0.3)
    fig.suptitle(title or "simulator vs real data")
    return save(fig, path)
