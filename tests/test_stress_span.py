"""R3's span (`verifier.jepa_stress.sessions`, off by default): each stress world scored over the last N train
sessions, from a warm-up of `dsl.limits.max_lookback` sessions, against the train panel over the same rows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alphagym.config import load_params
from alphagym.dsl.alpha101 import alpha101
from alphagym.dsl.evaluate import Evaluator
from alphagym.engine.scorer import BookScorer, tail_scorer
from alphagym.panel import DSL_FIELDS
from alphagym.verifier.verifier import Verifier

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def base():
    return load_params(ROOT / "params.yaml")


def test_the_span_matches_the_whole_panels_rows_on_the_alpha101_library(sim_panels, base):
    """With a warm-up of the language's largest look-back, the counted rows of the short panel are the last
    rows of the whole panel's net P&L: bit for bit for most usable Alpha101 formulas (measured 78 of 100);
    the rest differ by rounding of running window sums that rank ties amplify (largest CPCV gap 0.18,
    Alpha#15: a 3-day correlation of ranks, mostly ties)."""
    from alphagym.dsl.parser import parse

    train = sim_panels[0]
    v, sessions, warmup = base["verifier"], 1008, int(base["dsl"]["limits"]["max_lookback"])
    whole, tail = BookScorer(train, v), tail_scorer(train, v, sessions, warmup)
    whole_ev, tail_ev = Evaluator(whole.panel), Evaluator(tail.panel)
    assert tail.panel.shape[0] == sessions + warmup + 2 and int(tail.rows.sum()) == sessions
    exact, gaps = 0, []
    for a in alpha101(panel_fields=frozenset(DSL_FIELDS)):
        if not a.usable:
            continue
        want, got = whole.net(*whole_ev.signal(a.ast))[-sessions:], tail.net(*tail_ev.signal(a.ast))[tail.rows]
        exact += bool(np.array_equal(got, want))
        gaps.append(abs(tail.cpcv_of_net(got) - tail.cpcv_of_net(want)))
    assert len(gaps) >= 90 and exact >= 0.7 * len(gaps), (exact, len(gaps))
    assert max(gaps) < 0.25 and float(np.median(gaps)) == 0.0
    # a warm-up shorter than a formula's look-back changes its rows well beyond rounding
    short = tail_scorer(train, v, sessions, 100)
    f = parse("rank(ts_std(returns, 200))")
    got = short.net(*Evaluator(short.panel).signal(f))[short.rows]
    assert np.abs(got - whole.net(*whole_ev.signal(f))[-sessions:]).max() > 1e-3
    # a panel no longer than the span and its warm-up is scored whole
    assert tail_scorer(train.slice_days(0, 1200), v, sessions, warmup).panel.shape[0] == 1200


def test_r3_compares_world_and_train_over_the_same_span(sim_panels, base):
    """A world equal to the market (the train panel from its second day) scores exactly the train span's
    CPCV, so R3 is 0; scored whole (`sessions: null`), the same world compares different rows with the card's
    CPCV. The span is what the verifier evaluates: sessions + warm-up + 2 days per world."""
    train = sim_panels[0]
    identity = {"same": train.slice_days(1, train.shape[0])}
    f = "rank(ts_std(volume, 20) / ts_mean(volume, 20))"
    spanned = Verifier(train, load_params(ROOT / "params.yaml", ["verifier.jepa_stress.sessions=1008"]),
                       stress_worlds=identity)
    card = spanned.score(f)
    assert spanned.stress["same"].panel.shape[0] == spanned.stress_base.panel.shape[0] == 1008 + 252 + 2
    assert card.metrics["cpcv_world_same"] == card.metrics["cpcv_stress_span"]
    assert card.channels["jepa_stress"] == 0.0
    assert card.metrics["cpcv_stress_span"] != card.channels["cpcv"]       # a span, not the whole window

    assert base["verifier"]["jepa_stress"]["sessions"] is None            # the default: whole worlds
    full = Verifier(train, base, stress_worlds=identity)
    card_full = full.score(f)
    assert full.stress_base is None and "cpcv_stress_span" not in card_full.metrics
    assert full.stress["same"].panel.shape[0] == train.shape[0] - 1
    assert card_full.metrics["cpcv_world_same"] != card_full.channels["cpcv"]
    assert {k: v for k, v in card.channels.items() if k != "jepa_stress"} == \
        {k: v for k, v in card_full.channels.items() if k != "jepa_stress"}


def test_a_span_shorter_than_a_year_is_refused():
    from alphagym.errors import ConfigError

    with pytest.raises(ConfigError, match="jepa_stress.sessions"):
        load_params(ROOT / "params.yaml", ["verifier.jepa_stress.sessions=100"])


def test_the_auc_gate_scores_the_worlds_over_the_same_span(sim_panels):
    """The gate's penalty is R3's: with a span, a world equal to the market costs nothing (every drop 0,
    AUC 0.5 from ties alone); scored whole it compares other rows and some drops are not 0."""
    from alphagym.worldmodel.auc import channel_aucs

    train = sim_panels[0]
    identity = {"same": train.slice_days(1, train.shape[0])}
    formulas = ["rank(ts_std(volume, 20) / ts_mean(volume, 20))", "rank(-ts_delta(close, 5))",
                "rank(ts_corr(close, volume, 10))", "-rank(ts_std(returns, 63))", "rank(high - low)"]
    split = 2600
    spanned = channel_aucs(train, identity, formulas, split,
                           load_params(ROOT / "params.yaml", ["verifier.jepa_stress.sessions=1008"]), 0.0)
    assert spanned["same"] == 0.5 and 0 < spanned["degraders"] < spanned["formulas"], spanned
    whole = channel_aucs(train, identity, formulas, split, load_params(ROOT / "params.yaml"), 0.0)
    assert whole["same"] != 0.5, whole
