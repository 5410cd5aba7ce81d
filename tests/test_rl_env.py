"""The verifier environment the trainer scores with: cached score cards equal uncached ones after the
archive changed, the core score is R1, and commit adds only valid answers to the archive."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alphagym.briefs.catalogue import load_catalogue
from alphagym.config import load_params
from alphagym.rl.env import VerifierEnv
from alphagym.verifier.verifier import Verifier

ROOT = Path(__file__).resolve().parents[1]
ANSWERS = ["<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",
           "<alpha>rank(-ts_delta(close, 5))</alpha>",
           "<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",
           "<alpha>rank(close</alpha>",
           "<alpha>-rank(ts_corr(close, volume, 10))</alpha>"]


def test_cached_scores_equal_uncached_after_the_archive_changed(sim_panels, tmp_path):
    params = load_params(ROOT / "params.yaml")
    train = sim_panels[0]
    cat = load_catalogue()
    brief = next(iter(_briefs(params, cat)))
    cached = VerifierEnv(Verifier(train, params), cat, 0.5, cache=100)
    plain = VerifierEnv(Verifier(train, params), cat, 0.5)
    rates = []
    for round_ in range(2):                       # the second round hits the cache; the archive has grown
        a = cached.score(ANSWERS, brief)
        b = plain.score(ANSWERS, brief)
        rates.append(cached.step_metrics()["verifier/cache_hit_rate"])
        for x, y in zip(a, b):
            assert x.valid == y.valid and x.core == y.core and x.canonical == y.canonical
            assert x.channels == y.channels, round_
            assert x.core == x.channels["cpcv"]
        n = len(cached.verifier.archive)
        cached.commit(a)
        plain.commit(b)
        assert len(cached.verifier.archive) == n + sum(s.valid for s in a)
    # the repeated answer in round 1, then all but the one that does not parse (parsing it is its scoring)
    assert cached.verifier.cache_hits == 1 + len(ANSWERS) - 1
    assert rates == [1 / len(ANSWERS), 1 - 1 / len(ANSWERS)]   # per step, as the trainer logs it
    assert plain.step_metrics() == {"verifier/cache_hit_rate": 0.0}
    # the second round saw its own first-round answers in the archive: novelty fell
    assert a[1].channels["novelty_pnl"] < 0.1
    cached.save(tmp_path)
    again = VerifierEnv(Verifier(train, params), cat, 0.5)
    again.load(tmp_path)
    assert len(again.verifier.archive) == len(cached.verifier.archive)
    np.testing.assert_allclose(again.verifier.archive.rows, cached.verifier.archive.rows)


def _briefs(params, cat):
    from alphagym.briefs.generate import generate

    return generate(cat, params["briefs"], int(params["seed"]))[0][:1]


def test_the_card_cache_is_keyed_by_the_parsed_formula(sim_panels):
    """Answers that differ only in spacing, letter case or redundant parentheses are one formula: the second
    is scored from the first's card, with its own text, and equals its uncached score; another window is
    another formula."""
    params = load_params(ROOT / "params.yaml")
    v, plain = Verifier(sim_panels[0], params), Verifier(sim_panels[0], params)
    v.enable_cache(10)
    a = v.score_one("<alpha>rank(-ts_delta(close, 5))</alpha>", answer=True)
    b_text = "<alpha> Rank( -TS_DELTA( close ,5 ) ) </alpha>"
    b = v.score_one(b_text, answer=True)
    assert v.cache_hits == 1 and v.cache_lookups == 2
    assert b.text == b_text and b.formula != a.formula and b.timings["evaluate"] == 0.0
    ref = plain.score_one(b_text, answer=True)
    assert b.channels == ref.channels and b.metrics == ref.metrics and b.canonical == ref.canonical
    v.score_one("<alpha>rank(-ts_delta(close, 6))</alpha>", answer=True)
    assert v.cache_hits == 1 and v.cache_lookups == 3


def test_the_env_records_every_distinct_valid_formula_and_keeps_it_across_a_resume(sim_panels, tmp_path):
    """`commit` records each valid formula once with its train CPCV and turnover (the archive book's pool);
    a checkpoint carries the record, and one saved without it resumes with an empty record."""
    from alphagym.rl.env import WRITTEN

    params = load_params(ROOT / "params.yaml")
    cat = load_catalogue()
    brief = next(iter(_briefs(params, cat)))
    env = VerifierEnv(Verifier(sim_panels[0], params), cat, 0.5)
    scored = env.score(ANSWERS, brief)
    env.commit(scored)
    env.commit(env.score(ANSWERS[:2], brief))
    valid = {s.card.formula: s for s in scored if s.valid}
    assert set(env.written) == set(valid) and len(env.written) == 3      # the repeat and the broken one: once, none
    for f, rec in env.written.items():
        assert rec["train_cpcv"] == valid[f].core and rec["train_turnover"] == valid[f].metrics["turnover"]
    env.save(tmp_path)
    again = VerifierEnv(Verifier(sim_panels[0], params), cat, 0.5)
    again.load(tmp_path)
    assert again.written == env.written
    assert list(again.recent) == list(env.recent) and len(env.recent) == 2     # R13's memory, both steps
    (tmp_path / WRITTEN).unlink()
    again.load(tmp_path)
    assert again.written == {}


def test_the_env_sets_crowding_over_the_whole_step(sim_panels):
    """`step_channels` charges each valid answer its family's share among the other groups' answers and the
    committed steps'; the groups' other channels are untouched (no quality gate: the shares alone)."""
    params = load_params(ROOT / "params.yaml", ["verifier.crowding.max_factor_r2=null"])
    cat = load_catalogue()
    brief = next(iter(_briefs(params, cat)))
    env = VerifierEnv(Verifier(sim_panels[0], params), cat, 0.5)
    g1, g2 = env.score(ANSWERS[:2], brief), env.score(ANSWERS[2:], brief)
    before = [dict(s.channels) for s in g1 + g2]
    env.step_channels([g1, g2])
    # g1: volume (shared with g2's answer 0) and reversal; g2: volume, broken, corr formula
    assert g1[0].channels["crowding"] == pytest.approx(-1 / 2) and g1[1].channels["crowding"] == 0.0
    assert g2[0].channels["crowding"] == pytest.approx(-1 / 2) and g2[1].channels["crowding"] == 0.0
    assert g2[2].channels["crowding"] == 0.0
    step = ("crowding", "marginal")
    for s, b in zip(g1 + g2, before):
        assert {k: v for k, v in s.channels.items() if k not in step} == {k: v for k, v in b.items()
                                                                            if k not in step}
        # R16 against the empty book before the first commit: the answer's own R1
        assert s.channels["marginal"] == s.channels["cpcv"]
    env.commit(g1 + g2)
    paying = [s for s in g1 + g2 if s.valid and s.channels["cpcv"] > 0]
    assert len(env.book) >= min(1, len(paying))
    g3 = env.score(ANSWERS[:1], brief)
    env.step_channels([g3])                      # alone in its step: only the committed step counts
    assert g3[0].channels["crowding"] == pytest.approx(-2 / 4)
    assert g3[0].canonical in env.book.labels     # it paid: a member written again adds nothing to the book
    assert g3[0].channels["marginal"] == pytest.approx(0.0, abs=1e-9) and g3[0].channels["cpcv"] > 0


def test_the_quality_gate_charges_broken_losing_and_factor_answers_in_full(sim_panels):
    """With `max_factor_r2` (params.yaml: 0.5), rarity relieves only a valid answer with train CPCV > 0 whose
    P&L the factors explain at most that share of: the broken answer and any losing or factor-bound one pay
    -weight, the others their family's share, exactly as without the gate (negative control: ungated, the
    broken answer gets 0)."""
    cat = load_catalogue()
    gated_p = load_params(ROOT / "params.yaml")
    assert gated_p.verifier.crowding.max_factor_r2 == 0.5
    plain_p = load_params(ROOT / "params.yaml", ["verifier.crowding.max_factor_r2=null"])
    brief = next(iter(_briefs(gated_p, cat)))
    out = {}
    for name, p in (("gated", gated_p), ("plain", plain_p)):
        env = VerifierEnv(Verifier(sim_panels[0], p), cat, 0.5)
        g1, g2 = env.score(ANSWERS[:2], brief), env.score(ANSWERS[2:], brief)
        env.step_channels([g1, g2])
        out[name] = g1 + g2
    gated, plain = out["gated"], out["plain"]
    assert not gated[3].valid and gated[3].channels["crowding"] == -1.0 and plain[3].channels["crowding"] == 0.0
    for g, q in zip(gated, plain, strict=True):
        own = g.valid and g.core > 0 and g.metrics["factor_r2"] <= 0.5
        assert g.channels["crowding"] == (q.channels["crowding"] if own else -1.0), g.canonical
    # the volume answer is a bet of its own on this panel; the ts_corr answer loses on train
    assert gated[0].core > 0 and gated[0].metrics["factor_r2"] <= 0.5
    assert gated[0].channels["crowding"] == pytest.approx(-1 / 2)
    assert gated[4].core <= 0 and gated[4].channels["crowding"] == -1.0


def test_a_rungs_reward_weights_replace_the_verifiers_priorities(sim_panels):
    """The reward rungs change only `reward_weights`: their env rewards R14 and R13, the others' logs them at
    priority 0; a weight for a channel the verifier lacks is a config error naming it."""
    from alphagym.errors import ConfigError
    from alphagym.rungs import resolve_rung

    params = load_params(ROOT / "params.yaml")
    cat = load_catalogue()
    both = resolve_rung(params, "cispo_repo_both").recipe
    assert both.reward_weights == {"compliance": 1.0, "crowding": 1.0}
    assert resolve_rung(params, "cispo_repo").recipe.reward_weights == {}
    env = VerifierEnv(Verifier(sim_panels[0], params), cat, 0.5, reward_weights=both.reward_weights)
    plain = VerifierEnv(Verifier(sim_panels[0], params), cat, 0.5)
    assert plain.priorities["compliance"] == plain.priorities["crowding"] == 0.0
    assert env.priorities == {**plain.priorities, "compliance": 1.0, "crowding": 1.0}
    with pytest.raises(ConfigError, match="reward_weights.*complience"):
        load_params(ROOT / "params.yaml", ["rl.recipe.reward_weights={complience: 1.0}"])


def test_a_cached_card_is_not_changed_by_what_is_done_to_the_card_handed_out(sim_panels):
    """The cache hands out copies: changing a returned card's channels, metrics or P&L leaves the next hit
    as it was."""
    params = load_params(ROOT / "params.yaml", ["tracking.enabled=false"])
    v = Verifier(sim_panels[0], params)
    v.enable_cache(10)
    first = v.score_one(ANSWERS[0], answer=True)
    kept = (dict(first.channels), dict(first.metrics), first.pnl.copy())
    first.channels["cpcv"] = 99.0
    first.metrics["turnover"] = -1.0
    first.pnl[:] = 0.0
    again = v.score_one(ANSWERS[0], answer=True)
    assert v.cache_hits == 1
    assert again.channels == kept[0] and again.metrics == kept[1] and np.array_equal(again.pnl, kept[2])
