"""The probe counts bets (`probe.probe`): formula families merge forms that trade one book, effective bets
count independent P&L, and the correlation-capped book is chosen on train numbers only."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from alphagym.books.metrics import effective_bets
from alphagym.config import load_params
from alphagym.probe.probe import (
    coverage,
    families,
    holdout_table,
    mean_abs_corr,
    pass_at_k,
    sampled_cards,
    sampled_families,
)
from alphagym.verifier.verifier import Verifier

P = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
X = "ts_max(volume / ts_mean(volume, 17), 20)"


def test_identical_answers_are_one_family_and_one_bet():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=500), rng.normal(size=500)
    assert families(["f", "f"], [a, a]) == 1
    assert effective_bets(np.stack([a, a])) == pytest.approx(1.0)
    assert mean_abs_corr([a, a]) == pytest.approx(1.0)
    # two independent answers: two families, about two bets
    assert families(["f", "g"], [a, b]) == 2
    assert effective_bets(np.stack([a, b])) == pytest.approx(2.0, abs=0.02)
    assert mean_abs_corr([a, b]) < 0.1
    # a sign flip is the same bet (|corr| = 1); merging is transitive
    assert families(["f", "g", "h"], [a, -a, b]) == 2
    assert families(["f", "g", "h"], [a, a + 0.1 * b, a + 0.2 * b]) == 1


@pytest.fixture(scope="module")
def verifier(sim_panels):
    return Verifier(sim_panels[0], P)


def test_rank_x_and_its_square_are_one_family(verifier):
    """`rank(X)` and `rank(rank(X) * rank(X))`: two canonical forms, one book."""
    cards = [verifier.score(f) for f in (f"rank({X})", f"rank(rank({X}) * rank({X}))", "rank(-ts_delta(close, 5))")]
    assert all(c.valid for c in cards) and len({c.canonical for c in cards}) == 3
    assert families([c.canonical for c in cards[:2]], [c.pnl for c in cards[:2]]) == 1
    assert families([c.canonical for c in cards], [c.pnl for c in cards]) == 2


def test_the_capped_book_is_chosen_on_train_numbers_only():
    """Changing every holdout P&L changes the capped book's holdout Sharpe, never which answers it holds;
    changing the train numbers does."""
    rng = np.random.default_rng(1)
    base = rng.normal(size=(4, 300))
    train = [base[0], base[0] + 0.01 * base[1], base[2], base[3]]      # answers 0 and 1: one bet on train
    answers = pd.DataFrame({"step": [5] * 4, "train_cpcv": [1.0, 0.9, 0.5, 0.1],
                            "train_turnover": [0.2, 0.2, 0.2, 0.01], "holdout_score": [0.1] * 4,
                            "holdout_valid": [True] * 4})
    market = rng.normal(size=250) * 0.01

    def table(held, train_pnls):
        books = {5: np.mean(list(held.values()), axis=0)}
        return holdout_table(answers, books, market, held, train_pnls, 0.02, 0.5).iloc[0]

    held = {i: rng.normal(size=250) * 0.01 for i in range(4)}
    t1 = table(held, train)
    other = {i: rng.normal(size=250) * 0.01 + 0.002 for i in range(4)}
    t2 = table(other, train)
    assert t1["capped_answers"] == t2["capped_answers"] == 2      # 0 and 2; 1 is 0's bet, 3 hardly trades
    assert t1["capped_holdout_sharpe"] != t2["capped_holdout_sharpe"]
    t3 = table(held, [base[0], base[1], base[2], base[3]])        # on train, 1 is now its own bet
    assert t3["capped_answers"] == 3
    assert t1["holdout_effective_bets"] == pytest.approx(effective_bets(np.stack(list(held.values()))))
    assert "planted_edges" not in t1.index           # no ground truth (real data): the coverage columns are absent


def test_pass_at_k_counts_briefs_with_one_good_answer(verifier):
    """A brief passes when one of its samples is valid with positive train CPCV; invalid or losing samples
    alone do not pass it."""
    good = next(f for f in ("rank(ts_std(volume, 20) / ts_mean(volume, 20))", "rank(-ts_delta(log(close), 5))")
                if verifier.score(f).channels["cpcv"] > 0)
    bad, broken = "-rank(ts_std(volume, 20) / ts_mean(volume, 20))", "rank(close"
    assert verifier.score(bad).channels["cpcv"] <= 0 or verifier.score(bad).valid is False
    samples = [[f"<alpha>{broken}</alpha>", f"<alpha>{good}</alpha>"],
               [f"<alpha>{broken}</alpha>", f"<alpha>{broken}</alpha>"],
               [f"<alpha>{bad}</alpha>"]]
    assert pass_at_k(sampled_cards(samples, verifier)) == pytest.approx(1 / 3)
    assert np.isnan(pass_at_k([]))


def test_sampled_families_pools_the_briefs_valid_samples(verifier):
    """Families among the sampled answers of all briefs: a window jitter (20 and 21 share a bucket) and a
    repeat in another brief are one family, a different bet a second, broken answers none."""
    vol = "rank(ts_std(volume, {}) / ts_mean(volume, {}))"
    rev = "rank(-ts_delta(log(close), 5))"
    samples = [[f"<alpha>{vol.format(20, 20)}</alpha>", f"<alpha>{vol.format(21, 21)}</alpha>"],
               [f"<alpha>{vol.format(20, 20)}</alpha>", "<alpha>rank(close</alpha>"],
               [f"<alpha>{rev}</alpha>"]]
    cards = sampled_cards(samples, verifier)
    assert [len(g) for g in cards] == [2, 2, 1]
    assert sampled_families(cards) == 2
    assert sampled_families(cards[:2]) == 1 and sampled_families([cards[1][1:]]) == 0


def test_coverage_counts_edges_expressed_and_answers_on_decoys():
    """Three planted edges and a trap; answers: two copies of edge a (one sign-flipped), a blend of b and
    noise that still correlates 0.7 with b, one on the trap, one independent: 2 of 3 edges expressed, one
    answer on the trap."""
    rng = np.random.default_rng(3)
    a, b, c, trap, other, noise = rng.normal(size=(6, 400))
    effects = {"a": ("edge", a), "b": ("edge", b), "c": ("edge", c), "t": ("trap", trap)}
    answers = [a, -a, 0.7 * b + 0.7 * noise, trap + 0.1 * noise, other]
    assert coverage(answers, effects) == {"planted_edges": 3, "planted_edges_expressed": 2, "decoy_trap_answers": 1}
    assert coverage([], effects)["planted_edges_expressed"] == 0
    assert coverage([other], {"a": ("edge", a)}) == {"planted_edges": 1, "planted_edges_expressed": 0,
                                                     "decoy_trap_answers": 0}


def test_the_train_book_table_counts_train_bets_and_caps_the_book():
    """Per checkpoint on train P&L only: two copies of one answer and an independent one make 1.8 effective
    bets (the participation ratio), the capped book drops the copy (and the invalid answer), and its train Sharpe is the
    Sharpe of the kept answers' mean P&L."""
    from alphagym.books.metrics import sharpe
    from alphagym.probe.probe import train_book_table

    rng = np.random.default_rng(3)
    a, b = rng.normal(0.05, 1, size=400), rng.normal(0.05, 1, size=400)
    answers = pd.DataFrame({"step": [1, 1, 1, 1], "valid": [True, True, True, False],
                            "train_cpcv": [1.0, 0.9, 0.5, -0.8], "train_turnover": [0.2, 0.2, 0.2, 0.0]})
    t = train_book_table(answers, [a, a, b, None], min_turnover=0.02, max_corr=0.5)
    (row,) = t.to_dict("records")
    # correlation eigenvalues 2, 1, 0: participation ratio (2 + 1) ** 2 / (4 + 1) = 1.8
    assert row["train_effective_bets"] == pytest.approx(1.8, abs=0.05)
    assert row["train_capped_sharpe"] == pytest.approx(sharpe((a + b) / 2))


