"""Holdout costs (per stock, harsher) and the holdout score, on worked cases."""

from pathlib import Path

import numpy as np
import pytest

from alphagym.config import load_params
from alphagym.engine.costs import HoldoutCosts
from alphagym.verifier.verifier import Verifier

P = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
CFG = P["verifier"]["costs"]["holdout"]


def _costs(sigma: float, adv: float, cfg=CFG) -> HoldoutCosts:
    t, n = 40, 2
    rng = np.random.default_rng(0)
    r = rng.normal(0, 1, (t, n))
    r = r / r[:20].std(axis=0) * sigma                    # 20-day population std = sigma on day 19
    c = HoldoutCosts(r, np.full((t, n), adv), cfg)
    c.sigma[:] = sigma                                     # pin the inputs for exact worked numbers
    c.adv[:] = adv
    return c


def test_square_root_impact_fees_and_borrow():
    cfg = CFG.model_copy(update={"capacity_adv_share": 1.0})                # no capacity charge here
    c = _costs(0.02, 1e8, cfg)
    w = np.zeros((40, 2))
    w[10:, 0], w[10:, 1] = 0.5, -0.5                       # trade in on day 10, hold
    cost = c.cost(w)
    traded = 0.5
    fees = 2 * traded * (cfg["fee_bps"] + cfg["half_spread_bps"]) / 1e4
    impact = 2 * traded * cfg["impact_y"] * 0.02 * np.sqrt(traded * cfg["book_usd"] / 1e8)
    borrow = 0.5 * cfg["borrow_bps_annual"] / 1e4 / 252
    assert cost[10] == pytest.approx(fees + impact + borrow, rel=1e-12)
    assert cost[11] == pytest.approx(borrow, rel=1e-12)    # holding: only the borrow on the short side
    assert cost[5] == 0.0


def test_impact_grows_with_the_square_root_of_size():
    cfg = CFG.model_copy(update=dict(fee_bps=0.0, half_spread_bps=0.0, borrow_bps_annual=0.0, capacity_adv_share=1.0))
    w = np.zeros((40, 2))
    w[10:, 0] = 1.0
    small = _costs(0.02, 1e8, cfg.model_copy(update={"book_usd": 1e6})).cost(w)[10]
    big = _costs(0.02, 1e8, cfg.model_copy(update={"book_usd": 4e6})).cost(w)[10]
    assert big / small == pytest.approx(2.0, rel=1e-12)    # 4x the dollars: 2x the cost per dollar


def test_capacity_charge_above_a_share_of_adv():
    cfg = CFG.model_copy(update=dict(fee_bps=0.0, half_spread_bps=0.0, impact_y=0.0, borrow_bps_annual=0.0))
    w = np.zeros((40, 2))
    w[10:, 0] = 0.5
    roomy = _costs(0.02, 1e9, cfg).cost(w)                 # 5% of 1e9 = 5e7 > 5e5 position
    tight = _costs(0.02, 4e6, cfg).cost(w)                 # 5% of 4e6 = 2e5 < 5e5 position
    assert roomy[12] == 0.0
    assert tight[12] == pytest.approx((0.5 * 1e6 - 0.05 * 4e6) / 1e6 * cfg["capacity_penalty_bps"] / 1e4)


def test_holdout_verifier_scores_only_the_holdout_year(sim_panels):
    _, holdout = sim_panels
    v = Verifier(holdout, P, window="holdout")
    assert v.rows.sum() == int(holdout.in_holdout[:-2].sum())       # the warm-up sessions do not count
    c = v.score("rank(ts_std(volume, 20) / ts_mean(volume, 20))")
    assert c.valid and -5.0 <= c.metrics["holdout_score"] <= 5.0
    turnover_pen = -2.0 * max(0.0, c.metrics["turnover"] - 0.5)
    assert c.metrics["holdout_score"] == pytest.approx(np.clip(c.channels["cpcv"] + turnover_pen, -5, 5))
    assert "novelty_pnl" in c.skipped
    train_cost = Verifier(sim_panels[0], P).score("rank(ts_std(volume, 20) / ts_mean(volume, 20))")
    assert c.metrics["cost_annual"] > 0 and train_cost.metrics["cost_annual"] > 0
