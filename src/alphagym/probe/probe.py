"""The holdout probe: every checkpoint of a rung answers the holdout briefs greedily; its answers are scored
on the train window (the selector), one checkpoint is selected on those numbers, and then every answer is
scored once on the holdout year.

Two phases on purpose: `train_phase` builds the per-answer and per-checkpoint train tables, `select_checkpoint`
picks the shipped step from them, `holdout_phase` adds the holdout columns afterwards.

Counting bets, per checkpoint, over its greedy answers (one per holdout brief):
- `families`: distinct formula families among the valid answers: canonical forms with windows bucketed
  (`dsl.canonical`), merged where two forms' train P&L |corr| >= 0.95 (`rank(rank(X) * rank(X))` and
  `rank(X)` are one book under two forms), the reference system's "formula families";
- `holdout_mean_abs_corr`: mean pairwise |corr| of the holdout P&L of the answers valid on both windows;
- `holdout_effective_bets`: the equal-weight book's effective number of bets, the participation ratio of the
  eigenvalues of those answers' holdout P&L correlation matrix, (sum l)^2 / sum l^2 (`books.metrics.
  effective_bets`: n independent answers give n, n copies of one give 1);
- `pass_at_k`: per-brief pass@k, the share of briefs where at least one of k sampled answers (k =
  `probe.pass_k`, 4 by default, at `probe.temperature`) is valid with positive train CPCV;
- `sampled_families`: `families` among those sampled answers (all briefs together, valid ones): the
  diversity of the distribution that training samples from, beside `families` of its greedy mode;
- simulator only (the market's ground truth lists its effects; on real data these columns are absent, not
  zero): `planted_edges_expressed` of `planted_edges`, the edges some valid answer expresses (its holdout
  P&L |corr| >= 0.5 with the planted formula's), and `decoy_trap_answers`, the answers whose holdout P&L
  has |corr| >= 0.5 with a decoy's or a trap's formula;
- `capped_*`: the correlation-capped book (`books.metrics.capped_selection`, on train numbers only: train
  CPCV order, `books.min_turnover`, |corr| of train P&L under `books.max_corr`): its size, holdout Sharpe
  and effective bets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from alphagym.books import columns as C
from alphagym.books.metrics import (
    beta_corr,
    bootstrap_interval,
    capped_selection,
    effective_bets,
    sharpe,
    total_return,
)
from alphagym.briefs.catalogue import Catalogue
from alphagym.briefs.compliance import CHECK_COLUMNS, BriefChecker
from alphagym.briefs.idea import IdeaCheck
from alphagym.verifier.verifier import ScoreCard, Verifier

SAME_BOOK = 0.95       # train P&L |corr| at or above which two canonical forms are one family


def answer_rows(step: int, briefs: Sequence[Mapping[str, Any]], answers: Sequence[str], verifier: Verifier,
                cat: Catalogue, tolerance: float, idea: IdeaCheck | None = None
                ) -> tuple[list[dict[str, Any]], list[np.ndarray | None]]:
    """One row per (brief, answer) with its train-window card (validity, CPCV, turnover, compliance: the share
    of its brief's checks passed and, as `compliance_<check>`, each check; with `idea` (on the train panel),
    `idea_fidelity` of a valid answer to its brief's mechanism, `briefs.idea`), and each answer's train net
    P&L (None when invalid), in the same order."""
    rows, pnls = [], []
    for b, a in zip(briefs, answers):
        c = verifier.score_group([a], answer=True, brief=BriefChecker(b, cat, tolerance, idea=idea))[0]
        pnls.append(c.pnl if c.valid else None)
        fidelity = float(c.metrics.get("idea_fidelity", np.nan))
        rows.append({"step": step, "brief": b["id"], "family": b["family"], "answer": a, "formula": c.formula,
                     "canonical": c.canonical, "valid": c.valid, "reason": c.reason,
                     "compliance": float(c.metrics.get("compliance", 0.0)),
                     "compliant": bool(c.metrics.get("compliant", 0.0)),
                     **{col: float(c.metrics.get(f"compliance/{k}", 0.0)) for k, col in CHECK_COLUMNS.items()},
                     C.TRAIN_CPCV: float(c.channels["cpcv"]),
                     C.TRAIN_TURNOVER: float(c.metrics.get("turnover", np.nan)) if c.valid else np.nan,
                     "train_sharpe": float(c.metrics.get("sharpe_net", np.nan)) if c.valid else np.nan,
                     **({"idea_fidelity": fidelity} if idea is not None else {})})
    return rows, pnls


def sampled_cards(samples: Sequence[Sequence[str]], verifier: Verifier) -> list[list[ScoreCard]]:
    """Each brief's sampled answers scored by the train-window verifier (an answer repeated within a brief
    is scored once)."""
    return [[verifier.score_one(a, answer=True) for a in dict.fromkeys(answers)] for answers in samples]


def sampled_rows(step: int, briefs: Sequence[Mapping[str, Any]], samples: Sequence[Sequence[str]],
                 cards: Sequence[Sequence[ScoreCard]]) -> list[dict[str, Any]]:
    """One row per sampled answer (repeats kept: they are the sampling distribution): its step, brief and, when
    valid on the train window, its formula (None otherwise). `cards`: `sampled_cards` of `samples`."""
    rows = []
    for b, answers, group in zip(briefs, samples, cards, strict=True):
        by_text = dict(zip(dict.fromkeys(answers), group, strict=True))
        rows += [{"step": step, "brief": b["id"], "formula": by_text[a].formula if by_text[a].valid else None}
                 for a in answers]
    return rows


def sampled_holdout(rows: Sequence[Mapping[str, Any]], holdout: Verifier) -> pd.DataFrame:
    """Per checkpoint, its sampled answers on the holdout year (read after selection, like the greedy
    answers): `holdout_score_sampled`, the mean over briefs of each brief's mean holdout score over its valid
    sampled answers, with its 95% interval from the bootstrap over briefs, and `holdout_answer_sd`, the
    standard deviation that the draw of one answer a brief puts on a checkpoint's score (sqrt of the mean
    within-brief variance of the sampled answers' scores over the number of briefs)."""
    cache: dict[str, Any] = {}
    out = []
    frame = pd.DataFrame(list(rows), columns=["step", "brief", "formula"])
    for step, d in frame.groupby("step", sort=True):
        means, variances = [], []
        for _, g in d.groupby("brief", sort=True):
            scores = []
            for f in g["formula"]:
                if not isinstance(f, str):        # invalid on the train window (None, NaN in the frame)
                    continue
                if f not in cache:
                    cache[f] = holdout.score_one(f)
                if cache[f].valid:
                    scores.append(float(cache[f].metrics[C.HOLDOUT_SCORE]))
            means.append(float(np.mean(scores)) if scores else np.nan)
            variances.append(float(np.var(scores, ddof=1)) if len(scores) > 1 else np.nan)
        m = np.asarray(means)
        low, high = bootstrap_interval(lambda k, b, x=m: _nanmean(x[b]), 1, len(m)) if len(m) else (np.nan, np.nan)
        var = np.asarray(variances)
        out.append({"step": int(step), C.HOLDOUT_SCORE_SAMPLED: _nanmean(m), C.HOLDOUT_SCORE_SAMPLED_LOW: low,
                    C.HOLDOUT_SCORE_SAMPLED_HIGH: high,
                    C.HOLDOUT_ANSWER_SD: float(np.sqrt(np.nanmean(var) / len(m))) if np.isfinite(var).any()
                    else np.nan})
    return pd.DataFrame(out)


