"""Reward-hack regression suite: each hack of the seed gym's log, reproduced and shown closed."""

from pathlib import Path

import numpy as np
import pytest

from alphagym.config import load_params
from alphagym.dsl.random_formula import random_formula
from alphagym.engine.book import forward_open_returns, gross_pnl, leg_names, weights_from_signal
from alphagym.verifier.verifier import Verifier

P = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
PRIORITIES = P["verifier"]["priorities"]


@pytest.fixture(scope="module")
def verifier(sim_panels):
    return Verifier(sim_panels[0], P)


def test_self_cancelling_formula_is_invalid(verifier):
    c = verifier.score("scale(ts_rank(ts_delta(volume, 23), 47) - ts_rank(ts_delta(volume, 23), 47))")
    assert not c.valid and c.error_type == "flat_book"
    assert c.channels["cpcv"] == -0.8 and all(v == 0 for k, v in c.channels.items() if k != "cpcv")


def test_static_book_is_invalid(verifier):
    c = verifier.score("rank(ts_mean(close, 126))")        # a price-level tilt that hardly trades
    assert c.metrics["turnover"] < 0.02
    assert not c.valid and c.error_type == "static_book"


def test_a_book_that_is_one_stock_is_invalid(verifier):
    """`sign(rank(X) * rank(X))` is 1 for every stock but the lowest-ranked one: demeaned, a short in a single
    name. It trades and would score valid; the concentration rule refuses it. `rank(X)` itself holds about
    17 names on each leg and stays valid."""
    x = "ts_max(volume / ts_mean(volume, 17), 20)"
    c = verifier.score(f"sign(rank({x}) * rank({x}))")
    assert not c.valid and c.error_type == "concentrated_book", (c.error_type, c.reason)
    assert c.metrics["leg_names"] < 1.5 and c.metrics["turnover"] > 0.1
    ok = verifier.score(f"rank({x})")
    assert ok.valid and ok.metrics["leg_names"] > 10


def test_a_new_form_of_a_seen_book_earns_no_syntax_novelty(sim_panels):
    """`rank(rank(X) * rank(X))` trades `rank(X)`'s book under another canonical form: once `rank(X)` is in
    the archive, R9 pays it nothing (its P&L |corr| with the archived book is 1), while a form with its own
    book still earns the bonus."""
    x = "ts_max(volume / ts_mean(volume, 17), 20)"
    v = Verifier(sim_panels[0], P)                 # an empty archive
    first = v.score(f"rank({x})")
    v.archive.add(first.pnl, first.canonical, "rank(X)")
    same = v.score(f"rank(rank({x}) * rank({x}))")
    assert same.canonical != first.canonical and same.max_corr > 0.99
    assert same.channels["novelty_syntax"] == 0.0
    other = v.score("rank(-ts_delta(log(close), 5))")
    assert other.channels["novelty_syntax"] > 0.1


def test_leg_names_counts_the_thinner_leg():
    w = np.array([[0.25, 0.25, -0.5, 0.0],             # long 2 names, short 1
                  [0.25, 0.25, -0.25, -0.25],          # 2 and 2
                  [0.1, 0.4, -0.25, -0.25],            # long (0.5)^2 / 0.17 = 1.47 names
                  [0.0, 0.0, 0.0, 0.0]])               # flat: no leg
    np.testing.assert_allclose(leg_names(w), [1.0, 2.0, 0.25 / 0.17, 0.0])


def test_leg_names_agrees_with_its_definition_on_a_ranked_book_with_gaps():
    """The kernel against the formula written with numpy, on a real book's weights with NaN and flat days."""
    rng = np.random.default_rng(3)
    sig = rng.standard_normal((300, 46))
    sig[rng.random(sig.shape) < 0.1] = np.nan
    sig[10:20] = np.nan                                 # flat days
    w = weights_from_signal(sig, 2)
    w[5, :3] = np.nan
    x = np.nan_to_num(w)
    legs = [np.where(x > 0, x, 0.0), np.where(x < 0, -x, 0.0)]
    with np.errstate(divide="ignore", invalid="ignore"):
        pr = [np.where((leg * leg).sum(1) > 0, leg.sum(1) ** 2 / (leg * leg).sum(1), 0.0) for leg in legs]
    expected = np.minimum(*pr)
    got = leg_names(w)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert (got[10:20] == 0).all() and got[30] > 10


