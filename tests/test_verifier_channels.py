"""Worked examples of the verifier issue, one per rule, on the pure channel functions."""

from dataclasses import replace

import numpy as np
import pytest

from alphagym import params as P
from alphagym.dsl.parser import parse
from alphagym.engine.costs import train_cost_bps
from alphagym.engine.cpcv import cpcv_statistic, make_slices, masked_sharpes
from alphagym.verifier import channels as ch

# The worked examples' own config (the values the examples were written for, which are also params.yaml's
# defaults): retuning params.yaml does not break a test of a pure function.
V = {
    "costs": {"train": P.TrainCosts(fee_bps=2.0, slippage_bps=1.0, half_spread_bps=0.5, impact_bps=0.5)},
    "factor_neutrality": P.FactorNeutrality(scale=0.4, clip=3.0, momentum_skip=21, momentum_lookback=252,
                                            reversal_days=5, lowvol_days=63, size_adv_days=20),
    "turnover": P.Turnover(cap=0.5, slope=2.0),
    "min_turnover": P.MinTurnover(free=0.06, ramp_to=0.03, invalid_below=0.02),
    "ic": P.Ic(scale=20.0, weight=0.2, cap_when_cpcv_nonpositive=0.05),
    "novelty_pnl": P.NoveltyPnl(weight=0.4, duplicate_corr=0.95, duplicate_penalty=-0.4, capacity=1024),
    "novelty_syntax": P.NoveltySyntax(weight=0.2, same_group_penalty=-0.3, same_book_corr=0.95),
    "complexity": P.Complexity(free_nodes=24, per_node=-0.02),
    "format": P.Format(reasoning_bonus=0.05),
    "pbo": P.Pbo(floor=-0.48),
}


def test_cpcv_worked_examples():
    assert cpcv_statistic(np.full(15, 0.8)) == pytest.approx(0.8, abs=1e-12)
    assert cpcv_statistic(np.array([3.0] * 3 + [-0.2] * 12)) == pytest.approx(-0.20, abs=1e-12)


def test_cpcv_slices_purge_and_embargo():
    s = make_slices(600, blocks=6, test_blocks=2, purge=10, embargo=5)
    assert s.count == 15
    assert (s.test.sum(axis=1) == 200).all()
    first = s.test[0]                     # blocks 0 and 1 = sessions 0..199
    assert first[:200].all() and not first[200:].any()
    assert not s.insample[0][:205].any()  # test blocks, then 5 embargoed sessions
    assert s.insample[0][205:].all()
    mid = s.insample[np.flatnonzero([t[200] and t[400] for t in s.test])[0]]   # blocks 2 and 4 tested
    assert not mid[190:200].any() and mid[:190].all()                          # 10 purged before block 2
    assert not (s.test & s.insample).any()


def test_masked_sharpe_matches_direct():
    rng = np.random.default_rng(0)
    x = rng.normal(0.001, 0.01, 600)
    s = make_slices(600)
    got = masked_sharpes(x, s.test)
    want = [x[m].mean() / x[m].std() * np.sqrt(252) for m in s.test]
    np.testing.assert_allclose(got, want, rtol=1e-10)
    assert masked_sharpes(np.zeros(600), s.test).tolist() == [0.0] * 15       # std 0 -> Sharpe 0


def S(**kw) -> ch.AnswerStats:
    """An answer's statistics with the given fields and neutral values elsewhere."""
    base = dict(cpcv=1.0, raw_sharpe=0.0, residual_sharpe=0.0, turnover=0.3, ic=0.0, nodes=10, reasoning=False,
                motif=False)
    return ch.AnswerStats(**{**base, **kw})


def test_costs_default_to_four_bps_per_unit_turnover():
    assert train_cost_bps(V["costs"]["train"]) == pytest.approx(4.0)


def test_factor_neutrality_example():
    assert ch.factor_neutrality(S(raw_sharpe=1.5, residual_sharpe=0.3), V["factor_neutrality"]) == pytest.approx(-0.48)
    assert ch.factor_neutrality(S(raw_sharpe=0.5, residual_sharpe=0.9), V["factor_neutrality"]) == 0.0
    assert ch.factor_neutrality(S(raw_sharpe=9.0, residual_sharpe=0.0), V["factor_neutrality"]) == pytest.approx(-1.2)


