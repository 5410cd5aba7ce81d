"""Grammar, aliases, limits and every error type, with positions; canonical form and size measures."""

import pytest

from alphagym.dsl.answer import extract
from alphagym.dsl.ast import Call, Field, Num
from alphagym.dsl.canonical import bucket, canonical, fields_used, node_count, operators_used
from alphagym.dsl.errors import (
    ArityError,
    DoubledTagError,
    DslError,
    LexError,
    LimitError,
    MissingTagError,
    ParseError,
    UnknownNameError,
    WindowError,
)
from alphagym.dsl.parser import Limits, lookback, parse


def test_precedence_and_associativity():
    assert parse("1 + 2 * 3") == Call("add", (Num(1), Call("mul", (Num(2), Num(3)))))
    assert parse("2 * close ^ 2") == Call("mul", (Num(2), Call("pow", (Field("close"), Num(2)))))
    assert parse("-close ^ 2") == Call("neg", (Call("pow", (Field("close"), Num(2))),))
    assert parse("close ^ open ^ 2") == Call("pow", (Field("close"), Call("pow", (Field("open"), Num(2)))))
    assert parse("1 - 2 - 3") == Call("sub", (Call("sub", (Num(1), Num(2))), Num(3)))
    assert parse("a < b ? 1 : 2".replace("a", "close").replace("b", "open")).op == "where"
    assert parse("close > 1 || open < 2 && volume > 3").op == "or"


def test_literals():
    assert parse(".001") == Num(0.001) and parse("1e-3") == Num(0.001) and parse("20") == Num(20)
    assert parse("2.") == Num(2.0) and parse("-5") == Num(-5)


def test_aliases_case_and_paper_spellings():
    assert parse("Ts_Rank(close, 9)") == parse("ts_rank(close, 9)")
    assert parse("SignedPower(close, 2)").op == "signedpower"
    assert parse("correlation(close, volume, 5)").op == "ts_corr"
    assert parse("stddev(close, 5)").op == "ts_std" and parse("delta(close, 5)").op == "ts_delta"
    assert parse("sum(close, 5)").op == "ts_sum" and parse("product(close, 5)").op == "ts_product"
    assert parse("decay_linear(close, 5)").op == "ts_decay_linear"
    assert parse("covariance(close, volume, 5)").op == "ts_cov"
    assert parse("Log(close)").op == "log" and parse("CLOSE") == Field("close")
    assert parse("min(close, 5)") == Call("ts_min", (Field("close"),), window=5)
    assert parse("max(close, open)").op == "max"
    assert parse("ts_min(vwap, 16.1219)").window == 16
    assert parse("scale(close, 3)").param == 3.0 and parse("scale(close)").param is None
    assert parse("IndNeutralize(close, IndClass.subindustry)").param == "subindustry"
    adv = parse("adv20")
    assert adv == Call("ts_mean", (Call("mul", (Field("close"), Field("volume"))),), window=20)


@pytest.mark.parametrize("text, error, fragment, pos", [
    ("close +", ParseError, "expected a number", 7),
    ("(close", ParseError, "expected ')'", 6),
    ("close open", ParseError, "after a complete formula", 6),
    ("close $ open", LexError, "unexpected character '$'", 6),
    ("closee", UnknownNameError, "did you mean 'close'", 0),
    ("ts_meen(close, 5)", UnknownNameError, "did you mean 'ts_mean'", 0),
    ("rank(close, open)", ArityError, "rank takes 1 argument(s), got 2", 0),
    ("ts_mean(close)", ArityError, "1 + a window", 0),
    ("ts_mean(close, open)", WindowError, "must be a numeric literal", 15),
    ("ts_mean(close, 0)", WindowError, "between 1 and 252", 15),
    ("ts_mean(close, 253)", WindowError, "between 1 and 252", 15),
    ("ts_mean(close, -5)", WindowError, "between 1 and 252", 15),
    ("ts_mean(ts_mean(close, 200), 100)", LimitError, "total lookback 298", 0),
    ("delay(ts_mean(close, 200), 54)", LimitError, "total lookback 253 sessions exceeds 252", 0),
    ("1e999", LimitError, "out of range", 0),
    ("rank", ParseError, "is a function", 0),
    ("IndClass.sector", ParseError, "only allowed as the second argument", 0),
    ("indneutralize(close, IndClass.country)", ParseError, "IndClass.{sector", 21),
    ("close ? open", ParseError, "expected ':'", 12),
    # a formula cut short inside a call names the missing ')' and the call it closes, not a ','
    ("rank(close", ParseError, "missing ')' to close rank( opened at position 0", 10),
    ("ts_mean(close, 5", ParseError, "missing ')' to close ts_mean( opened at position 0", 16),
    ("abs(rank(close)", ParseError, "missing ')' to close abs( opened at position 0", 15),
])
def test_errors_are_typed_and_positioned(text, error, fragment, pos):
    with pytest.raises(error) as info:
        parse(text)
    assert fragment in str(info.value)
    if pos is not None:
        assert info.value.pos == pos


