"""The AUC gate: is a stress channel's penalty an early warning?

For a set of formulas (the usable Alpha101 and seeded random ones): score each on the early part of the
train window, in the real market and in each world (CPCV with training costs), and measure whether it
degraded from the early part to the late validation part (net Sharpe falls by more than `degrade_sharpe`).
A channel's penalty is the CPCV drop max(0, real - world) over R3's span (the last `verifier.jepa_stress.sessions`
of the early part), as the verifier scores it. AUC = P(penalty of a degrader > penalty of a holder), ties
counted half (Mann-Whitney). A channel below 0.5 ranks the wrong way and is dropped.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from alphagym.dsl.errors import DslError
from alphagym.dsl.evaluate import Evaluator
from alphagym.dsl.parser import parse
from alphagym.engine.book import sharpe
from alphagym.engine.scorer import BookScorer, span_scorers
from alphagym.panel import Panel
from alphagym.params import Params


def auc(scores: np.ndarray, labels: np.ndarray) -> float:
    pos, neg = scores[labels], scores[~labels]
    if len(pos) == 0 or len(neg) == 0:
        return float("nan")
    greater = (pos[:, None] > neg[None, :]).mean()
    ties = (pos[:, None] == neg[None, :]).mean()
    return float(greater + 0.5 * ties)


def channel_aucs(train: Panel, worlds: dict[str, Panel], formulas: list[str], split: int, params: Params,
                 degrade_sharpe: float) -> dict[str, Any]:
    """`split`: first session of the late part (train-panel index); worlds start one session later."""
    v = params.verifier
    early_panel = train.slice_days(0, split)
    early = BookScorer(early_panel, v)
    late = BookScorer(train.slice_days(split, train.shape[0]), v)
    # each world over R3's span (the last `jepa_stress.sessions` of the early part), as the verifier scores it
    world_early, early_span = span_scorers(early_panel,
                                           {c: p.slice_days(0, split - 1) for c, p in worlds.items()}, v,
                                           v.jepa_stress.sessions, params.dsl.limits.max_lookback)
    # the scorers take signals: one evaluator per scorer's panel
    early_ev, late_ev = Evaluator(early.panel), Evaluator(late.panel)
    world_ev = {c: Evaluator(s.panel) for c, s in world_early.items()}
    span_ev = Evaluator(early_span.panel) if early_span is not None else None
    rows = []
    for text in formulas:
        try:
            ast = parse(text)
        except DslError:
            continue
        e = early.net(*early_ev.signal(ast))
        if float(np.abs(e).sum()) == 0.0:
            continue                                   # a flat book says nothing about degradation
        base = early.cpcv_of_net(e) if early_span is None else early_span.cpcv(*span_ev.signal(ast))
        drops = {c: max(0.0, base - s.cpcv(*world_ev[c].signal(ast))) for c, s in world_early.items()}
        rows.append((sharpe(e) - sharpe(late.net(*late_ev.signal(ast))) > degrade_sharpe, drops))
    labels = np.array([r[0] for r in rows])
    out: dict[str, Any] = {"formulas": len(rows), "degraders": int(labels.sum())}
    for c in worlds:
        out[c] = auc(np.array([r[1][c] for r in rows]), labels)
    return out
