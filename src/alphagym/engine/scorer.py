"""One path from a formula's signal to its score: signal -> dollar-neutral book -> costs -> net P&L -> CPCV.

The verifier (R1 and every book metric), the stress channel R3 (the same formula in each stress world) and
the world model's AUC gate all score through `BookScorer`, so a change to the book, the costs or the CPCV
reaches all three at once. It takes evaluated signals (`dsl.evaluate.Evaluator.signal`: the values and
whether they are a rank), not formulas: the engine sits beside the formula language, not above it, and
each caller keeps one evaluator per panel it scores on.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from alphagym.engine.book import Book, daily_ic, forward_open_returns, gross_pnl, turnover, weights_from_signal
from alphagym.engine.costs import HoldoutCosts, train_cost
from alphagym.engine.cpcv import Slices, cpcv_statistic, make_slices, masked_sharpes
from alphagym.panel import Panel
from alphagym.params import Verifier as VerifierParams


class BookScorer:
    """Books and CPCV of signals on one panel (evaluated on `panel`, row for row).

    `verifier` is the `verifier` params block (book, costs, cpcv). `rows` selects the P&L rows that count
    (default: all T - 2); CPCV slices are cut over those rows. `holdout_costs=True` charges the per-stock
    holdout cost model instead of the flat training cost.
    """

    def __init__(self, panel: Panel, verifier: VerifierParams, rows: np.ndarray | None = None,
                 holdout_costs: bool = False) -> None:
        self.panel = panel
        self.fwd = forward_open_returns(panel["open"])
        self.min_valid = verifier.book.min_valid_stocks
        self.rows = np.ones(panel.shape[0] - 2, bool) if rows is None else rows
        self.train_costs = verifier.costs.train
        self.holdout_costs = (HoldoutCosts(panel["returns"], panel["dollar_volume"], verifier.costs.holdout)
                              if holdout_costs else None)
        c = verifier.cpcv
        self.slices: Slices = make_slices(int(self.rows.sum()), c.blocks, c.test_blocks, c.purge, c.embargo)
        self.std_penalty = c.std_penalty

    def _cost(self, w: np.ndarray, to: np.ndarray) -> np.ndarray:
        if self.holdout_costs is not None:
            return self.holdout_costs.cost(w)
        return train_cost(to[:-2], self.train_costs)

    def book(self, signal: np.ndarray, ranked: bool = False) -> Book:
        """The full book of a signal: weights, turnover, gross, cost, net, IC, flat days."""
        w = weights_from_signal(signal, self.min_valid, ranked)
        to = turnover(w)
        gross = gross_pnl(w, self.fwd)
        cost = self._cost(w, to)
        flat = np.abs(w).sum(axis=1) == 0
        return Book(w, to, gross, cost, gross - cost, daily_ic(w, self.fwd), flat)

    def net(self, signal: np.ndarray, ranked: bool = False) -> np.ndarray:
        """Net daily P&L of a signal (all T - 2 rows), without the IC and flat-day bookkeeping of `book`."""
        w = weights_from_signal(signal, self.min_valid, ranked)
        return gross_pnl(w, self.fwd) - self._cost(w, turnover(w))

    def cpcv_sharpes(self, net_rows: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
        """(CPCV statistic, test-slice Sharpes, in-sample Sharpes) of a net P&L already cut to `rows`."""
        test = masked_sharpes(net_rows, self.slices.test)
        return cpcv_statistic(test, self.std_penalty), test, masked_sharpes(net_rows, self.slices.insample)

    def cpcv_of_net(self, net_rows: np.ndarray) -> float:
        return cpcv_statistic(masked_sharpes(net_rows, self.slices.test), self.std_penalty)

    def cpcv(self, signal: np.ndarray, ranked: bool = False) -> float:
        """CPCV of a signal's net P&L over `rows`."""
        return self.cpcv_of_net(self.net(signal, ranked)[self.rows])


def tail_scorer(panel: Panel, verifier: VerifierParams, sessions: int | None, warmup: int) -> BookScorer:
    """A scorer that counts only the last `sessions` P&L rows of `panel` (all of them when `sessions` is None
    or the panel is not longer than the span and its warm-up).

    Formulas are evaluated on the scorer's `panel`, the span and the `warmup` sessions before it only: with
    `warmup` at least the formula language's largest total look-back (`dsl.limits.max_lookback`), every
    window the counted rows read is filled, so they match the whole panel's up to rounding (running window
    sums round by where they start; rank ties can amplify it: tests/test_stress_span.py measures it on the
    Alpha101 library), at a fraction of the cost. R3 scores each stress world, and the train panel it
    compares them with, this way.
    """
    days = panel.shape[0]
    if sessions is None or sessions + warmup + 2 >= days:
        return BookScorer(panel, verifier)
    sub = panel.slice_days(days - (sessions + warmup + 2), days)
    rows = np.zeros(sub.shape[0] - 2, bool)
    rows[-sessions:] = True
    return BookScorer(sub, verifier, rows)


def span_scorers(panel: Panel, worlds: Mapping[str, Panel], verifier: VerifierParams, sessions: int | None,
                 warmup: int) -> tuple[dict[str, BookScorer], BookScorer | None]:
    """R3's scorers: one per stress world over the span (`tail_scorer`), and `panel`'s own over the same
    span, evaluated from the same first day (running window sums round by where they start, and rank ties
    can amplify that). The second is None when the worlds are scored whole: R3 then compares them with the
    panel's whole-window CPCV. The verifier and the world model's AUC gate both build R3 this way."""
    scorers = {name: tail_scorer(w, verifier, sessions, warmup) for name, w in worlds.items()}
    cut = bool(scorers) and all(s.panel.shape[0] < worlds[name].shape[0] for name, s in scorers.items())
    return scorers, (tail_scorer(panel, verifier, sessions, warmup) if cut else None)
