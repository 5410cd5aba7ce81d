"""The simulator can show learning: its planted effects clear costs on the holdout year, its traps stay traps
and the Alpha101 library leaves room to learn. Checked on the default seed and two others."""

from __future__ import annotations

import numpy as np
import pytest

from alphagym.config import load_params
from alphagym.data.build_panel import build_panel
from alphagym.data.sources import load_source
from alphagym.dsl.alpha101 import alpha101
from alphagym.engine.book import market_forward
from alphagym.verifier.verifier import Verifier

PLANTED = [
    "rank(ts_std(volume, 20) / ts_mean(volume, 20))",               # volume variability, as planted
    "rank(ts_mean(ts_std(volume, 20) / ts_mean(volume, 20), 5))",   # ... smoothed over a week
    "rank(-ts_delta(log(close), 5))",                               # 5-day reversal, as planted
    "rank(-ts_sum(returns, 5))",                                    # ... written with returns
]
HIGH_BETA_TRAP = "rank(ts_std(returns, 63))"
PRICE_LEVEL_TRAP = "rank(ts_mean(close, 126))"


@pytest.fixture(scope="module", params=[7, 11, 23], ids=lambda s: f"seed{s}")
def verifiers(request, root):
    p = load_params(root / "params.yaml", [f"seed={request.param}", "verifier.jepa_stress.enabled=false"])
    prices, sectors, truth = load_source(p)
    train, holdout, _ = build_panel(prices, sectors, p)
    return Verifier(train, p), Verifier(holdout, p, window="holdout"), truth


@pytest.mark.parametrize("formula", PLANTED)
def test_planted_effects_pay_on_train_and_after_holdout_costs(verifiers, formula):
    train, holdout = verifiers[0].score(formula), verifiers[1].score(formula)
    assert train.valid and holdout.valid
    assert train.channels["cpcv"] >= 0.8, train.channels
    assert holdout.metrics["sharpe_net"] >= 1.0, holdout.metrics
    assert holdout.metrics["holdout_score"] > 0.0, holdout.metrics


def test_high_beta_trap_pays_only_in_rising_markets_and_is_charged(verifiers):
    v = verifiers[0]
    card = v.score(HIGH_BETA_TRAP)
    assert card.valid
    market = market_forward(v.fwd)[: len(card.pnl)]
    net = card.pnl
    up, down = market > 0, market < 0
    assert card.metrics["beta"] > 0.1 and card.metrics["market_corr"] > 0.4, card.metrics
    assert net[up].mean() > 0 > net[down].mean()
    assert card.channels["factor_neutrality"] < 0.0          # R4 sees that factors explain its P&L
    planted = v.score(PLANTED[0])
    assert card.channels["cpcv"] < planted.channels["cpcv"] - 1.0


def test_price_level_trap_is_invalid_or_near_zero(verifiers):
    card = verifiers[0].score(PRICE_LEVEL_TRAP)
    assert (not card.valid) or abs(card.channels["cpcv"]) < 0.3, (card.reason, card.channels)


def test_alpha101_mostly_negative_on_train(verifiers):
    v = verifiers[0]
    cpcv = [v.score(a.text).channels["cpcv"] for a in alpha101() if a.usable]
    assert len(cpcv) > 80
    assert np.median(cpcv) < 0.0


def test_seed_7_is_the_default(root):
    assert load_params(root / "params.yaml")["seed"] == 7


def test_ground_truth_records_the_strengths(verifiers, root):
    truth = verifiers[2]
    p = load_params(root / "params.yaml")
    for name in ("reversal", "volume_variability"):
        eff = truth["effects"][name]
        assert eff["strength"] == p["simulator"]["effects"]["planted"][name]["strength"]
        assert eff["half_life_years"] == p["simulator"]["effects"]["planted"][name]["half_life_years"]
        assert set(eff["coef_by_year"]) >= {"2013", "2026"}
