"""Figures: simulator vs real stylized facts, and a score card's book. matplotlib with the Agg backend."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from alphagym.panel import Panel


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str | Path) -> Path:
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    _plt().close(fig)
    return path


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
    plt = _plt()
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
    return _save(fig, path)


def book_figure(card: Any, verifier: Any, path: str | Path) -> Path:
    """Cumulative net and gross P&L with the CPCV blocks, daily turnover, and 63-day rolling IC."""
    plt = _plt()
    from alphagym.engine.cpcv import block_bounds

    dates = verifier.panel.dates[:-2][verifier.rows]
    book = verifier.book(verifier.evaluator.evaluate(_parse(card.formula, verifier)))
    rows = verifier.rows
    fig, ax = plt.subplots(3, 1, figsize=(11, 8), sharex=True, gridspec_kw={"height_ratios": [3, 1, 1]})
    ax[0].plot(dates, np.cumsum(book.gross[rows]), color="gray", lw=1, label="gross")
    ax[0].plot(dates, np.cumsum(book.net[rows]), color="tab:blue", lw=1.3, label="net of costs")
    mkt = np.nan_to_num(verifier.market[rows])
    ax[0].plot(dates, np.cumsum(mkt) * 0.1, color="tab:red", lw=0.8, alpha=0.6, label="market x 0.1")
    for i, (lo, hi) in enumerate(block_bounds(int(rows.sum()), verifier.cfg["cpcv"]["blocks"])):
        if i % 2:
            ax[0].axvspan(dates[lo], dates[hi - 1], color="gray", alpha=0.08)
    ax[0].set(title=f"{card.formula}\nCPCV {card.channels['cpcv']:+.2f}, net Sharpe "
                    f"{card.metrics.get('sharpe_net', 0):.2f} (shaded: CPCV blocks)", ylabel="cumulative return")
    ax[0].legend(fontsize=8)
    ax[1].plot(dates, book.turnover[:-2][rows], lw=0.6)
    ax[1].set(ylabel="turnover")
    ic = book.ic[rows]
    roll = np.convolve(np.nan_to_num(ic), np.ones(63) / 63, mode="same")
    ax[2].plot(dates, roll, lw=0.8, color="tab:green")
    ax[2].axhline(0, color="black", lw=0.5)
    ax[2].set(ylabel="IC (63d mean)")
    for a in ax:
        a.grid(alpha=0.3)
    return _save(fig, path)


def _parse(formula: str, verifier: Any):
    from alphagym.dsl.parser import parse

    return parse(formula, verifier.limits)