def test_turnover_channels():
    assert ch.turnover_penalty(S(turnover=0.4), V["turnover"]) == 0.0
    assert ch.turnover_penalty(S(turnover=0.8), V["turnover"]) == pytest.approx(-0.6)
    m = V["min_turnover"]
    assert ch.min_turnover(S(turnover=0.06), m) == 0.0 and ch.min_turnover(S(turnover=0.2), m) == 0.0
    assert ch.min_turnover(S(turnover=0.045), m) == pytest.approx(-0.5)
    assert ch.min_turnover(S(turnover=0.03), m) == -1.0 and ch.min_turnover(S(turnover=0.025), m) == -1.0


def test_ic_channel():
    assert ch.ic_channel(S(ic=0.05, cpcv=1.0), V["ic"]) == pytest.approx(0.2)
    assert ch.ic_channel(S(ic=0.5, cpcv=1.0), V["ic"]) == pytest.approx(0.2)
    assert ch.ic_channel(S(ic=-0.01, cpcv=1.0), V["ic"]) == pytest.approx(-0.04)
    assert ch.ic_channel(S(ic=0.05, cpcv=0.0), V["ic"]) == pytest.approx(0.05)       # at most 0.05 while CPCV <= 0


def test_novelty_channels():
    assert ch.novelty_pnl(S(max_corr=0.25), V["novelty_pnl"]) == pytest.approx(0.3)
    assert ch.novelty_pnl(S(max_corr=0.95), V["novelty_pnl"]) == -0.4
    assert ch.novelty_syntax(S(max_corr=0.5), V["novelty_syntax"]) == pytest.approx(0.1)
    assert ch.novelty_syntax(S(max_corr=0.5, seen_before=True), V["novelty_syntax"]) == 0.0
    seen_thrice = S(max_corr=0.5, seen_before=True, same_in_group=3)
    assert ch.novelty_syntax(seen_thrice, V["novelty_syntax"]) == pytest.approx(-0.9)
    assert ch.novelty_syntax(S(max_corr=0.96), V["novelty_syntax"]) == 0.0       # an unseen form, a seen book


def test_complexity_and_format():
    assert ch.complexity(S(nodes=24), V["complexity"]) == 0.0
    assert ch.complexity(S(nodes=30), V["complexity"]) == pytest.approx(-0.12)
    assert ch.format_bonus(S(reasoning=True), V["format"]) == 0.05
    assert ch.format_bonus(S(reasoning=False), V["format"]) == 0.0


def test_pbo_penalty():
    # answer 0 is first in-sample and last out of sample on every slice: the full floor
    ins = np.array([[3.0] * 15] + [[1.0 - 0.1 * i] * 15 for i in range(9)])
    oos = np.array([[-5.0] * 15] + [[1.0] * 15 for _ in range(9)])
    pen = ch.pbo_penalties(ins, oos, V["pbo"])
    assert pen[0] == pytest.approx(-0.48)
    assert (pen >= -0.48).all() and (pen <= 0).all()
    assert ch.pbo_penalties(ins[:1], oos[:1], V["pbo"]).tolist() == [0.0]
    consistent = ch.pbo_penalties(ins, ins, V["pbo"])
    assert (consistent == 0).all()


@pytest.mark.parametrize("formula, bare", [
    ("ts_mean(close, 5)", True), ("rank(ts_std(volume, 20))", True), ("-1 * rank(ts_delta(close, 3))", True),
    ("sign(scale(-ts_max(open, 9)))", True), ("rank(ts_std(volume, 20) / ts_mean(volume, 20))", False),
    ("rank(ts_mean(close / open, 5))", False), ("rank(close)", False),
])
def test_bare_motif_detection(formula, bare):
    assert ch.is_bare_motif(parse(formula)) is bare