def test_lookback_rules():
    assert lookback(parse("close")) == 0
    assert lookback(parse("delay(close, 5)")) == 5 and lookback(parse("ts_delta(close, 5)")) == 5
    assert lookback(parse("ts_mean(close, 5)")) == 4
    assert lookback(parse("ts_mean(delay(close, 3), 10) + ts_std(close, 20)")) == 19
    assert lookback(parse("ts_mean(ts_mean(close, 126), 127)")) == 251
    assert lookback(parse("ts_mean(ts_mean(close, 126), 128)")) == 252       # the limit itself is allowed
    with pytest.raises(LimitError):
        parse("ts_mean(ts_mean(close, 126), 129)")


def _balanced(leaves: int) -> str:
    """A shallow sum of `leaves` fields: tokens grow fast, depth stays ~log2."""
    items = ["close"] * leaves
    while len(items) > 1:
        items = [f"({a} + {b})" for a, b in zip(items[::2], items[1::2])] + (items[-1:] if len(items) % 2 else [])
    return items[0]


def test_token_and_depth_limits():
    parse(_balanced(64))                                      # 253 tokens, depth 7
    with pytest.raises(LimitError, match="more than 256 tokens"):
        parse(_balanced(66))
    parse("abs(" * 15 + "close" + ")" * 15)                  # depth 16
    with pytest.raises(LimitError, match="depth 17 exceeds 16"):
        parse("abs(" * 16 + "close" + ")" * 16)
    with pytest.raises(LimitError):
        parse("(" * 1_000_000 + "close" + ")" * 1_000_000)
    with pytest.raises(LimitError, match="more than 4 tokens"):
        parse("close + open + high", Limits(max_tokens=4))


def test_canonical_form():
    assert canonical(parse("ts_mean(close, 20)")) == canonical(parse("ts_mean(close, 21)"))
    assert canonical(parse("close + open")) == canonical(parse("open + close"))
    assert canonical(parse("(close + open) + high")) == canonical(parse("high + (open + close)"))
    assert canonical(parse("close - open")) != canonical(parse("open - close"))
    assert canonical(parse("correlation(volume, close, 10)")) == canonical(parse("ts_corr(close, volume, 9)"))
    assert canonical(parse("Ts_Rank(close, 9)")) == "ts_rank(close, 5)"
    assert canonical(parse("close * 2.50")) == canonical(parse("2.5 * close")) == "2.5 * close"
    # operands of operators are parenthesised, function arguments and the whole formula are not
    assert canonical(parse("rank(volume / ts_mean(volume, 20))")) == "rank(volume / ts_mean(volume, 21))"
    assert canonical(parse("-(close - open) * 2")) == "(-(close - open)) * 2"
    assert canonical(parse("close - (open - high)")) != canonical(parse("(close - open) - high"))
    assert bucket(13) == 5 and bucket(14) == 21 and bucket(100) == 126 and bucket(252) == 252


def test_size_measures():
    ast = parse("rank(ts_mean(close, 5) / volume) + adv20")
    assert node_count(ast) == 10      # adv20 counts as its expansion ts_mean(close * volume, 20)
    assert fields_used(ast) == ["close", "volume"]
    assert operators_used(ast) == ["add", "div", "mul", "rank", "ts_mean"]
    assert "sector" in fields_used(parse("indneutralize(close)"))


def test_answer_tags():
    a = extract("<think>volume spikes revert</think> <alpha>rank(volume)</alpha>")
    assert a.formula == "rank(volume)" and a.reasoning == "volume spikes revert"
    assert extract("<alpha> rank(close) </alpha>").reasoning is None
    with pytest.raises(MissingTagError):
        extract("rank(close)")
    with pytest.raises(DoubledTagError):
        extract("<alpha>rank(close)</alpha><alpha>rank(open)</alpha>")
    with pytest.raises(MissingTagError):
        extract("<alpha>rank(close)")


def test_the_answer_follows_the_last_reasoning_block():
    """A reasoning block may mention <alpha> tags (drafts, quotes): the answer is what follows it."""
    a = extract("<think>try <alpha>rank(close)</alpha>? no, volume</think>\n<alpha>rank(volume)</alpha>")
    assert a.formula == "rank(volume)" and a.reasoning.startswith("try <alpha>rank(close)</alpha>")
    a = extract("<think>a</think><reasoning>b</reasoning><alpha>rank(open)</alpha>")
    assert a.formula == "rank(open)" and a.reasoning == "b"
    with pytest.raises(MissingTagError, match="after the reasoning block"):
        extract("<think><alpha>rank(close)</alpha></think> so that is it")
    with pytest.raises(DoubledTagError):
        extract("<think>x</think><alpha>rank(close)</alpha><alpha>rank(open)</alpha>")


@pytest.mark.parametrize("text", ["adv" + "9" * 309, "adv" + "9" * 400, "ts_mean(close, 1" + "0" * 400 + ")",
                                  "ts_mean(close, 1e400)", "delay(close, " + "9" * 320 + ".5)"])
def test_huge_numbers_are_typed_errors(text):
    """309+ digits read as inf; floor(inf) raised a raw OverflowError that escaped scoring."""
    with pytest.raises(DslError):
        parse(text)
