"""The SFT corpus: seeded candidates, every kept pair satisfies its brief, no held-out family leaks in."""

from __future__ import annotations

import numpy as np
import pandas as pd

from alphagym.briefs.catalogue import load_catalogue
from alphagym.briefs.compliance import check
from alphagym.briefs.generate import families, holdout_families
from alphagym.dsl.errors import DslError
from alphagym.dsl.parser import Limits, parse
from alphagym.params import Corpus
from alphagym.policy.corpus import TS1, TS2, assign_brief, build_corpus, candidates, mutate_alpha, sample_formula


def test_the_sampler_draws_the_registrys_time_series_operators_in_the_corpus_order():
    # the seeded draws index these tuples: another member or order would change every sampled formula
    assert TS1 == ("ts_mean", "ts_std", "ts_zscore", "ts_rank", "ts_delta", "ts_max", "ts_min", "ts_argmax",
                   "ts_argmin", "ts_decay_linear", "ts_ema", "ts_skew", "ts_kurt", "ts_slope", "ts_sum")
    assert TS2 == ("ts_corr", "ts_cov")


def test_candidates_are_seeded_distinct_and_mostly_parse():
    a = candidates(300, 7, (5, 21, 63), 0.3)
    assert a == candidates(300, 7, (5, 21, 63), 0.3) and a != candidates(300, 8, (5, 21, 63), 0.3)
    assert len(set(a)) == 300
    ok = 0
    for f in a:
        try:
            parse(f)
            ok += 1
        except Exception:
            pass
    assert ok / len(a) > 0.8


def test_mutation_rescales_windows():
    rng = np.random.default_rng(0)
    out = mutate_alpha("rank(ts_mean(close, 10))", rng)
    assert out != "rank(ts_mean(close, 10))" and "ts_mean(" in out
    assert sample_formula(np.random.default_rng(1), (21,))


def test_assigned_briefs_are_satisfied_and_from_training_families():
    cat = load_catalogue()
    held = set(holdout_families(cat, 0.15, 7))
    train = set(families(cat)) - held
    rng = np.random.default_rng(0)
    hits = 0
    for f in candidates(200, 3, cat.horizons, 0.2):
        try:
            ast = parse(f)
        except Exception:
            continue
        b = assign_brief(ast, cat, train, 0.5, rng)
        if b is None:
            continue
        hits += 1
        assert f"{b['mechanism']}|{b['structure']}" in train
        assert check(b, ast, cat, 0.5).ok
    assert hits > 80


def test_build_corpus_keeps_valid_pairs_only(sim_panels, root):
    from alphagym.config import load_params
    from alphagym.verifier.verifier import Verifier

    p = load_params(root / "params.yaml", ["verifier.jepa_stress.enabled=false"])
    v = Verifier(sim_panels[0].slice_days(0, 700), p)
    cat = load_catalogue()
    train = set(families(cat)) - set(holdout_families(cat, 0.15, 7))
    df, counts = build_corpus(lambda f: v.score(f), cat, train,
                              Corpus(candidates=120, alpha101_share=0.3, one_horizon=False, mechanism_by="form",
                                     pairing="formula", briefs=1, per_brief=1), 0.5,
                              Limits(), (5, 21, 63, 126, 252), 7)
    assert counts["pairs"] == len(df) > 20
    assert counts["candidates"] == sum(counts[k] for k in ("parse_errors", "invalid", "no_brief", "pairs"))
    assert set(df["family"]) <= train
    assert (df["answer"] == "<alpha>" + df["formula"] + "</alpha>").all()
    assert df["cpcv"].notna().all() and {"brief", "canonical", "channel_cpcv"} <= set(df.columns)



def test_mechanism_by_idea_names_a_mechanism_the_formula_follows_where_it_follows_one(sim_panels, root):
    """`sft.corpus.mechanism_by: idea`: a pair's mechanism is one whose idea its formula follows (fidelity at
    least idea_tau) whenever a training family's mechanism the formula passes is followed; else one drawn by
    form as before. Each pair records its fidelity; `on_mechanism` counts the followed ones, more than a
    corpus drawn by form has (measured with the same idea check); a missing idea check is refused."""
    import pytest

    from alphagym.briefs.contract import failure, spec_contract, whole_facts
    from alphagym.briefs.idea import IdeaCheck
    from alphagym.config import load_params
    from alphagym.errors import ConfigError
    from alphagym.verifier.verifier import Verifier

    p = load_params(root / "params.yaml", ["verifier.jepa_stress.enabled=false"])
    panel = sim_panels[0].slice_days(0, 700)
    v, cat = Verifier(panel, p), load_catalogue()
    idea = IdeaCheck(panel, cat)
    train = set(families(cat)) - set(holdout_families(cat, 0.15, 7))
    args = (cat, train, Corpus(candidates=150, alpha101_share=0.0, one_horizon=False, mechanism_by="idea",
                           pairing="formula", briefs=1, per_brief=1), 0.5,
            Limits(), (5, 21, 63, 126, 252), 7)
    df, counts = build_corpus(lambda f: v.score(f), *args, idea=idea)
    form, _ = build_corpus(lambda f: v.score(f), cat, train, args[2].model_copy(update={"mechanism_by": "form"}),
                           *args[3:])
    assert counts["on_mechanism"] == int((df["idea_fidelity"] >= idea.tau).sum()) > 0
    followed = 0
    for formula, mech, fid in zip(df["formula"], df["brief_mechanism"], df["idea_fidelity"], strict=True):
        ast = parse(formula)
        sig = idea.signal(ast)
        assert fid == pytest.approx(idea.fidelity(sig, mech))
        meets = lambda part, k, ast=ast: failure(spec_contract(cat.spec(part, k)), *whole_facts(ast)) is None  # noqa: E731
        could = [m for m in cat.ids("mechanisms") if meets("mechanisms", m)
                 and any(f"{m}|{s}" in train and meets("structures", s) for s in cat.ids("structures"))
                 and idea.fidelity(sig, m) >= idea.tau]
        assert (fid >= idea.tau) or not could, (formula, mech, could)
        followed += fid >= idea.tau
    on_form = sum(idea.fidelity(idea.signal(parse(f)), m) >= idea.tau
                  for f, m in zip(form["formula"], form["brief_mechanism"], strict=True))
    assert followed > on_form, (followed, on_form)
    with pytest.raises(ConfigError, match="mechanism_by: idea"):
        build_corpus(lambda f: v.score(f), *args)
    # idea_only: the pairs that follow their mechanism, the others dropped and counted
    only, c = build_corpus(lambda f: v.score(f), cat, train, args[2].model_copy(update={"mechanism_by": "idea_only"}),
                           *args[3:], idea=idea)
    assert len(only) == c["pairs"] == c["on_mechanism"] == counts["on_mechanism"]
    assert (only["idea_fidelity"] >= idea.tau).all() and c["off_mechanism"] == counts["pairs"] - c["pairs"]
    assert c["candidates"] == sum(c[k] for k in ("parse_errors", "invalid", "no_brief", "off_mechanism", "pairs"))