def pass_at_k(cards: Sequence[Sequence[ScoreCard]]) -> float:
    """Share of briefs (one list of `sampled_cards` each) where at least one sampled answer is valid with
    positive train CPCV."""
    if not cards:
        return float("nan")
    return sum(any(c.valid and c.channels["cpcv"] > 0 for c in g) for g in cards) / len(cards)


def sampled_families(cards: Sequence[Sequence[ScoreCard]]) -> int:
    """`families` among the valid sampled answers of all briefs together: the diversity of the policy's
    distribution at the sampling temperature, which R13 acts on in training, where `families` counts the
    greedy answers, its mode per brief."""
    valid = [c for g in cards for c in g if c.valid and c.canonical is not None and c.pnl is not None]
    return families([c.canonical for c in valid], [c.pnl for c in valid])


def _standardised(pnls: Sequence[np.ndarray]) -> np.ndarray:
    """Rows scaled to mean 0 and unit norm (a flat row stays 0), so row products are correlations."""
    z = np.nan_to_num(np.asarray(pnls, float))
    z = z - z.mean(axis=1, keepdims=True)
    norm = np.linalg.norm(z, axis=1, keepdims=True)
    return np.divide(z, norm, out=np.zeros_like(z), where=norm > 0)


def families(canonicals: Sequence[str], pnls: Sequence[np.ndarray], same_book: float = SAME_BOOK) -> int:
    """Distinct formula families among valid answers: their canonical forms (windows bucketed), two forms
    merged (transitively) when their first answers' train P&L |corr| >= `same_book`."""
    first: dict[str, np.ndarray] = {}
    for c, p in zip(canonicals, pnls, strict=True):
        first.setdefault(c, p)
    if len(first) < 2:
        return len(first)
    z = _standardised(list(first.values()))
    same = np.abs(z @ z.T) >= same_book
    parent = list(range(len(first)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for i, j in zip(*np.nonzero(np.triu(same, k=1)), strict=True):
        parent[root(int(i))] = root(int(j))
    return len({root(i) for i in range(len(first))})


def mean_abs_corr(pnls: Sequence[np.ndarray]) -> float:
    """Mean pairwise |corr| of the rows (NaN for fewer than two)."""
    if len(pnls) < 2:
        return float("nan")
    z = _standardised(pnls)
    c = np.abs(z @ z.T)
    return float(c[np.triu_indices_from(c, k=1)].mean())


EXPRESSES = 0.5      # holdout P&L |corr| at or above which an answer expresses a planted effect


def coverage(answer_pnls: Sequence[np.ndarray], effects: Mapping[str, tuple[str, np.ndarray]],
             threshold: float = EXPRESSES) -> dict[str, int]:
    """How many planted edges the answers express, and how many answers sit on a decoy or a trap.
    `effects`: name -> (kind: edge, decoy or trap; the planted formula's holdout P&L)."""
    edges = [n for n, (k, _) in effects.items() if k == "edge"]
    out = {C.PLANTED_EDGES: len(edges), C.PLANTED_EDGES_EXPRESSED: 0, C.DECOY_TRAP_ANSWERS: 0}
    if not answer_pnls or not effects:
        return out
    names = list(effects)
    z_a, z_e = _standardised(answer_pnls), _standardised([effects[n][1] for n in names])
    c = np.abs(z_a @ z_e.T) >= threshold                     # answers x effects
    out[C.PLANTED_EDGES_EXPRESSED] = int(sum(c[:, names.index(n)].any() for n in edges))
    bad = [j for j, n in enumerate(names) if effects[n][0] != "edge"]
    out[C.DECOY_TRAP_ANSWERS] = int(c[:, bad].any(axis=1).sum()) if bad else 0
    return out


def train_table(answers: pd.DataFrame, pnls: Sequence[np.ndarray | None], tau: float | None = None) -> pd.DataFrame:
    """Per checkpoint: the selector (mean train CPCV over all answers), valid count, formula families among
    the valid answers (`families`) and among those with positive train CPCV (`families_positive`: diversity
    bought by losing answers does not count), brief compliance (the mean share, the share of answers passing
    every check, and each check's pass rate as `compliance_<check>`; with `tau`, `compliance_idea`: the share
    of valid answers whose `idea_fidelity` reaches it). `pnls`: each answer's train P&L, in the rows' order."""
    g = answers.groupby("step", sort=True)

    def fams(d: pd.DataFrame, positive: bool = False) -> int:
        keep = d["valid"].to_numpy(bool) & ((d[C.TRAIN_CPCV].to_numpy(float) > 0) if positive else True)
        ok = d.index[keep]
        return families(list(d.loc[ok, "canonical"]), [pnls[i] for i in ok])

    return pd.DataFrame({
        C.TRAIN_CPCV: g[C.TRAIN_CPCV].mean(),
        "valid": g["valid"].sum().astype(int),
        "answers": g.size(),
        C.FAMILIES: g.apply(fams, include_groups=False).astype(int),
        C.FAMILIES_POSITIVE: g.apply(fams, True, include_groups=False).astype(int),
        "compliance": g["compliance"].mean(),
        "compliant_share": g["compliant"].mean(),
        **{col: g[col].mean() for col in CHECK_COLUMNS.values()},
        # the share of valid answers whose signal follows their brief's mechanism (`briefs.idea`)
        **({C.COMPLIANCE_IDEA: g.apply(lambda d: float((d.loc[d["valid"], "idea_fidelity"] >= tau).mean())
                                        if d["valid"].any() else np.nan, include_groups=False)}
           if tau is not None and "idea_fidelity" in answers else {}),
    }).reset_index()


def train_book_table(answers: pd.DataFrame, pnls: Sequence[np.ndarray | None], min_turnover: float,
                     max_corr: float) -> pd.DataFrame:
    """Per checkpoint, on the train window only: the correlation-capped book of its valid answers (the books
    stage's rule: train CPCV order, turnover floor, |corr| cap on train P&L) and that book's train Sharpe
    (`train_capped_sharpe`; 0 for an empty book), and the effective bets of the equal-weight train book of
    its valid answers (`train_effective_bets`). What a selector that values diversity may read."""
    rows = []
    for step, d in answers.groupby("step", sort=True):
        ok = [i for i in d.index if bool(answers["valid"].iat[i]) and pnls[i] is not None]
        train = np.asarray([pnls[i] for i in ok]) if ok else np.zeros((0, 0))
        chosen = capped_selection([answers[C.TRAIN_CPCV].iat[i] for i in ok],
                                  [answers[C.TRAIN_TURNOVER].iat[i] for i in ok], train, min_turnover,
                                  max_corr) if ok else []
        rows.append({"step": int(step),
                     C.TRAIN_CAPPED_SHARPE: sharpe(train[chosen].mean(axis=0)) if len(chosen) else 0.0,
                     C.TRAIN_EFFECTIVE_BETS: effective_bets(train) if ok else 0.0})
    return pd.DataFrame(rows)


def holdout_phase(answers: pd.DataFrame, holdout: Verifier, progress: Callable[[Any], Any] = lambda it: it
                  ) -> tuple[pd.DataFrame, dict[int, np.ndarray], dict[int, np.ndarray]]:
    """The answers with their holdout-year columns, each checkpoint's equal-weight daily book (net of
    holdout costs) over the answers valid on both windows, and each of those answers' holdout P&L by its
    row position in `answers`."""
    cache: dict[str, Any] = {}
    cols: dict[str, list[float]] = {k: [] for k in (C.HOLDOUT_SCORE, C.HOLDOUT_SHARPE, C.HOLDOUT_RETURN,
                                                     C.HOLDOUT_TURNOVER)}
    valid_h: list[bool] = []
    pnl: dict[int, list[np.ndarray]] = {}
    by_row: dict[int, np.ndarray] = {}
    for i, row in enumerate(progress(answers.itertuples(index=False))):
        card = None
        if row.valid:
            if row.formula not in cache:
                cache[row.formula] = holdout.score_one(row.formula)
            card = cache[row.formula]
        ok = card is not None and card.valid
        valid_h.append(ok)
        cols[C.HOLDOUT_SCORE].append(card.metrics[C.HOLDOUT_SCORE] if ok else np.nan)
        cols[C.HOLDOUT_SHARPE].append(card.metrics["sharpe_net"] if ok else np.nan)
        cols[C.HOLDOUT_RETURN].append(total_return(card.pnl) if ok else np.nan)
        cols[C.HOLDOUT_TURNOVER].append(card.metrics["turnover"] if ok else np.nan)
        if ok:
            pnl.setdefault(int(row.step), []).append(card.pnl)
            by_row[i] = card.pnl
    out = answers.assign(holdout_valid=valid_h, **cols)
    books = {step: np.mean(np.stack(p), axis=0) for step, p in pnl.items()}
    return out, books, by_row


def _nanmean(x: np.ndarray) -> float:
    return float(np.nanmean(x)) if np.isfinite(x).any() else float("nan")


def holdout_table(answers: pd.DataFrame, books: Mapping[int, np.ndarray], market: np.ndarray,
                  holdout_pnls: Mapping[int, np.ndarray], train_pnls: Sequence[np.ndarray | None],
                  min_turnover: float, max_corr: float,
                  effects: Mapping[str, tuple[str, np.ndarray]] | None = None) -> pd.DataFrame:
    """Per checkpoint: mean holdout score over its valid answers, how many were valid on the holdout year,
    the equal-weight book's return, Sharpe, beta to the market, mean pairwise |corr| and effective bets,
    and the correlation-capped book chosen on train numbers (its size, holdout Sharpe, effective bets).
    `holdout_pnls` and `train_pnls` are by row position in `answers`; with the simulator's `effects`
    (`coverage`), the coverage columns too."""
    rows = []
    for step, d in answers.groupby("step", sort=True):
        book = books.get(int(step))
        beta = beta_corr(book, market)[0] if book is not None else np.nan
        both = [i for i in d.index if i in holdout_pnls]          # row positions: `answers` has a range index
        held = [holdout_pnls[i] for i in both]
        chosen = [both[k] for k in capped_selection(
            [answers[C.TRAIN_CPCV].iat[i] for i in both], [answers[C.TRAIN_TURNOVER].iat[i] for i in both],
            np.asarray([train_pnls[i] for i in both]), min_turnover, max_corr)] if both else []
        capped = [holdout_pnls[i] for i in chosen]
        scores = d[C.HOLDOUT_SCORE].to_numpy(dtype=float)
        # the holdout score's 95% interval from a bootstrap over the briefs (one greedy answer each)
        low, high = bootstrap_interval(lambda k, b, x=scores: _nanmean(x[b]), 1, len(scores)) if len(scores) \
            else (np.nan, np.nan)
        rows.append({"step": int(step), C.HOLDOUT_SCORE: float(d[C.HOLDOUT_SCORE].mean()),
                     C.HOLDOUT_SCORE_LOW: low, C.HOLDOUT_SCORE_HIGH: high,
                     C.HOLDOUT_VALID: int(d[C.HOLDOUT_VALID].sum()),
                     C.HOLDOUT_BOOK_RETURN: total_return(book) if book is not None else np.nan,
                     C.HOLDOUT_BOOK_SHARPE: sharpe(book) if book is not None else np.nan,
                     C.HOLDOUT_BOOK_BETA: beta,
                     C.HOLDOUT_MEAN_ABS_CORR: mean_abs_corr(held),
                     C.HOLDOUT_EFFECTIVE_BETS: effective_bets(np.asarray(held)) if held else 0.0,
                     C.CAPPED_ANSWERS: len(capped),
                     C.CAPPED_HOLDOUT_SHARPE: sharpe(np.mean(capped, axis=0)) if capped else np.nan,
                     C.CAPPED_EFFECTIVE_BETS: effective_bets(np.asarray(capped)) if capped else 0.0,
                     **(coverage(held, effects) if effects is not None else {})})
    return pd.DataFrame(rows)
