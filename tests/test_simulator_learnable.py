"""The simulator can show learning: each planted edge is a small bet that pays on train and, on average,
after the holdout year's costs; the edges are independent bets whose equal-weight book beats them; the traps
stay traps and the Alpha101 library leaves room to learn. Tested on seeds 7 (the default), 5 and 11; the
strengths were set on seeds 21-24 (`python tools/effects_report.py --seeds 21,22,23,24`).

A one-year holdout Sharpe has a standard error of about 1, so a claim about one edge on one seed's holdout
year is a coin toss at these sizes: the holdout claims are made over the 24 (edge, seed) pairs, and per
edge over the three seeds on train, where 13 years make the estimate tight."""

from __future__ import annotations

import numpy as np
import pytest

from alphagym.books.metrics import sharpe
from alphagym.config import load_params
from alphagym.data.build_panel import build_panel
from alphagym.data.sources import load_source
from alphagym.dsl.alpha101 import alpha101
from alphagym.engine.book import market_forward
from alphagym.verifier.verifier import Verifier

SEEDS = (7, 5, 11)
HIGH_BETA_TRAP = "rank(ts_std(returns, 63))"
PRICE_LEVEL_TRAP = "rank(ts_mean(close, 126))"


def _market(root, seed):
    p = load_params(root / "params.yaml", [f"seed={seed}", "verifier.jepa_stress.enabled=false"])
    prices, sectors, truth = load_source(p)
    train, holdout, _ = build_panel(prices, sectors, p)
    tv, hv = Verifier(train, p), Verifier(holdout, p, window="holdout")
    edges = {k: e["formula"] for k, e in truth["effects"].items() if e["kind"] == "edge"}
    cards = {k: (tv.score(f), hv.score(f)) for k, f in edges.items()}
    return {"train": tv, "holdout": hv, "truth": truth, "cards": cards}


@pytest.fixture(scope="module")
def markets(root):
    return {seed: _market(root, seed) for seed in SEEDS}


def test_at_least_eight_edges_on_eight_mechanisms_and_two_decoys(markets):
    effects = markets[7]["truth"]["effects"]
    edges = [e for e in effects.values() if e["kind"] == "edge"]
    assert len(edges) >= 8 and len({e["mechanism"] for e in edges}) == len(edges)
    assert sum(e["kind"] == "decoy" for e in effects.values()) >= 2
    assert markets[7]["truth"]["mechanisms_without_effect"]          # some briefs have no edge to find


def test_each_edge_is_a_small_bet_on_train(markets):
    """Every edge is valid on every seed, and its train CPCV averaged over the seeds lies in [0.4, 1.5]
    (measured: 0.44-1.28, pooled 0.90; one edge on one seed ranges from -0.07 to 2.27)."""
    cpcv = {k: [] for k in markets[7]["cards"]}
    for m in markets.values():
        for k, (train, holdout) in m["cards"].items():
            assert train.valid and holdout.valid, (k, train.reason, holdout.reason)
            cpcv[k].append(train.channels["cpcv"])
    means = {k: float(np.mean(v)) for k, v in cpcv.items()}
    assert all(0.4 <= v <= 1.5 for v in means.values()), means


def test_edges_pay_after_holdout_costs(markets):
    """Over the 24 (edge, seed) pairs, the holdout net Sharpe after the harsher holdout costs averages at
    least 0.5 and reaches 0.5 in at least two thirds of them (measured: mean 1.12, 19 of 24)."""
    sharpes = [h.metrics["sharpe_net"] for m in markets.values() for _, h in m["cards"].values()]
    assert np.mean(sharpes) >= 0.5, sharpes
    assert np.mean(np.array(sharpes) >= 0.5) >= 2 / 3, sharpes


def test_edges_are_independent_bets_and_their_book_beats_them(markets):
    """On every seed the edges' daily train P&L has pairwise |corr| < 0.3 (measured at most 0.24), and the
    equal-weight book of the edges has a holdout Sharpe at least 1.5x the mean single edge's (measured
    2.8-3.1x). Against the best single edge of a seed the ratio is 1.07, 1.58 and 1.40: the best of eight
    one-year Sharpes is inflated by the noise of the year, so that claim is made on average, >= 1.0."""
    to_best = []
    for seed, m in markets.items():
        names = list(m["cards"])
        train = np.stack([m["cards"][k][0].pnl for k in names])
        c = np.abs(np.corrcoef(train))
        assert c[np.triu_indices(len(names), 1)].max() < 0.3, (seed, np.round(c, 2))
        hold = [m["cards"][k][1].pnl for k in names]
        singles = [sharpe(x) for x in hold]
        book = sharpe(np.mean(hold, axis=0))
        assert book >= 1.5 * np.mean(singles), (seed, book, singles)
        to_best.append(book / max(singles))
    assert np.mean(to_best) >= 1.0, to_best


def test_decoys_are_gone_by_the_holdout_year(markets):
    """Both decoys keep under 2% of their planted strength in the holdout years (each year's mean
    coefficient, crisis and calm days together); one of them lives only in crises."""
    for m in markets.values():
        effects = m["truth"]["effects"]
        for name in ("trend_persistence", "price_volume_divergence"):
            e = effects[name]
            assert e["kind"] == "decoy"
            for year in ("2025", "2026"):
                assert abs(e["coef_by_year"][year]) < 0.02 * e["strength"], (name, e["coef_by_year"])
        assert effects["price_volume_divergence"]["calm_mult"] == 0.0


def test_high_beta_trap_pays_only_in_rising_markets_and_is_charged(markets):
    for m in markets.values():
        v = m["train"]
        card = v.score(HIGH_BETA_TRAP)
        assert card.valid
        market = market_forward(v.fwd)[: len(card.pnl)]
        net = card.pnl
        up, down = market > 0, market < 0
        assert card.metrics["beta"] > 0.1 and card.metrics["market_corr"] > 0.4, card.metrics
        assert net[up].mean() > 0 > net[down].mean()
        assert card.channels["factor_neutrality"] < 0.0          # R4 sees that factors explain its P&L


def test_price_level_trap_is_invalid_or_near_zero(markets):
    for m in markets.values():
        card = m["train"].score(PRICE_LEVEL_TRAP)
        assert (not card.valid) or abs(card.channels["cpcv"]) < 0.3, (card.reason, card.channels)


def test_alpha101_mostly_negative_on_train(markets):
    v = markets[7]["train"]
    cpcv = [v.score(a.text).channels["cpcv"] for a in alpha101() if a.usable]
    assert len(cpcv) > 80
    assert np.median(cpcv) < 0.0


def test_seed_7_is_the_default(root):
    assert load_params(root / "params.yaml")["seed"] == 7


def test_ground_truth_records_the_strengths(markets, root):
    truth = markets[11]["truth"]
    planted = load_params(root / "params.yaml")["simulator"]["effects"]["planted"]
    for name, want in planted.items():
        eff = truth["effects"][name]
        assert eff["strength"] == want["strength"] and eff["kind"] == want["kind"]
        assert eff["half_life_years"] == want["half_life_years"]
        assert set(eff["coef_by_year"]) >= {"2013", "2026"}