def test_jittered_template_shares_a_canonical_form_and_pays(verifier):
    group = [f"<alpha>rank(ts_std(volume, {w}) / ts_mean(volume, {w}))</alpha>" for w in range(15, 27)]
    cards = verifier.score_group(group)
    assert len({c.canonical for c in cards}) == 1
    for c in cards:
        assert c.channels["novelty_syntax"] <= 0.2 - 0.3 * 11 + 1e-12


def test_same_book_different_code_gets_no_novelty(sim_panels):
    from alphagym.verifier.archive import NoveltyArchive

    v = Verifier(sim_panels[0], P, archive=NoveltyArchive(sim_panels[0].shape[0] - 2))
    first = v.score("rank(volume / ts_mean(volume, 20))")
    v.archive.add(first.pnl, first.canonical, "first")
    twin = v.score("rank(log(volume) - log(ts_mean(volume, 20)))")        # same ranks, other code
    assert twin.canonical != first.canonical
    assert twin.max_corr > 0.999
    assert twin.channels["novelty_pnl"] == -0.4


def test_slow_price_level_tilt_loses_positive_reward(verifier):
    c = verifier.score("rank(ts_std(close, 5))")           # tracks the price level, IC ~ 0
    assert c.valid and abs(c.metrics["ic"]) < 0.005
    assert c.channels["motif_guard"] == -1.0
    assert max(c.channels.values()) <= 0.0


def test_high_beta_trap_is_charged_by_factor_neutrality(verifier):
    c = verifier.score("rank(ts_std(returns, 63))")        # the planted trap (see ground_truth.json)
    assert c.valid and c.metrics["beta"] > 0.1               # long beta: pays only when the market rises
    assert c.metrics["factor_r2"] > 0.5                      # the factors explain its P&L ...
    assert c.metrics["residual_sharpe"] < c.metrics["sharpe_net"] and c.metrics["residual_sharpe"] <= 0.0
    assert c.channels["factor_neutrality"] < 0               # ... and R4 charges the explained part


def test_planted_volume_variability_keeps_positive_cpcv_and_ic(verifier):
    c = verifier.score("rank(ts_std(volume, 20) / ts_mean(volume, 20))")
    assert c.valid and c.channels["cpcv"] > 0.3 and c.metrics["ic"] > 0.005 and c.channels["ic"] > 0
    assert c.channels["motif_guard"] == 0.0



@pytest.mark.parametrize("text, score, kind", [
    ("rank(close)", -1.0, "missing_tag"),
    ("<alpha>rank(close)</alpha> <alpha>rank(open)</alpha>", -1.0, "doubled_tag"),
    ("<alpha>rank(close</alpha>", -0.8, "syntax"),
    ("<alpha>ts_mean(close, 300)</alpha>", -0.8, "window"),
    ("<alpha>rank(cap)</alpha>", -0.8, "unavailable_field"),
    ("", -1.0, "missing_tag"),
    ("<alpha>adv" + "9" * 400 + "</alpha>", -0.8, "window"),
    ("<think>not <alpha>rank(close)</alpha></think> nothing after", -1.0, "missing_tag"),
])
def test_invalid_answers(verifier, text, score, kind):
    c = verifier.score(text, answer=True)
    assert not c.valid and c.error_type == kind and c.channels["cpcv"] == score
    assert all(v == 0 for k, v in c.channels.items() if k != "cpcv")


