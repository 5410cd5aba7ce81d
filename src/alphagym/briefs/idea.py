"""A mechanism check that reads the signal, not the syntax (`compliance_idea`).

The syntactic mechanism check (`briefs.compliance`) asks for operators and fields, which a formula can
carry without following the idea: `ts_mean(close, d)` passes both the reversal and the trend check, and
ranks stocks by their price level. This check compares what the formula does: each mechanism has a few
reference formulas in the catalogue (`references`, as data), and an answer is on mechanism when its
signal tracks one of them on the train window:

    fidelity(a, m) = max over references r of m  | mean over days t of  rho_t(a, r) |

rho_t the Spearman rank correlation of the two signals across the stocks of day t (the stocks where both
are finite, at least `min_stocks`), over every `stride`-th day of the panel. Why this statistic: the book
trades the cross-sectional order of a signal (dollar-neutral, ranked), so two formulas that order stocks
alike are the same bet whatever their scale, units or monotone transforms (rank, scale, zscore, log), and
the Spearman correlation is exactly invariant to those; averaging over days measures whether they agree
day after day rather than on a few; the absolute value makes the check about the idea and leaves its sign
(which way it pays) to the rewards, as the catalogue's reference for `reversal` and its negation express
the same mechanism. An answer is on mechanism when fidelity >= `idea_tau` (catalogue.yaml), calibrated on
the labelled set in tests/mechanism_labels.yaml, where tests/test_idea.py measures the check's AUC and
accuracy.

Reads only the panel it is given (the train panel); the probe and `propose` give it the train panel.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.stats import rankdata

from alphagym.briefs.catalogue import Catalogue
from alphagym.dsl.ast import Node
from alphagym.dsl.evaluate import Evaluator
from alphagym.dsl.parser import parse
from alphagym.panel import Panel


def mean_rank_corr(a: np.ndarray, b: np.ndarray, days: np.ndarray, min_stocks: int = 10) -> float:
    """Mean over `days` of the cross-sectional Spearman correlation of signals a and b (days x stocks), on the
    stocks where both are finite; days with fewer than `min_stocks` such stocks, or a constant cross-section,
    are skipped; 0.0 when no day is left. All days at once (the RL trainer measures every answer it scores):
    ranks by `rankdata` along the stocks, ties averaged, so a day's mean rank is (n + 1) / 2."""
    a, b = a[days], b[days]
    both = np.isfinite(a) & np.isfinite(b)
    n = both.sum(axis=1)
    centre = ((n + 1) / 2)[:, None]
    da = np.where(both, rankdata(np.where(both, a, np.nan), axis=1, nan_policy="omit") - centre, 0.0)
    db = np.where(both, rankdata(np.where(both, b, np.nan), axis=1, nan_policy="omit") - centre, 0.0)
    m = np.maximum(n, 1)
    cov, va, vb = (da * db).sum(axis=1) / m, (da * da).sum(axis=1) / m, (db * db).sum(axis=1) / m
    ok = (n >= min_stocks) & (va > 0) & (vb > 0)
    return float(np.mean(cov[ok] / np.sqrt(va[ok] * vb[ok]))) if ok.any() else 0.0


class IdeaCheck:
    """`fidelity(signal, mechanism)` on one panel; the references' signals are evaluated once each."""

    def __init__(self, panel: Panel, catalogue: Catalogue, stride: int = 5, min_stocks: int = 10) -> None:
        self.catalogue, self.min_stocks, self.panel = catalogue, min_stocks, panel
        self.evaluator = Evaluator(panel)
        self.days = np.arange(0, panel.shape[0], stride)
        self._refs: dict[str, list[np.ndarray]] = {}
        self._known: dict[tuple[Node, str], float] = {}     # (formula, mechanism) -> fidelity: RL repeats answers

    @property
    def tau(self) -> float:
        return self.catalogue.idea_tau

    def signal(self, formula: str | Node) -> np.ndarray:
        return self.evaluator.evaluate(parse(formula) if isinstance(formula, str) else formula)

    def references(self, mechanism: str) -> list[np.ndarray]:
        if mechanism not in self._refs:
            self._refs[mechanism] = [self.signal(f) for f in self.catalogue.references(mechanism)]
        return self._refs[mechanism]

    def fidelity(self, signal: np.ndarray, mechanism: str) -> float:
        """max over the mechanism's references of |mean daily rank correlation| (module docstring)."""
        return max((abs(mean_rank_corr(signal, r, self.days, self.min_stocks)) for r in self.references(mechanism)),
                   default=0.0)

    def fidelity_of(self, ast: Node, mechanism: str, signal: np.ndarray | None = None) -> float:
        """`fidelity` of a parsed formula, from `signal` (its values on this panel) when given; remembered per
        formula and mechanism."""
        key = (ast, mechanism)
        if key not in self._known:
            if len(self._known) >= 50_000:
                self._known.clear()
            self._known[key] = self.fidelity(self.signal(ast) if signal is None else signal, mechanism)
        return self._known[key]

    def on_mechanism(self, signal: np.ndarray, mechanism: str) -> bool:
        return self.fidelity(signal, mechanism) >= self.tau


def auc(scores: Sequence[float], labels: Sequence[bool]) -> float:
    """The probability that a random on-mechanism formula scores above a random off one (ties half)."""
    s, y = np.asarray(scores, float), np.asarray(labels, bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    return float(((pos[:, None] > neg[None, :]).sum() + 0.5 * (pos[:, None] == neg[None, :]).sum())
                 / (len(pos) * len(neg)))
