"""Figures of the policy stages: the SFT curve with the holdout numbers, the filter's solve-rate histogram."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from alphagym.plotting import pyplot, save


def sft_figure(curve: Sequence[Mapping[str, float]], report: Mapping[str, Any], path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4))
    steps = [r["step"] for r in curve]
    ax.plot(steps, [r["loss"] for r in curve], lw=0.8, alpha=0.6, label="train loss (per step)")
    ev = [(r["step"], r["eval_loss"]) for r in curve if "eval_loss" in r]
    if ev:
        ax.plot(*zip(*ev), "o-", color="C3", label="held-out pairs loss")
    rev = [(r["step"], r["round_eval_loss"]) for r in curve if "round_eval_loss" in r]
    if rev:
        ax.plot(*zip(*rev), "s--", color="C2", label="held-out loss of the round's own pairs")
    rounds = [r["step"] for r in curve if "round" in r]
    if rounds:                      # the rejection-sampling rounds after the corpus
        ax.axvspan(min(rounds), max(rounds), color="C2", alpha=0.12, label="self-distillation")
    a = report["after"]
    ax.set(xlabel="step", ylabel="NLL per answer token", yscale="log",
           title=f"SFT {report['backend']}: {report['pairs']} pairs; holdout briefs: {a['valid_share']:.0%} valid, "
                 f"{a['distinct_canonical']:.0f} distinct, {a['compliant_share']:.0%} compliant")
    ax.title.set_fontsize(9)
    ax.legend()
    return save(fig, path)


def solve_rate_figure(table: pd.DataFrame, samples: int, kept: int, path: Path) -> Path:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    counts = table["solved"].value_counts().reindex(range(samples + 1), fill_value=0)
    colors = ["C7" if k in (0, samples) else "C2" for k in counts.index]
    ax.bar(counts.index, counts.values, color=colors)
    ax.set(xlabel=f"answers (of {samples}) valid with train CPCV > 0", ylabel="training briefs",
           title=f"solve rates of {len(table)} briefs; kept {kept} (green: solved sometimes, not always)")
    ax.title.set_fontsize(9)
    return save(fig, path)