def test_a_brief_first_corpus_pairs_each_drawn_brief_with_formulas_that_pass_it(sim_panels, root):
    """`pairing: brief`: briefs from the training families, every horizon represented, each with at most
    `per_brief` formulas that pass all its checks, the least used first; seeded."""
    from alphagym.briefs.compliance import check
    from alphagym.config import load_params
    from alphagym.verifier.verifier import Verifier

    p = load_params(root / "params.yaml", ["verifier.jepa_stress.enabled=false"])
    v, cat = Verifier(sim_panels[0].slice_days(0, 700), p), load_catalogue()
    train = set(families(cat)) - set(holdout_families(cat, 0.15, 7))
    cfg = Corpus(candidates=300, alpha101_share=0.0, one_horizon=False, mechanism_by="form", pairing="brief",
                 briefs=200, per_brief=3)
    args = (cat, train, cfg, 0.5, Limits(), (5, 21, 63, 126, 252), 7)
    df, counts = build_corpus(lambda f: v.score(f), *args)
    assert counts["pairs"] == len(df) > 100 and counts["briefs"] == 200
    assert counts["candidates"] == counts["parse_errors"] + counts["invalid"] + counts["valid"]
    assert set(df["family"]) <= train
    per = df.groupby("brief").size()
    assert per.max() <= 3 and len(per) == 200 - counts["briefs_unmatched"]
    assert set(df["brief_horizon"]) == set(cat.horizons)         # every horizon a brief can ask for
    for _, r in df.iterrows():
        fields = {k: r[f"brief_{k}"] for k in ("mechanism", "horizon", "input_rule", "structure", "forbidden")}
        assert check(fields, parse(r["formula"]), cat, 0.5).ok
    assert counts["formulas_used"] == df["formula"].nunique()
    again, _ = build_corpus(lambda f: v.score(f), *args)
    pd.testing.assert_frame_equal(df, again)


def test_filter_keeps_partly_solved_briefs_or_the_closest_to_break_even():
    import pandas as pd

    from alphagym.policy.stage import select_briefs

    t = pd.DataFrame({"solved": [0, 3, 8, 1, 0, 0], "best_cpcv": [-0.9, 0.4, 1.2, 0.1, -0.05, np.nan]})
    mask, rule = select_briefs(t, 8, 2)
    assert list(mask) == [False, True, False, True, False, False] and "some but not all" in rule
    # Environment B: too few qualify, so the 3 whose best CPCV is nearest 0 (no valid answer: last)
    mask, rule = select_briefs(t, 8, 3)
    assert list(mask) == [False, True, False, True, True, False] and "closest to break-even" in rule


def test_one_horizon_draws_every_window_of_a_formula_near_one_horizon():
    """`sft.corpus.one_horizon`: the windows a sampled formula draws (those above the fixed 1-5 day shifts)
    lie within [0.75 h, 1.3 h] of one horizon h, so their longest over shortest is at most 1.3 / 0.75 (plus
    rounding); by default each window has its own horizon and most formulas with two such windows mix
    horizons (the control: the check fails on them)."""
    from alphagym.dsl.ast import Call, walk

    cat = load_catalogue()

    def spreads(one: bool) -> list[float]:
        out = []
        for f in candidates(300, 5, cat.horizons, 0.0, one_horizon=one):
            try:
                ast = parse(f)
            except DslError:              # a degenerate draw (e.g. the sign of a positive quantity)
                continue
            ws = [n.window for n in walk(ast) if isinstance(n, Call) and n.window is not None and n.window > 6]
            if len(ws) >= 2:
                out.append(max(ws) / min(ws))
        return out

    one, mixed = spreads(True), spreads(False)
    assert len(one) > 50 and max(one) <= 1.3 / 0.75 + 0.1
    assert sum(r > 1.3 / 0.75 + 0.1 for r in mixed) > 0.3 * len(mixed)
