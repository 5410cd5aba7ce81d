"""Book metrics and the correlation-capped selector on hand-computed series."""

from __future__ import annotations

import numpy as np
import pytest

from alphagym.books.metrics import (
    beta_corr,
    book_metrics,
    capped_selection,
    effective_bets,
    max_drawdown,
    mean_pairwise_corr,
    sharpe,
    total_return,
)


def test_return_sharpe_drawdown_by_hand():
    r = np.array([0.10, -0.50, 0.20])
    assert total_return(r) == pytest.approx(1.1 * 0.5 * 1.2 - 1)
    # growth 1.1, 0.55, 0.66: the peak 1.1 falls to 0.55, a 50% drawdown
    assert max_drawdown(r) == pytest.approx(0.5)
    assert sharpe(np.array([0.01, 0.03])) == pytest.approx(0.02 / np.std([0.01, 0.03], ddof=1) * np.sqrt(252))
    assert sharpe(np.zeros(5)) == 0.0 and max_drawdown(np.array([0.1, 0.1])) == 0.0


def test_beta_and_correlation():
    m = np.array([0.01, -0.02, 0.03, 0.0])
    b, c = beta_corr(0.5 * m + 0.001, m)
    assert b == pytest.approx(0.5) and c == pytest.approx(1.0)
    assert beta_corr(np.ones(4), m) == (0.0, 0.0)


def test_effective_bets_counts_independent_answers():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(1, 5000))
    assert effective_bets(np.repeat(x, 4, axis=0)) == pytest.approx(1.0, abs=1e-6)
    assert effective_bets(rng.normal(size=(4, 20000))) == pytest.approx(4.0, abs=0.05)
    assert mean_pairwise_corr(np.repeat(x, 3, axis=0)) == pytest.approx(1.0)


def test_book_metrics_on_down_days():
    market = np.array([-0.02, 0.01, -0.03, 0.0])
    pnls = np.array([[0.01, 0.0, 0.02, 0.0], [0.03, 0.0, 0.0, 0.0]])
    m = book_metrics(pnls, market)
    assert m["down_days"] == 2 and m["book_mean_on_down_days"] == pytest.approx((0.02 + 0.01) / 2)
    assert m["market_mean_on_down_days"] == pytest.approx(-0.025) and m["answers"] == 2
    calm = book_metrics(pnls, np.array([0.01, 0.0, -0.01, 0.02]))      # no day below -1.5%
    assert calm["down_days"] == 0
    assert np.isnan(calm["book_mean_on_down_days"]) and np.isnan(calm["market_mean_on_down_days"])


def test_capped_selection_uses_cpcv_order_turnover_and_correlation():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=500), rng.normal(size=500)
    pnls = np.array([a, a + 0.1 * rng.normal(size=500), b, rng.normal(size=500)])
    cpcv = [1.0, 2.0, 0.5, 3.0]
    turnover = [0.1, 0.1, 0.1, 0.01]            # the best answer trades too little
    # 3 skipped (turnover), 1 first, 0 too correlated with 1, then 2
    assert capped_selection(cpcv, turnover, pnls) == [1, 2]
