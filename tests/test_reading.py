"""The reading measure (`briefs.reading`) with its controls: answers that ignore their brief score the
random baseline and a swap gap near 0; answers built for their brief pass every check and show a gap."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from alphagym.briefs.catalogue import CHECKS, load_catalogue
from alphagym.briefs.checker import compile_brief
from alphagym.briefs.compliance import check
from alphagym.briefs.generate import contradicts, generate
from alphagym.briefs.reading import parsed, reading, swapped
from alphagym.briefs.witnesses import witnesses
from alphagym.config import load_params
from alphagym.dsl.errors import DslError
from alphagym.dsl.parser import Limits
from alphagym.dsl.random_formula import random_formula

ROOT = Path(__file__).resolve().parents[1]
TOL = 0.5


@pytest.fixture(scope="module")
def briefs():
    params = load_params(ROOT / "params.yaml", [])
    train, _, _ = generate(load_catalogue(), params.briefs, 7)
    return train[:120]


@pytest.fixture(scope="module")
def pool():
    limits, out = Limits(), []
    for s in range(600):
        try:
            f = random_formula(s, max_window=126)
        except DslError:                 # a draw over the verifier's lookback limit
            continue
        if parsed(f"<alpha>{f}</alpha>", limits) is not None:
            out.append(f)
    assert len(out) > 300
    return out


def test_a_swap_changes_one_field_keeps_the_brief_drawable_and_moves_the_horizon_out_of_band(briefs):
    cat = load_catalogue()
    for b in briefs[:40]:
        for k in CHECKS:
            s = swapped(b, k, cat, TOL)
            diff = [f for f in ("mechanism", "horizon", "input_rule", "structure", "forbidden") if s[f] != b[f]]
            assert len(diff) == 1 and not contradicts(cat, s)
            assert s == swapped(b, k, cat, TOL)                 # seeded: the same swap each time
        h, g = b["horizon"], swapped(b, "horizon", cat, TOL)["horizon"]
        assert g > h * 1.5 ** 2 or g * 1.5 ** 2 < h            # no window passes both bands


def test_answers_that_ignore_their_brief_score_the_random_baseline_and_no_gap(briefs, pool):
    """The negative control: each brief's answers drawn from the same pool whatever the brief says."""
    cat, rng = load_catalogue(), np.random.default_rng(3)
    answers = [[f"<alpha>{pool[int(i)]}</alpha>" for i in rng.integers(len(pool), size=6)] for _ in briefs]
    answers[0].append("<alpha>rank(close</alpha>")               # one that does not parse
    r = reading(briefs, answers, cat, TOL, Limits(), baseline=pool, per_brief=6, seed=1)
    assert r["answers"] == 6 * len(briefs) + 1 and r["parse"] == pytest.approx(1 - 1 / r["answers"])
    assert abs(r["own_checks"] - r["random_checks"]) < 0.05
    for k in CHECKS:
        assert abs(r[f"gap_{k}"]) < 0.1, (k, r)
        assert abs(r[f"own_{k}"] - r[f"random_{k}"]) < 0.1, (k, r)


def test_answers_built_for_their_brief_pass_every_check_and_read_it(briefs, pool):
    """The positive control: each brief answered with formulas built to meet it (the contract's witnesses)."""
    cat, limits = load_catalogue(), Limits()
    answers = [[f"<alpha>{w}</alpha>" for w in witnesses(compile_brief(b, cat, TOL, limits), limits, 2)]
               for b in briefs]
    for b, group in zip(briefs, answers):
        assert all(check(b, parsed(a, limits), cat, TOL).ok for a in group)
    r = reading(briefs, answers, cat, TOL, limits, baseline=pool, per_brief=6, seed=1)
    assert r["parse"] == 1.0 and r["own_all"] == 1.0 and r["own_checks"] == 1.0
    assert r["own_checks"] > r["random_checks"] + 0.3
    # every check but `forbidden` (which most formulas pass whatever it forbids) is read
    for k in CHECKS:
        assert r[f"gap_{k}"] >= (0.0 if k == "forbidden" else 0.3), (k, r)


def test_nothing_parses_is_nan_not_zero(briefs):
    r = reading(briefs[:2], [["no tags"], ["<alpha>rank(</alpha>"]], load_catalogue(), TOL, Limits())
    assert r["parse"] == 0.0 and np.isnan(r["own_checks"]) and np.isnan(r["gap_horizon"])
    with pytest.raises(ValueError, match="2 briefs but 1 answer lists"):
        reading(briefs[:2], [["x"]], load_catalogue(), TOL, Limits())