def test_archive_fifo_and_roundtrip(tmp_path):
    from alphagym.verifier.archive import NoveltyArchive

    rng = np.random.default_rng(0)
    arch = NoveltyArchive(50, capacity=3)
    series = [rng.normal(size=50) for _ in range(4)]
    for i, s in enumerate(series):
        arch.add(s, f"form{i}", f"book{i}")
    assert len(arch) == 3 and not arch.seen("form0") and arch.seen("form3")     # the oldest left
    assert arch.max_abs_corr(series[3]) == pytest.approx(1.0)
    assert arch.max_abs_corr(series[0]) < 0.9
    arch.add(np.zeros(50), "flat", "flat")                                       # a flat book is not added
    assert not arch.seen("flat")
    arch.save(tmp_path / "a.npz")
    back = NoveltyArchive.load(tmp_path / "a.npz")
    assert back.labels == arch.labels and np.array_equal(back.rows, arch.rows)
    assert back.canonicals == arch.canonicals
    back.add(series[0], "form0", "again")
    assert not back.seen("form1") and back.seen("form0")


def test_rank_rooted_signal_skips_the_second_rank_bit_for_bit(sim_panels):
    """Ranking the evaluator's rank again returns it unchanged, so the book may skip it (ranked=True)."""
    from alphagym.dsl.evaluate import Evaluator, is_rank_root
    from alphagym.engine.book import weights_from_signal

    train, _ = sim_panels
    ev = Evaluator(train)
    for f in ("rank(volume)", "rank(ts_delta(close, 3) > 0)", "rank(returns)", "rank(ts_rank(volume, 5))"):
        ast = parse(f)
        assert is_rank_root(ast)
        sig = ev.evaluate(ast)
        np.testing.assert_array_equal(weights_from_signal(sig, 5, ranked=True), weights_from_signal(sig, 5))
    assert not is_rank_root(parse("-rank(volume)"))


def test_book_kernels_match_plain_numpy():
    """gross P&L, daily IC and demean/scale (numba row loops) against the plain numpy formulas."""
    from alphagym.engine.book import daily_ic, gross_pnl, weights_from_signal

    rng = np.random.default_rng(3)
    sig = rng.normal(size=(60, 9))
    sig[rng.random(sig.shape) < 0.1] = np.nan
    sig[7] = np.nan
    fwd = rng.normal(0, 0.01, size=(60, 9))
    fwd[rng.random(fwd.shape) < 0.1] = np.nan
    w = weights_from_signal(sig, 3)
    def rank_row(r):
        n = np.sum(~np.isnan(r))
        return [np.nan if np.isnan(v) else (np.sum(r < v) + (np.sum(r == v) - 1) / 2) / (n - 1) for v in r]

    ranks = np.array([rank_row(r) for r in sig])
    dev = ranks - np.nanmean(ranks, axis=1, keepdims=True)
    expect = np.nan_to_num(dev / np.nansum(np.abs(dev), axis=1, keepdims=True))
    full = np.isfinite(sig).sum(axis=1) >= 3
    np.testing.assert_allclose(w[full], expect[full], atol=1e-15)
    assert (w[7] == 0).all()
    np.testing.assert_allclose(gross_pnl(w, fwd), np.nansum(w[:-2] * fwd[:-2], axis=1), rtol=1e-12, atol=1e-18)
    ic = daily_ic(w, fwd)
    for t in range(58):
        ok = (w[t] != 0) & np.isfinite(fwd[t])
        ref = np.corrcoef(w[t, ok], fwd[t, ok])[0, 1] if ok.sum() >= 3 else np.nan
        assert (np.isnan(ic[t]) and np.isnan(ref)) or abs(ic[t] - ref) < 1e-12


def test_the_channel_registry_is_the_one_list():
    """Every channel has one row (`ch.REGISTRY`, in the order of `params.REWARD_CHANNELS`): the priorities, the
    zero score card and the params blocks follow it, each function's docstring opens with its R-number, and
    docs/verifier.md's list is what the registry renders (tests/test_docs_rendered.py); a channel missing from
    any of them fails here."""
    from alphagym.params import REWARD_CHANNELS, Priorities
    from alphagym.params import Verifier as VerifierParams
    from alphagym.verifier.verifier import _zero_channels

    ids = [c.id for c in ch.REGISTRY]
    assert tuple(ids) == REWARD_CHANNELS == ch.CHANNELS
    assert [c.r for c in ch.REGISTRY] == [f"R{i}" for i in range(1, len(ids) + 1)]
    assert list(Priorities.model_fields) == ids
    assert list(_zero_channels()) == ids
    for c in ch.REGISTRY:
        assert c.fn.__doc__ and c.fn.__doc__.split()[0] == f"{c.r}:", c.id
        assert c.doc and not c.doc.startswith("R"), c.id
        assert c.id in VerifierParams.model_fields and c.scope in ch.SCOPES, c.id
        assert c.needs is None or (c.needs in ch.AnswerStats.__dataclass_fields__ and c.off), c.id
    assert {c.scope for c in ch.REGISTRY if c.id in ("cpcv", "ic", "jepa_stress")} == {"answer"}