def test_weights_use_only_the_past_and_pnl_starts_at_next_open(sim_panels):
    train = sim_panels[0].slice_days(0, 400)
    from alphagym.dsl.evaluate import Evaluator
    from alphagym.dsl.parser import parse

    ast = parse("rank(ts_corr(close, volume, 10)) - rank(ts_delta(vwap, 3))")
    w = weights_from_signal(Evaluator(train).evaluate(ast))
    t = 250
    fields = {k: v.copy() for k, v in train.fields.items()}
    for v in fields.values():
        v[t + 1:] *= np.random.default_rng(1).uniform(0.5, 1.5, v[t + 1:].shape)
    moved = type(train)(train.dates, train.tickers, train.sectors, fields, train.in_holdout)
    w2 = weights_from_signal(Evaluator(moved).evaluate(ast))
    np.testing.assert_array_equal(w[: t + 1], w2[: t + 1])
    # P&L of the weights decided at close t is open(t+1) -> open(t+2), nothing else
    fwd = forward_open_returns(train["open"])
    pnl = gross_pnl(w, fwd)
    o = train["open"]
    assert pnl[t] == pytest.approx(np.nansum(w[t] * (o[t + 2] / o[t + 1] - 1)), rel=1e-12)
    closes = {k: v.copy() for k, v in train.fields.items()}
    closes["close"][t + 1] *= 1.5                              # the close after the decision does not matter
    assert gross_pnl(w, forward_open_returns(closes["open"]))[t] == pnl[t]


def test_nontrivial_baselines_score_at_or_below_zero(verifier):
    empty = verifier.score("", answer=True).total(PRIORITIES)
    constant = verifier.score("1").total(PRIORITIES)
    randoms = [verifier.score(random_formula(s)).total(PRIORITIES) for s in range(40)]
    assert empty <= 0 and constant <= 0
    assert np.mean(randoms) <= 0, np.mean(randoms)


def test_scores_are_deterministic_and_parallel_identical(sim_panels):
    texts = [f"<alpha>{random_formula(s)}</alpha>" for s in range(6)] + ["<alpha>rank(volume)</alpha>"]
    a = Verifier(sim_panels[0], P).score_group(texts, workers=1)
    b = Verifier(sim_panels[0], P).score_group(texts, workers=2)
    for x, y in zip(a, b):
        assert x.to_json()["channels"] == y.to_json()["channels"]
        assert x.valid == y.valid and x.reason == y.reason
        if x.pnl is not None:
            assert x.pnl.tobytes() == y.pnl.tobytes()


def test_an_evaluator_bug_makes_one_invalid_card_not_a_lost_group(sim_panels, monkeypatch, caplog):
    """A kernel exception (a bug of ours, e.g. a numba TypingError on a shape nobody foresaw) must not abort
    the group, or the rung scoring it: the answer gets an invalid card typed `evaluator_error`, logged."""
    from alphagym.verifier.verifier import EVALUATOR_ERROR

    v = Verifier(sim_panels[0], P)
    real = v.evaluator.evaluate

    def flaky(ast):
        if "ts_skew" in repr(ast):
            raise TypeError("kernel typing failure")
        return real(ast)

    monkeypatch.setattr(v.evaluator, "evaluate", flaky)
    cards = v.score_group(["<alpha>rank(ts_skew(volume, 20))</alpha>",
                           "<alpha>rank(volume / ts_mean(volume, 20))</alpha>"])
    assert not cards[0].valid and cards[0].error_type == EVALUATOR_ERROR
    assert "TypeError" in cards[0].reason and cards[0].channels["cpcv"] == P["verifier"]["cpcv"]["invalid_score"]
    assert cards[1].valid
    assert any("evaluator bug" in r.message for r in caplog.records)


def test_fuzzed_answers_never_hit_an_evaluator_bug(verifier):
    from alphagym.verifier.verifier import EVALUATOR_ERROR

    cards = verifier.score_group([f"<alpha>{random_formula(s)}</alpha>" for s in range(1000, 1300)])
    assert not [c.formula for c in cards if c.error_type == EVALUATOR_ERROR]
