"""The holdout probe: every checkpoint of a rung answers the holdout briefs greedily; its answers are scored
on the train window (the selector), one checkpoint is selected on those numbers, and then every answer is
scored once on the holdout year.

Two phases on purpose: `train_phase` builds the per-answer and per-checkpoint train tables, `select_checkpoint`
picks the shipped step from them, `holdout_phase` adds the holdout columns afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from alphagym.books.metrics import beta_corr, sharpe, total_return
from alphagym.briefs.catalogue import Catalogue
from alphagym.briefs.compliance import BriefChecker
from alphagym.verifier.verifier import Verifier


def answer_rows(step: int, briefs: Sequence[Mapping[str, Any]], answers: Sequence[str], verifier: Verifier,
                cat: Catalogue, tolerance: float) -> list[dict[str, Any]]:
    """One row per (brief, answer) with its train-window card: validity, CPCV, turnover, compliance."""
    rows = []
    for b, a in zip(briefs, answers):
        c = verifier.score_group([a], answer=True, brief=BriefChecker(b, cat, tolerance))[0]
        rows.append({"step": step, "brief": b["id"], "family": b["family"], "answer": a, "formula": c.formula,
                     "canonical": c.canonical, "valid": c.valid, "reason": c.reason,
                     "compliance": float(c.metrics.get("compliance", 0.0)),
                     "compliant": bool(c.metrics.get("compliant", 0.0)),
                     "train_cpcv": float(c.channels["cpcv"]),
                     "train_turnover": float(c.metrics.get("turnover", np.nan)) if c.valid else np.nan,
                     "train_sharpe": float(c.metrics.get("sharpe_net", np.nan)) if c.valid else np.nan})
    return rows


def train_table(answers: pd.DataFrame) -> pd.DataFrame:
    """Per checkpoint: the selector (mean train CPCV over all answers), valid count, distinct canonical forms
    among the valid answers, brief compliance."""
    g = answers.groupby("step", sort=True)
    return pd.DataFrame({
        "train_cpcv": g["train_cpcv"].mean(),
        "valid": g["valid"].sum().astype(int),
        "answers": g.size(),
        "families": g.apply(lambda d: d.loc[d["valid"], "canonical"].nunique(), include_groups=False).astype(int),
        "compliance": g["compliance"].mean(),
        "compliant_share": g["compliant"].mean(),
    }).reset_index()


def holdout_phase(answers: pd.DataFrame, holdout: Verifier,
                  progress: Callable[[Any], Any] = lambda it: it) -> tuple[pd.DataFrame, dict[int, np.ndarray]]:
    """The answers with their holdout-year columns, and each checkpoint's equal-weight daily book (net of
    holdout costs) over the answers valid on both windows."""
    cache: dict[str, Any] = {}
    cols: dict[str, list[float]] = {k: [] for k in ("holdout_score", "holdout_sharpe", "holdout_return",
                                                     "holdout_turnover")}
    valid_h: list[bool] = []
    pnl: dict[int, list[np.ndarray]] = {}
    for row in progress(answers.itertuples(index=False)):
        card = None
        if row.valid:
            if row.formula not in cache:
                cache[row.formula] = holdout.score_one(row.formula)
            card = cache[row.formula]
        ok = card is not None and card.valid
        valid_h.append(ok)
        cols["holdout_score"].append(card.metrics["holdout_score"] if ok else np.nan)
        cols["holdout_sharpe"].append(card.metrics["sharpe_net"] if ok else np.nan)
        cols["holdout_return"].append(total_return(card.pnl) if ok else np.nan)
        cols["holdout_turnover"].append(card.metrics["turnover"] if ok else np.nan)
        if ok:
            pnl.setdefault(int(row.step), []).append(card.pnl)
    out = answers.assign(holdout_valid=valid_h, **cols)
    books = {step: np.mean(np.stack(p), axis=0) for step, p in pnl.items()}
    return out, books


def holdout_table(answers: pd.DataFrame, books: Mapping[int, np.ndarray], market: np.ndarray) -> pd.DataFrame:
    """Per checkpoint: mean holdout score over its valid answers, how many were valid on the holdout year,
    and the equal-weight book's return, Sharpe and beta to the market."""
    rows = []
    for step, d in answers.groupby("step", sort=True):
        book = books.get(int(step))
        beta = beta_corr(book, market)[0] if book is not None else np.nan
        rows.append({"step": int(step), "holdout_score": float(d["holdout_score"].mean()),
                     "holdout_valid": int(d["holdout_valid"].sum()),
                     "holdout_book_return": total_return(book) if book is not None else np.nan,
                     "holdout_book_sharpe": sharpe(book) if book is not None else np.nan,
                     "holdout_book_beta": beta})
    return pd.DataFrame(rows)
