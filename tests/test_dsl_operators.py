"""Every operator against the slow pandas reference, to 1e-9 relative, on a panel with the hard cases."""

import numpy as np
import pytest

from alphagym.dsl.evaluate import Evaluator
from alphagym.dsl.parser import parse
from alphagym.dsl.registry import OPS
from dsl_helpers import random_panel
from reference_eval import ReferenceEvaluator, _pop_kurt, _pop_skew

PANEL = random_panel()
OURS, REF = Evaluator(PANEL), ReferenceEvaluator(PANEL)

CASES = {
    "add": ["close + volume"], "sub": ["close - open"], "mul": ["close * returns"],
    "div": ["close / (volume - 300000)", "returns / returns"],
    "pow": ["returns ^ 2", "close ^ 0.5", "returns ^ 0.5", "returns ^ 3", "(close - open) ^ -3", "returns ^ 0",
            "returns ^ (close * 0)", "(close / close) ^ returns"],
    "neg": ["-close"], "abs": ["abs(returns)"], "log": ["log(returns)", "log(close)"], "sign": ["sign(returns)"],
    "sqrt": ["sqrt(returns)"], "power": ["power(close, 1.5)", "power(returns, 5)"],
    "signedpower": ["signedpower(returns, 0.5)", "signedpower(close / close, returns)"],
    "min": ["min(close, open)"], "max": ["max(close, open)"],
    "lt": ["close < open"], "le": ["volume <= 300000"], "gt": ["close > open"], "ge": ["volume >= 300000"],
    "eq": ["volume == 300000"], "ne": ["volume != 300000"], "or": ["(close > open) || (volume > 300000)"],
    "and": ["(close > open) && (volume > 300000)"], "where": ["returns > 0 ? close : -volume"],
    "rank": ["rank(volume)", "rank(returns)"], "scale": ["scale(returns)", "scale(returns, 3)"],
    "indneutralize": ["indneutralize(returns)"],
    "delay": ["delay(close, 3)"], "ts_delta": ["ts_delta(close, 5)"],
    "ts_sum": ["ts_sum(returns, 7)", "ts_sum(close, 1)"], "ts_mean": ["ts_mean(close, 20)"],
    "ts_std": ["ts_std(close, 10)", "ts_std(volume, 5)", "ts_std(returns, 2)"],
    "ts_zscore": ["ts_zscore(close, 10)", "ts_zscore(volume, 4)"],
    "ts_corr": ["ts_corr(close, volume, 10)", "ts_corr(returns, open, 6)"],
    "ts_cov": ["ts_cov(close, volume, 10)"], "ts_max": ["ts_max(close, 10)", "ts_max(volume, 4)"],
    "ts_min": ["ts_min(returns, 9)", "ts_min(returns, 30)"],
    "ts_argmax": ["ts_argmax(volume, 6)", "ts_argmax(close, 12)", "ts_argmax(volume, 25)"],
    "ts_argmin": ["ts_argmin(volume, 6)", "ts_argmin(returns, 3)", "ts_argmin(volume, 40)"],
    "ts_rank": ["ts_rank(volume, 7)", "ts_rank(close, 1)", "ts_rank(returns, 15)", "ts_rank(sign(returns), 9)",
                "ts_rank(volume, 120)"],
    "ts_product": ["ts_product(1 + returns, 5)"], "ts_skew": ["ts_skew(returns, 10)", "ts_skew(volume, 2)",
                                                              "ts_skew(returns, 90)", "ts_skew(volume, 65)"],
    "ts_kurt": ["ts_kurt(returns, 12)", "ts_kurt(close, 3)", "ts_kurt(returns, 70)", "ts_kurt(close, 100)"],
    "ts_decay_linear": ["ts_decay_linear(close, 8)"],
    "ts_ema": ["ts_ema(close, 9)", "ts_ema(returns, 1)"], "ts_slope": ["ts_slope(close, 10)", "ts_slope(close, 1)"],
}


def test_every_operator_has_a_case():
    assert set(CASES) == set(OPS)


@pytest.mark.parametrize("formula", [f for fs in CASES.values() for f in fs])
def test_operator_matches_reference(formula):
    ast = parse(formula)
    ours, ref = OURS.evaluate(ast), REF.evaluate(ast)
    assert ours.shape == ref.shape
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref), err_msg=f"NaN pattern differs for {formula}")
    ok = ~np.isnan(ours)
    scale = max(1.0, float(np.nanmax(np.abs(ref))) if ok.any() else 1.0)
    np.testing.assert_allclose(ours[ok], ref[ok], rtol=1e-9, atol=1e-9 * scale, err_msg=formula)
    assert np.isfinite(ours[ok]).all()


@pytest.mark.parametrize("formula", [
    "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))",
    "ts_corr(rank(close), rank(volume), 10) + ts_decay_linear(ts_rank(returns, 5), 4)",
    "(rank(Ts_ArgMax(SignedPower(((returns < 0) ? stddev(returns, 20) : close), 2.), 5)) - 0.5)",
])
def test_composite_formulas_match_reference(formula):
    ast = parse(formula)
    ours, ref = OURS.evaluate(ast), REF.evaluate(ast)
    np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref))
    ok = ~np.isnan(ours)
    np.testing.assert_allclose(ours[ok], ref[ok], rtol=1e-9, atol=1e-9)


