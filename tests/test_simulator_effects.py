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
    truth = simulate_market(sim, calendar=d["calendar"], start="2019-01-01", end="2020-12-31", seed=3).ground_truth
    effects = truth["effects"]
    assert {k for k, v in effects.items() if v["kind"] == "trap"} == {"high_beta_trap", "price_level_trap"}
    pvd = effects["price_volume_divergence"]
    assert pvd["kind"] == "decoy" and pvd["formula"] == EFFECTS["price_volume_divergence"].formula
    assert pvd["mechanism"] == "price_volume_divergence" and pvd["calm_mult"] == 0.0
    planted = {v["mechanism"] for v in effects.values() if v["kind"] != "trap"}
    assert set(truth["mechanisms_without_effect"]) == set(MECHANISMS) - planted
    sim["effects"]["planted"]["momentum"] = dict(sim["effects"]["planted"]["reversal"])
    with pytest.raises(ValueError, match="momentum"):
        simulate_market(sim, calendar=d["calendar"], start="2019-01-01", end="2019-06-30", seed=3)
    del sim["effects"]["planted"]["momentum"]
    sim["effects"]["planted"]["lagged_reversal"] = dict(sim["effects"]["planted"]["reversal"])
    with pytest.raises(ValueError, match="one mechanism"):
        simulate_market(sim, calendar=d["calendar"], start="2019-01-01", end="2019-06-30", seed=3)