def test_sampled_answers_are_scored_by_their_mean_and_their_spread():
    """Two briefs, three sampled answers each (one repeated, one invalid on the train window): a brief's score
    is the mean of its valid answers' holdout scores; the checkpoint's, the mean over briefs; the answers' sd,
    sqrt(mean within-brief variance / briefs). Each formula is scored once."""
    from types import SimpleNamespace

    from alphagym.probe.probe import sampled_holdout

    scores = {"a": 1.0, "b": 3.0, "c": -1.0}
    calls = []

    class Holdout:
        def score_one(self, formula):
            calls.append(formula)
            return SimpleNamespace(valid=True, metrics={"holdout_score": scores[formula]})

    rows = [{"step": 100, "brief": "h0", "formula": f} for f in ("a", "b", "b")] + \
           [{"step": 100, "brief": "h1", "formula": f} for f in ("c", None, "a")]
    [row] = sampled_holdout(rows, Holdout()).to_dict("records")
    m0, m1 = (1 + 3 + 3) / 3, (-1 + 1) / 2
    assert row["holdout_score_sampled"] == pytest.approx((m0 + m1) / 2)
    v0, v1 = np.var([1, 3, 3], ddof=1), np.var([-1, 1], ddof=1)
    assert row["holdout_answer_sd"] == pytest.approx(np.sqrt((v0 + v1) / 2 / 2))
    assert row["holdout_score_sampled_low"] <= row["holdout_score_sampled"] <= row["holdout_score_sampled_high"]
    assert sorted(calls) == ["a", "b", "c"]