def test_worked_semantics():
    """Hand-checked values, independent of the reference."""
    p = random_panel()
    ev = Evaluator(p)
    v = p["volume"][:, 0]
    r = ev.evaluate(parse("ts_rank(volume, 4)"))[:, 0]
    t = 10
    others = v[t - 3:t]
    assert r[t] == pytest.approx((np.sum(others < v[t]) + 0.5 * np.sum(others == v[t])) / 3)
    am = ev.evaluate(parse("ts_argmax(volume, 5)"))[:, 0]
    w = v[t - 4:t + 1]
    assert am[t] == 4 - np.flatnonzero(w == w.max())[-1]          # ties go to the most recent
    dl = ev.evaluate(parse("ts_decay_linear(close, 3)"))[:, 0]
    c = p["close"][:, 0]
    assert dl[t] == pytest.approx((3 * c[t] + 2 * c[t - 1] + c[t - 2]) / 6, rel=1e-12)
    rk = ev.evaluate(parse("rank(close)"))[t]
    assert np.nanmin(rk) == 0.0 and np.nanmax(rk) == 1.0
    assert np.isnan(ev.evaluate(parse("ts_mean(close, 5)"))[:4]).all()   # first d-1 sessions missing


def test_constant_window_semantics():
    p = random_panel()
    ev = Evaluator(p)
    # stock 1 is constant on sessions 40..69: std exactly 0, corr and zscore NaN there
    std = ev.evaluate(parse("ts_std(close, 10)"))[:, 1]
    assert (std[49:70] == 0.0).all()
    assert np.isnan(ev.evaluate(parse("ts_corr(close, volume, 10)"))[49:70, 1]).all()
    assert np.isnan(ev.evaluate(parse("ts_zscore(close, 10)"))[49:70, 1]).all()


def test_operators_over_literal_only_expressions_evaluate(monkeypatch):
    """A model wrote `ts_delta(correlation(2e8 - indneutralize(1), 6 / power(1, 5), 5), 5)`: `power` of
    two literals came back 1-D and the ts kernel raised a numba TypingError, escaping the typed errors.
    The parser refuses such calls as constant (`dsl.degenerate`); the evaluator must still cope with them,
    so they are built here with that check switched off."""
    from alphagym.dsl.errors import DegenerateError
    from alphagym.dsl.parser import _Parser

    formulas = ("ts_delta(correlation(2e8 - indneutralize(1), 6 / power(1, 5), 5), 5)", "rank(power(2, 3))",
                "ts_mean(signedpower(-2, 3), 5)", "ts_corr(close, 1 ^ 3, 5)", "scale(power(1, 0.5))")
    for f in formulas:
        with pytest.raises(DegenerateError):
            parse(f)
    monkeypatch.setattr(_Parser, "check_constant", lambda self, reason, tok: None)
    ev = Evaluator(random_panel())
    for f in formulas:
        out = ev.evaluate(parse(f))
        assert out.shape == ev.shape, f


def test_no_infinities_anywhere():
    ev = Evaluator(random_panel())
    for f in ("1 / (close - close)", "log(0 * close)", "close ^ 1000", "ts_product(volume, 40)", "-1 / 0"):
        out = ev.evaluate(parse(f))
        assert not np.isinf(out).any(), f


def test_common_subexpressions_are_evaluated_once(monkeypatch):
    from alphagym.dsl import registry

    calls = []
    spec = registry.OPS["ts_std"]
    monkeypatch.setitem(registry.OPS, "ts_std", spec.__class__(**{
        **spec.__dict__, "kernel": lambda *a: calls.append(1) or spec.kernel(*a)}))
    Evaluator(random_panel()).evaluate(parse(
        "rank(ts_std(volume, 17) / ts_mean(volume, 17) + ts_std(volume, 17) / ts_mean(volume, 17))"))
    assert len(calls) == 1


def test_deterministic_to_the_bit():
    ast = parse("ts_corr(rank(close), ts_ema(volume, 9), 12) * ts_skew(returns, 10)")
    a = Evaluator(random_panel()).evaluate(ast)
    b = Evaluator(random_panel()).evaluate(ast)
    assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("d", [3, 7, 15, 40])
def test_extreme_scan_and_block_kernels_agree_bit_for_bit(d):
    """The two ts_max/min/argmax/argmin kernels (chosen by window length) give identical results, ties and
    NaN holes included."""
    from alphagym import kernels as K

    x = np.round(PANEL.fields["volume"] / 1e5)          # many ties
    x[50:53, 2] = np.nan
    for kind in (K.K_MAX, K.K_MIN, K.K_ARGMAX, K.K_ARGMIN):
        np.testing.assert_array_equal(K._ts_extreme_scan(x, d, kind), K._ts_extreme_blocks(x, d, kind))


