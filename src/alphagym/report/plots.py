"""The report's figures: one function per PNG, each from the tables the report already holds."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from alphagym.books import columns as C
from alphagym.plotting import pyplot, save
from alphagym.rl.plots import rolling

CURVES = (("reward", "reward"), ("core_score/mean", "core score (train CPCV)"), ("kl", "KL to the SFT policy"),
          ("entropy", "token entropy"), ("repo/zeta", "REPO-R zeta"),
          ("frac_nonzero_advantage", "non-zero advantage share"))


def training_curves(logs: Mapping[str, Sequence[Mapping[str, float]]], path: Path) -> Path:
    """Each panel one metric, one line (25-step rolling mean) per rung."""
    plt = pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (key, title) in zip(axes.flat, CURVES):
        for i, (rung, hist) in enumerate(logs.items()):
            steps = np.array([h["step"] for h in hist])
            y = np.array([h.get(key, np.nan) for h in hist], float)
            ax.plot(steps, rolling(y), lw=1.4, color=f"C{i % 10}", label=rung)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    axes.flat[0].legend(fontsize=7)
    fig.suptitle("training curves (25-step rolling mean)", fontsize=11)
    return save(fig, path)


def selector_vs_holdout(tables: Mapping[str, pd.DataFrame], path: Path) -> Path:
    """Train CPCV (the selector) against holdout score, one point per checkpoint; the shipped one ringed."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 5.5))
    for i, (rung, t) in enumerate(tables.items()):
        ax.plot(t[C.TRAIN_CPCV], t[C.HOLDOUT_SCORE], "o-", ms=4, lw=0.8, color=f"C{i % 10}", label=rung)
        s = t[t["shipped"]]
        ax.plot(s[C.TRAIN_CPCV], s[C.HOLDOUT_SCORE], "o", ms=12, mfc="none", color=f"C{i % 10}")
    ax.axhline(0, color="grey", lw=0.6)
    ax.set_xlabel("train-window CPCV of the greedy answers (mean; selector)")
    ax.set_ylabel("holdout score (mean over valid answers)")
    ax.set_title("per checkpoint: selector vs holdout (ringed: shipped)", fontsize=10)
    ax.legend(fontsize=7)
    return save(fig, path)


def growth(daily: pd.DataFrame, title: str, path: Path) -> Path:
    """Growth of $1 on the holdout year: the equal-weight, capped, positive-train-CPCV and archive books against
    the market."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for col, style in (("equal_weight", "C0"), ("capped", "C2"), ("positive", "C1"), ("archive", "C3"),
                       ("market", "grey")):
        if col in daily and daily[col].notna().any():
            ax.plot(pd.to_datetime(daily["date"]), np.cumprod(1 + daily[col].fillna(0.0)), color=style,
                    label=col.replace("_", " "))
    ax.axhline(1, color="black", lw=0.5)
    ax.set_ylabel("growth of $1 (net of holdout costs)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.autofmt_xdate()
    return save(fig, path)


def book_vs_market(daily: pd.DataFrame, beta: float, title: str, path: Path) -> Path:
    """Daily book return against the market's, with the fitted beta line."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 5))
    if "equal_weight" in daily and daily["equal_weight"].notna().any():
        m, b = daily["market"].to_numpy(), daily["equal_weight"].to_numpy()
        ax.scatter(m, b, s=8, alpha=0.6)
        xs = np.linspace(np.nanmin(m), np.nanmax(m), 10)
        ax.plot(xs, np.nanmean(b) + beta * (xs - np.nanmean(m)), color="C3", label=f"beta {beta:+.3f}")
        ax.legend(fontsize=8)
    ax.axhline(0, color="grey", lw=0.5)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_xlabel("market daily return")
    ax.set_ylabel("equal-weight book daily return")
    ax.set_title(title, fontsize=10)
    return save(fig, path)


def answer_scores(answers: Mapping[str, pd.DataFrame], path: Path) -> Path:
    """The holdout score of every valid answer, per checkpoint (one panel per rung)."""
    plt = pyplot()
    n = max(len(answers), 1)
    cols = min(n, 3)
    rows = int(np.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols, 3.6 * rows), squeeze=False)
    for ax, (rung, a) in zip(axes.flat, answers.items()):
        v = a[a[C.HOLDOUT_VALID]]
        steps = sorted(a["step"].unique())
        rng = np.random.default_rng(0)
        for j, s in enumerate(steps):
            y = v.loc[v["step"] == s, C.HOLDOUT_SCORE].to_numpy()
            ax.plot(j + rng.uniform(-0.2, 0.2, len(y)), y, ".", alpha=0.6, color="C0")
            if len(y):
                ax.plot([j - 0.3, j + 0.3], [np.median(y)] * 2, color="C3")
        ax.set_xticks(range(len(steps)), [str(s) for s in steps], fontsize=7)
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_title(rung, fontsize=9)
        ax.set_xlabel("checkpoint step", fontsize=8)
    for ax in list(axes.flat)[len(answers):]:
        ax.axis("off")
    fig.suptitle("holdout score of every valid answer (red: median)", fontsize=11)
    return save(fig, path)


def table_md(rows: Sequence[Mapping[str, Any]], cols: Sequence[str], fmt: Mapping[str, str] | None = None) -> str:
    """A Markdown table of `rows` (dicts) over `cols`; floats by `fmt` (default 3 decimals), None as '-'."""
    fmt = fmt or {}

    def cell(k: str, v: Any) -> str:
        if v is None or (isinstance(v, float) and np.isnan(v)):
            return "-"
        if isinstance(v, float | np.floating):
            return format(float(v), fmt.get(k, ".3f"))
        return str(v).replace("|", "\\|")

    head = "| " + " | ".join(cols) + " |\n|" + "---|" * len(cols) + "\n"
    return head + "".join("| " + " | ".join(cell(k, r.get(k)) for k in cols) + " |\n" for r in rows)
