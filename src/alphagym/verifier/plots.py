"""Figure: a score card's book (cumulative P&L with the CPCV blocks, turnover, rolling IC)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from alphagym.dsl.parser import parse
from alphagym.engine.cpcv import block_bounds
from alphagym.plotting import pyplot, save


def book_figure(card: Any, verifier: Any, path: str | Path) -> Path:
    """Cumulative net and gross P&L with the CPCV blocks, daily turnover, and 63-day rolling IC."""
    plt = pyplot()

    dates = verifier.panel.dates[:-2][verifier.rows]
    book = verifier.book(verifier.evaluator.evaluate(parse(card.formula, verifier.limits)))
    rows = verifier.rows
    fig, ax = plt.subplots(3, 1, figsize=(11, 8), sharex=True, gridspec_kw={"height_ratios": [3, 1, 1]})
    ax[0].plot(dates, np.cumsum(book.gross[rows]), color="gray", lw=1, label="gross")
    ax[0].plot(dates, np.cumsum(book.net[rows]), color="tab:blue", lw=1.3, label="net of costs")
    mkt = np.nan_to_num(verifier.market[rows])
    ax[0].plot(dates, np.cumsum(mkt) * 0.1, color="tab:red", lw=0.8, alpha=0.6, label="market x 0.1")
    for i, (lo, hi) in enumerate(block_bounds(int(rows.sum()), verifier.cfg.cpcv.blocks)):
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
    return save(fig, path)