def test_score_channels_loops_over_the_registry_with_skips_and_the_guard():
    """`score_channels` sets each channel of a scope from the statistics, lists a channel whose `needs` is
    missing under `skipped`, and under the motif guard caps every channel of the scope at 0 (R10 itself -1)."""
    from pathlib import Path

    from alphagym.config import load_params

    cfg = load_params(Path(__file__).resolve().parents[1] / "params.yaml").verifier
    chans, skipped = dict.fromkeys(ch.CHANNELS, 0.0), {}
    s = S(cpcv=1.2, ic=0.05, nodes=30, reasoning=True, turnover=0.8)
    ch.score_channels(s, cfg, "answer", chans, skipped)
    assert chans["cpcv"] == 1.2 and chans["ic"] == pytest.approx(0.2) and chans["format"] == 0.05
    assert chans["turnover"] == pytest.approx(-0.6) and chans["complexity"] == pytest.approx(-0.12)
    assert set(skipped) == {"jepa_stress"} and chans["jepa_stress"] == 0.0
    ch.score_channels(s, cfg, "archive", chans, skipped)
    assert set(skipped) == {"jepa_stress", "novelty_pnl", "novelty_syntax"}
    guarded, skipped = dict.fromkeys(ch.CHANNELS, 0.0), {}
    ch.score_channels(replace(s, motif=True, max_corr=0.2), cfg, "answer", guarded, skipped)
    ch.score_channels(replace(s, motif=True, max_corr=0.2), cfg, "archive", guarded, skipped)
    assert guarded["motif_guard"] == cfg.motif_guard.penalty < 0
    assert max(guarded.values()) == 0.0 and guarded["turnover"] == chans["turnover"]
    assert set(skipped) == {"jepa_stress"}


def test_crowding_worked_example_where_one_family_dominates():
    """R13 on a hand-made step of three briefs, family A everywhere: an answer pays its family's share among
    the other briefs' valid answers and the recent steps', so a group of A's and one B still varies, and a
    group of four A's (which GDPO would see as flat on any per-group diversity) is charged for A's crowding."""
    cfg = P.Crowding(weight=1.0, window=20, same_bet_corr=None, max_factor_r2=None)
    fams = [["A", "A", "B", None], ["A", "A", "A", "A"], ["A", "C", "C", "A"]]
    recent = {"A": 6, "B": 1, "D": 1}
    out = ch.crowding(fams, recent, cfg)
    # group 0 sees 8 other answers this step (A x6, C x2) and 8 recent ones (A 6, B 1, D 1): 16 in all
    assert out[0] == pytest.approx([-12 / 16, -12 / 16, -1 / 16, 0.0])
    # group 1 sees 7 (A 4 of group 0's 2 and group 2's 2, B 1, C 2) + 8 recent = 15
    assert out[1] == pytest.approx([-(4 + 6) / 15] * 4)
    # group 2 sees 7 (A 6, B 1) + 8 = 15
    assert out[2] == pytest.approx([-(6 + 6) / 15, 0.0, 0.0, -(6 + 6) / 15])
    assert len(set(out[0][:3])) == 2                      # varies within a group whose families differ
    assert ch.crowding([["A"]], {}, cfg) == [[0.0]]        # nothing to compare with: 0
    half = P.Crowding(weight=0.5, window=20, same_bet_corr=None, max_factor_r2=None)
    assert ch.crowding(fams, recent, half)[1][0] == pytest.approx(-0.5 * 10 / 15)