@pytest.mark.parametrize("d", [2, 5, 9, 65, 130])
def test_moment_scan_and_block_kernels_agree_and_blocks_forget_outliers(d):
    """ts_skew/ts_kurt: the two-pass scan and the merged block moments (chosen by window length) agree with
    NaN, inf and constant runs, and give the same NaN pattern (to 1e-8: on the column with mean/std 1e5 the
    two-pass scan rounds to ~1e-9 where the true skew of two values is 0, which the block kernel gives).
    After a value 1e8 times the others leaves the window, the block kernel still matches a two-pass
    evaluation of each window (a running power sum would be off by about eps * 1e32 there), and a row's
    value does not depend on the panel's length."""
    from alphagym import kernels as K

    rng = np.random.default_rng(d)
    x = rng.normal(0, 1, (400, 6)) * [1, 1e-3, 1e3, 1, 1, 1] + [0, 100, 0, 5, 0, 0]
    x[30:60, 0] = 2.5                                   # constant run
    x[100, 1] = np.nan
    x[150, 2] = np.inf
    x[200, 3] = 1e8                                     # an outlier that leaves the window d rows later
    for kind, ref in ((K.K_SKEW, _pop_skew), (K.K_KURT, _pop_kurt)):
        scan, blocks = K._window_scan(x, d, kind), K._ts_moment_blocks(x, d, kind)
        np.testing.assert_array_equal(np.isnan(scan), np.isnan(blocks))
        ok = ~np.isnan(scan)
        np.testing.assert_allclose(blocks[ok], scan[ok], rtol=1e-10, atol=1e-8)
        after = range(200 + d, min(400, 200 + 3 * d))
        exact = np.array([ref(x[t - d + 1:t + 1, 3]) for t in after])
        np.testing.assert_allclose(blocks[list(after), 3], exact, rtol=1e-12, atol=1e-12)
        np.testing.assert_array_equal(K._ts_moment_blocks(x[:333], d, kind), blocks[:333])
    assert K.MOMENT_SCAN_MAX_WINDOW < 65                # the long windows above take the block kernel


def test_results_do_not_depend_on_the_thread_count():
    """Kernels split rows into blocks fixed by the shape and window, never by the number of threads, so one
    thread and all threads give the same bytes."""
    import numba

    formulas = ["ts_corr(close, volume, 5)", "ts_std(close, 3)", "ts_decay_linear(close, 4)", "ts_ema(close, 6)",
                "rank(ts_rank(volume, 7))", "ts_max(close, 30)", "ts_argmin(volume, 6)", "scale(returns)"]
    full = [OURS.evaluate(parse(f)) for f in formulas]
    before = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = [OURS.evaluate(parse(f)) for f in formulas]
    finally:
        numba.set_num_threads(before)
    for f, a, b in zip(formulas, full, one):
        np.testing.assert_array_equal(a, b, err_msg=f)


def test_field_ranks_kept_across_formulas_are_exact_and_read_only():
    """rank(<field>) outlives a formula; it must equal a fresh evaluation bit for bit, stay per field, and be
    read-only so no caller can corrupt the next formula's value."""
    ev = Evaluator(PANEL)
    first = ev.evaluate(parse("rank(volume) - rank(close)"))
    kept = ev.evaluate(parse("rank(volume)"))
    assert not kept.flags.writeable
    with pytest.raises(ValueError):
        kept[0, 0] = 1.0
    fresh = Evaluator(PANEL)
    assert np.array_equal(kept, fresh.evaluate(parse("rank(volume)")), equal_nan=True)
    assert np.array_equal(ev.evaluate(parse("rank(close)")), fresh.evaluate(parse("rank(close)")), equal_nan=True)
    assert np.array_equal(first, ev.evaluate(parse("rank(volume) - rank(close)")), equal_nan=True)
    assert not np.array_equal(kept, ev.evaluate(parse("rank(close)")), equal_nan=True)


def test_weighted_windows_are_exact_on_constant_values():
    """decay_linear / ema give the constant itself and slope exactly 0 on a window of equal values (the
    running sums alone left ~1e-16, and a division by a decay_linear of zeros gave 1e16 instead of NaN)."""
    from alphagym.kernels import K_DECAY, K_EMA, K_SLOPE, ts_weighted

    x = np.random.default_rng(0).normal(size=(600, 5))
    x[100:140, 0] = 0.0
    x[300:360, 1] = 0.123456789
    for kind in (K_DECAY, K_EMA, K_SLOPE):
        for d in (2, 5, 20):
            out = ts_weighted(x, d, kind)
            want0, want1 = (0.0, 0.0) if kind == K_SLOPE else (0.0, 0.123456789)
            assert (out[100 + d - 1:140, 0] == want0).all() and (out[300 + d - 1:360, 1] == want1).all()
            assert np.isfinite(out[d - 1:]).all() and (out[100 + d - 2, 0] != want0)
    ev = Evaluator(PANEL)
    q = ev.evaluate(parse("close / ts_decay_linear(close * 0, 2)"))
    assert np.isnan(q).all()
