"""Calls constant by construction (`dsl.degenerate`): refused by the parser in full and in prefix mode, with
the grammar decoder left a way out; calls that only look alike stay legal."""

import numpy as np
import pytest

from alphagym.dsl.alpha101 import alpha101
from alphagym.dsl.degenerate import NEGATIVE, NONNEGATIVE, POSITIVE, UNKNOWN, sign_class
from alphagym.dsl.errors import DegenerateError, DslError
from alphagym.dsl.evaluate import Evaluator
from alphagym.dsl.parser import parse
from alphagym.dsl.prefix import PrefixChecker
from dsl_helpers import random_panel

CHECK = PrefixChecker()


@pytest.mark.parametrize("text, expected", [
    ("close", POSITIVE), ("adv20", POSITIVE), ("ts_max(high / low, 48)", POSITIVE), ("-vwap", NEGATIVE),
    ("ts_decay_linear(close, 24) * volume", POSITIVE), ("abs(close - open)", POSITIVE),
    ("abs(rank(close) - 0.5)", NONNEGATIVE), ("ts_std(close > open, 3)", NONNEGATIVE),
    ("abs(close - close)", NONNEGATIVE),
    ("ts_argmax(returns, 5)", NONNEGATIVE), ("rank(returns) * adv20", NONNEGATIVE), ("returns", UNKNOWN),
    ("close - open", UNKNOWN), ("log(close)", UNKNOWN), ("-volume + close", UNKNOWN), ("0", NONNEGATIVE),
    ("sqrt(volume)", POSITIVE), ("ts_std(close, 10)", POSITIVE),
    ("ts_std(close, 1)", NONNEGATIVE), ("min(close, rank(open))", NONNEGATIVE),
])
def test_sign_classes(text, expected):
    assert sign_class(parse(text)) == expected


@pytest.mark.parametrize("text, fragment", [
    # the policy's own invalid answers ("without opinion on 100% of days" from the verifier)
    ("-sign(ts_mean(close * volume, 252))", "sign of a quantity that is positive"),
    ("sign(ts_max(ts_min(high / low, 48), 138))", "positive"),
    ("-sign(ts_decay_linear(close, 24))", "positive"),
    ("sign(ts_max(abs(returns), 157))", "positive"), ("sign(ts_std(ts_zscore(open, 9), 47))", "positive"),
    ("rank(ts_corr(returns, returns, 13)) * rank(close)", "with itself"),
    ("rank(ts_cov(vwap, ts_delta(63, 3), 32))", "ts_delta of a literal"),
    ("sign(-volume)", "negative wherever"), ("sign(2 * 3)", "sign of a literal"),
    ("rank(power(2, 3))", "rank of a literal"), ("ts_corr(close, 1, 5)", "undefined"),
    ("ts_cov(1 ^ 3, close, 5)", "0 everywhere"),
])
def test_constant_calls_are_refused_with_the_reason(text, fragment):
    with pytest.raises(DegenerateError, match=fragment) as err:
        parse(text)
    assert err.value.rule == "constant"


@pytest.mark.parametrize("text", [
    "sign(ts_argmax(returns, 5))",          # 0 on the days that are their week's high: an indicator
    "sign(ts_std(close > open, 3))",         # 0 on flat stretches of the indicator
    "sign(rank(close) - 0.5)", "sign(abs(rank(close) - 0.5))", "sign(close - ts_mean(close, 20))",
    "ts_cov(close, close, 10)", "ts_corr(close, open, 10)", "close * power(2, 3)", "rank(close) - 1",
])
def test_calls_that_only_look_constant_are_legal(text):
    parse(text)


def test_the_library_and_its_evaluation_are_untouched():
    """Every Alpha101 formula parses: none is refused as constant (or for any other reason)."""
    alphas = alpha101()
    assert len(alphas) == 101
    refused = {}
    for a in alphas:
        try:
            parse(a.text)
        except DslError as exc:
            refused[a.number] = f"{exc.rule}: {exc}"
    assert refused == {}, refused


def test_refused_calls_are_constant_when_evaluated(monkeypatch):
    """The check is not a taste: bypassed, each refused call takes one value on nearly every cell (the test
    panel's 30-day flat stretch of one stock is where `abs(returns)` is 0)."""
    from alphagym.dsl.parser import _Parser

    monkeypatch.setattr(_Parser, "check_constant", lambda self, reason, tok: None)
    ev = Evaluator(random_panel())
    for text in ("sign(ts_mean(close * volume, 30))", "ts_corr(returns, returns, 13)", "rank(ts_delta(63, 3))",
                 "ts_cov(close, 2, 5)", "sign(ts_max(high / low, 20))", "sign(ts_max(abs(returns), 20))"):
        out = ev.evaluate(parse(text))[40:]
        cells = out[~np.isnan(out)]
        values, counts = np.unique(cells, return_counts=True)
        assert counts.max() >= 0.98 * len(cells), (text, values, counts)


@pytest.mark.parametrize("prefix, refused, completion", [
    ("<alpha>sign(volume", ")", " - returns)</alpha>"),
    ("<alpha>ts_corr(close, close", ",", " - returns, 5)</alpha>"),
    ("<alpha>ts_delta(63", ",", " - returns, 5)</alpha>"),
    ("<alpha>rank(2", ")", " - returns)</alpha>"),
])
def test_the_decoder_is_refused_the_token_that_makes_a_call_constant_and_keeps_a_way_out(prefix, refused,
                                                                                         completion):
    assert CHECK.state(prefix) == "open"
    assert CHECK.state(prefix + refused) == "dead"
    assert CHECK.completion(prefix) == completion
    assert CHECK.state(prefix + completion) == "done"