def test_crowding_gate_worked_example_a_rare_trap_pays_in_full():
    """The quality gate on the hand-made step above: group 0's rare B is a trap (not eligible) and pays the
    full -weight instead of -1/16; its None (invalid) pays -weight instead of 0; the eligible answers pay
    their shares unchanged, and the ineligible ones' families still count for the others."""
    cfg = P.Crowding(weight=1.0, window=20, same_bet_corr=None, max_factor_r2=0.5)
    fams = [["A", "A", "B", None], ["A", "A", "A", "A"], ["A", "C", "C", "A"]]
    ok = [[True, True, False, False], [True] * 4, [True, False, True, True]]
    recent = {"A": 6, "B": 1, "D": 1}
    out = ch.crowding(fams, recent, cfg, ok)
    assert out[0] == pytest.approx([-12 / 16, -12 / 16, -1.0, -1.0])
    assert out[1] == pytest.approx([-(4 + 6) / 15] * 4)
    assert out[2] == pytest.approx([-(6 + 6) / 15, -1.0, 0.0, -(6 + 6) / 15])
    assert ch.crowding(fams, recent, cfg, None) == ch.crowding(fams, recent, cfg)   # no mask: the shares


def test_same_bet_families_merge_forms_whose_books_move_together():
    """R13's families by bet: two canonical forms whose train P&L correlate 0.97 are one family (the second
    takes the first's name), a P&L at |corr| 0.5 is its own; a sign flip is the same bet; an invalid answer
    stays without a family; families from earlier steps (`known`) are matched; without a threshold the
    canonical forms stand."""
    from alphagym.rl.env import bet_families

    rng = np.random.default_rng(0)
    a = rng.normal(size=500)
    noise = rng.normal(size=500)
    twin = 0.97 * (a - a.mean()) / a.std() + np.sqrt(1 - 0.97**2) * (noise - noise.mean()) / noise.std()
    half = 0.5 * (a - a.mean()) / a.std() + np.sqrt(1 - 0.25) * (noise - noise.mean()) / noise.std()
    assert np.corrcoef(a, twin)[0, 1] > 0.95 and abs(np.corrcoef(a, half)[0, 1]) < 0.6
    known: dict[str, np.ndarray] = {}
    fams = bet_families(["A", "B", "C", None, "D"], [a, twin, half, None, -a], known, 0.9)
    assert fams == ["A", "A", "C", None, "A"]
    assert set(known) == {"A", "C"}
    # the next step: a new form on C's book is C; an unseen book is its own family
    assert bet_families(["E", "F"], [half * 2.0 + 1.0, rng.normal(size=500)], known, 0.9) == ["C", "F"]
    assert bet_families(["A", "B"], [a, twin], {}, None) == ["A", "B"]


def test_crowding_charges_two_forms_of_one_bet_as_one_family(tmp_path):
    """In the environment: three briefs' answers written as two canonical forms of one book are one crowded
    family for R13 (each pays for the other form's answers), an independent book is not charged for them; the
    families and their P&L survive a checkpoint round trip."""
    from collections import deque
    from types import SimpleNamespace

    from alphagym.rl.env import Scored, VerifierEnv
    from alphagym.verifier.archive import MarginalBook, NoveltyArchive

    rng = np.random.default_rng(1)
    a, b = rng.normal(size=300), rng.normal(size=300)
    slices = make_slices(300)

    def scored(canon, pnl):
        return Scored(True, {"cpcv": 1.0}, 1.0, canon, card=SimpleNamespace(pnl=pnl, formula=canon))

    def env(same_bet_corr):
        e = VerifierEnv.__new__(VerifierEnv)
        e.verifier = SimpleNamespace(archive=NoveltyArchive(300, 16),
                                     cfg=SimpleNamespace(crowding=P.Crowding(weight=1.0, window=5,
                                                                             same_bet_corr=same_bet_corr,
                                                                             max_factor_r2=None),
                                                         marginal=P.Marginal(size=4, max_corr=0.5)),
                                     scorer=SimpleNamespace(cpcv_of_net=lambda x: cpcv_statistic(
                                         masked_sharpes(x, slices.test), 0.5)))
        e.recent, e.bets, e.written = deque(maxlen=5), {}, {}
        e.book = MarginalBook(300, 4, 0.5)
        return e

    def step(e):
        groups = [[scored("form1", a), scored("other", b)], [scored("form2", a * 1.5)], [scored("form1", a)]]
        e.step_channels(groups)
        return groups

    merged, apart = step(env(0.9)), step(env(None))
    # by bet: form1 in group 0 sees 2 of the 2 other answers on its bet (form2, form1): -2/2
    assert merged[0][0].channels["crowding"] == pytest.approx(-1.0)
    assert merged[1][0].family == "form1" and merged[1][0].channels["crowding"] == pytest.approx(-2 / 3)
    assert merged[0][1].channels["crowding"] == 0.0          # the independent book is not crowded
    # by canonical form alone, form2 is uncrowded and form1 sees only its own form
    assert apart[1][0].channels["crowding"] == 0.0 and apart[0][0].channels["crowding"] == pytest.approx(-0.5)
    e = env(0.9)
    groups = step(e)
    e.commit([s for g in groups for s in g])
    assert e.recent[-1] == {"form1": 3, "other": 1} and set(e.bets) == {"form1", "other"}
    e.save(tmp_path)
    again = env(0.9)
    again.load(tmp_path)
    assert list(again.recent) == list(e.recent) and set(again.bets) == set(e.bets)
    assert all(np.array_equal(again.bets[k], e.bets[k]) for k in e.bets)
    # R16's book too: "form1" and "other" paid (CPCV 1.0) and are distinct bets; "form2" is form1's bet
    assert sorted(e.book.labels) == ["form1", "other"] and again.book.labels == e.book.labels
    assert np.array_equal(again.book.rows, e.book.rows) and np.array_equal(again.book.cpcvs, e.book.cpcvs)


