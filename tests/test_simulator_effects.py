"""The simulator's table of planted effects (`data/simulator.py::EFFECTS`): each effect's signal is exactly
its planted formula (without the outer rank) evaluated by the DSL on the simulated panel, every effect
belongs to a catalogue mechanism, and the ground truth lists every effect, trap and effect-free mechanism."""

from __future__ import annotations

import numpy as np
import pytest

from alphagym.briefs.catalogue import load_catalogue
from alphagym.config import load_params
from alphagym.data.simulator import EFFECTS, MECHANISMS, simulate_market
from alphagym.dsl.evaluate import Evaluator
from alphagym.dsl.parser import parse
from alphagym.params import Simulator


def _market(sim: dict, **kw):
    """The simulator on a params block edited as a dict (validated, as params.yaml would be)."""
    return simulate_market(Simulator.model_validate(sim), **kw)


def _arrays(panel) -> dict[str, np.ndarray]:
    return {"lc": np.log(panel["close"]), "o": panel["open"], "h": panel["high"], "lo": panel["low"],
            "v": panel["volume"], "r": panel["returns"]}


@pytest.mark.parametrize("name", sorted(EFFECTS))
def test_each_effects_signal_is_its_planted_formula(sim_panels, name):
    """The simulator plants the rank of the signal; the formula is `rank(inner)`: the signal and the DSL's
    value of `inner` agree on 40 days spread over the train window, on every stock."""
    panel = sim_panels[0]
    effect = EFFECTS[name]
    assert effect.formula.startswith("rank(") and effect.formula.endswith(")")
    inner = Evaluator(panel).evaluate(parse(effect.formula[len("rank("):-1]))
    arrays, sec = _arrays(panel), panel.sector_codes()
    days = np.linspace(effect.lookback + 130, panel.shape[0] - 1, 40).astype(int)
    for t in days:
        ours = np.asarray(effect.signal(arrays, int(t), sec), float)
        ok = np.isfinite(inner[t]) & np.isfinite(ours)
        assert ok.sum() >= panel.shape[1] - 2, (name, t)
        np.testing.assert_allclose(ours[ok], inner[t][ok], rtol=1e-9, atol=1e-12, err_msg=f"{name} day {t}")


def test_effects_belong_to_catalogue_mechanisms():
    assert set(MECHANISMS) == set(load_catalogue().ids("mechanisms"))
    assert {e.mechanism for e in EFFECTS.values()} <= set(MECHANISMS)
    assert len({e.mechanism for e in EFFECTS.values()}) >= 10


def test_ground_truth_lists_every_effect_and_an_unknown_effect_is_refused(root):
    p = load_params(root / "params.yaml")
    sim = p["simulator"].model_dump()
    sim["effects"]["planted"]["price_volume_divergence"] = {"kind": "decoy", "strength": 0.1, "calm_mult": 0.0,
                                                             "crisis_mult": 1.0, "half_life_years": 40.0}
    d = p["data"]
    truth = _market(sim, calendar=d["calendar"], start="2019-01-01", end="2020-12-31", seed=3).ground_truth
    effects = truth["effects"]
    assert {k for k, v in effects.items() if v["kind"] == "trap"} == {"high_beta_trap", "price_level_trap"}
    pvd = effects["price_volume_divergence"]
    assert pvd["kind"] == "decoy" and pvd["formula"] == EFFECTS["price_volume_divergence"].formula
    assert pvd["mechanism"] == "price_volume_divergence" and pvd["calm_mult"] == 0.0
    planted = {v["mechanism"] for v in effects.values() if v["kind"] != "trap"}
    assert set(truth["mechanisms_without_effect"]) == set(MECHANISMS) - planted
    sim["effects"]["planted"]["momentum"] = dict(sim["effects"]["planted"]["lagged_reversal"])
    with pytest.raises(ValueError, match="momentum"):
        _market(sim, calendar=d["calendar"], start="2019-01-01", end="2019-06-30", seed=3)
    del sim["effects"]["planted"]["momentum"]
    sim["effects"]["planted"]["reversal"] = dict(sim["effects"]["planted"]["lagged_reversal"])
    with pytest.raises(ValueError, match="one mechanism"):
        _market(sim, calendar=d["calendar"], start="2019-01-01", end="2019-06-30", seed=3)


DECOY_MARKET = {   # one steady edge and the two decoys (strengths: their mean slice Sharpe near the edge's)
    "volatility_regime": {"kind": "edge", "strength": 0.04, "calm_mult": 1.0, "crisis_mult": 1.0,
                          "half_life_years": 40.0},
    "trend_persistence": {"kind": "decoy", "strength": 0.22, "calm_mult": 1.0, "crisis_mult": 1.0,
                          "half_life_years": 1.5},
    "price_volume_divergence": {"kind": "decoy", "strength": 0.3, "calm_mult": 0.0, "crisis_mult": 1.0,
                                "half_life_years": 40.0},
}


@pytest.mark.parametrize("seed", [7, 5, 11])
def test_cpcv_ranks_each_decoy_below_a_steady_edge_of_the_same_mean(root, seed):
    """A decoy that decays through the train years, and one that pays only in crises, spread their P&L over
    the 15 CPCV slices more unevenly than a steady edge (slice-Sharpe std 2.8x and 2.0x on seed 7, 7.5x and
    5.4x on seed 5, 2.1x and 1.6x on seed 11, when written), so at the same mean slice Sharpe CPCV =
    mean - 0.5 std ranks each below it; the decaying one keeps no edge on the holdout year (seeds 7, 5,
    11; the strengths were set on seeds 21-23)."""
    from alphagym.data.build_panel import build_panel
    from alphagym.verifier.verifier import Verifier

    p = load_params(root / "params.yaml", ["verifier.jepa_stress.enabled=false"])
    sim = p["simulator"].model_dump()
    sim["effects"]["planted"] = DECOY_MARKET
    d = p["data"]
    m = _market(sim, calendar=d["calendar"], start=d["start"], end=d["end"], seed=seed)
    train, holdout, _ = build_panel(m.prices, m.sectors, p)
    v, h = Verifier(train, p), Verifier(holdout, p, window="holdout")
    cards = {k: v.score(EFFECTS[k].formula) for k in DECOY_MARKET}
    edge = cards["volatility_regime"]
    assert edge.valid and edge.channels["cpcv"] > 0.5
    e_mean, e_sd = float(np.mean(edge.test_sharpes)), float(np.std(edge.test_sharpes))
    for name in ("trend_persistence", "price_volume_divergence"):
        c = cards[name]
        sd = float(np.std(c.test_sharpes))
        assert c.valid and sd > 1.2 * e_sd, (name, sd, e_sd)
        assert e_mean - 0.5 * sd < edge.channels["cpcv"]            # the decoy at the edge's mean ranks below
        assert abs(float(np.mean(c.test_sharpes)) - e_mean) < 1.0, name   # and its mean is not far off
    assert m.ground_truth["effects"]["trend_persistence"]["coef_by_year"]["2025"] < \
        0.01 * m.ground_truth["effects"]["trend_persistence"]["coef_by_year"]["2013"]
    assert h.score(EFFECTS["trend_persistence"].formula).metrics["sharpe_net"] < 1.0