def _marginal_case():
    """Three book members with drifts, an answer that copies one (scaled), one with an edge of its own."""
    rng = np.random.default_rng(5)
    t = 1000
    slices = make_slices(t)

    def cpcv_of(x):
        return cpcv_statistic(masked_sharpes(x, slices.test), 0.5)

    members = np.stack([0.0006 + 0.01 * rng.standard_normal(t) for _ in range(3)])
    copy = 2.0 * members[1]
    own = 0.0008 + 0.01 * rng.standard_normal(t)
    return members, copy, own, cpcv_of


def test_r16_pays_what_an_answer_adds_to_the_book_not_its_own_backtest():
    """A copy of a member (scaled: the same bet at twice the size) earns about 0; an answer with an
    independent edge earns about its own CPCV; an invalid answer its R1; an empty book pays R1."""
    members, copy, own, cpcv_of = _marginal_case()
    cfg = P.Marginal(size=20, max_corr=0.5)
    copy_cpcv, own_cpcv = cpcv_of(copy), cpcv_of(own)
    assert copy_cpcv > 0.5 and own_cpcv > 0.5                      # both pay on their own backtest
    assert abs(ch.marginal(copy, members, copy_cpcv, True, cpcv_of, cfg)) < 1e-9
    assert ch.marginal(own, members, own_cpcv, True, cpcv_of, cfg) == pytest.approx(own_cpcv, abs=0.15)
    assert ch.marginal(own, np.zeros((0, len(own))), own_cpcv, True, cpcv_of, cfg) == own_cpcv
    assert ch.marginal(None, members, -1.0, False, cpcv_of, cfg) == -1.0
    # a copy with its own noise on top keeps only what the noise earns: far below its CPCV
    noisy = copy + 0.002 * np.random.default_rng(6).standard_normal(len(copy))
    assert ch.marginal(noisy, members, cpcv_of(noisy), True, cpcv_of, cfg) < 0.5 * cpcv_of(noisy)


def test_r16_negative_control_plain_cpcv_pays_the_copy():
    """The same case scored by plain CPCV: the copy earns as much as the independent edge, so the test above
    could not pass on R1."""
    members, copy, own, cpcv_of = _marginal_case()
    assert cpcv_of(copy) > 0.5 * cpcv_of(own)
    assert not abs(cpcv_of(copy)) < 1e-9


def test_r16_book_admits_paying_distinct_bets_and_keeps_the_best():
    from alphagym.verifier.archive import MarginalBook

    members, copy, own, cpcv_of = _marginal_case()
    book = MarginalBook(len(own), size=2, max_corr=0.5)
    assert book.offer(members[0], 0.8, "a") and book.offer(members[1], 0.6, "b")
    assert not book.offer(copy, 1.5, "c")                          # the same bet as b: |corr| 1
    assert not book.offer(own, -0.1, "d")                          # loses on the train window
    assert not book.offer(members[2], 0.5, "e")                    # full, and worse than the worst member
    assert book.offer(own, 0.9, "f") and book.labels == ["a", "f"]  # replaces b, the lowest CPCV
    assert not book.offer(own, 0.95, "f")                          # a member's own label again
