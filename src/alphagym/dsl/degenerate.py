"""Calls that are constant by construction, which the parser refuses (`DegenerateError`).

Each of these is the same number for every stock on every day, whatever the data; a formula built on one
spends its tokens on nothing, and at the top of a formula the verifier would score it invalid later, after
evaluating it ("without opinion on 100% of days"). Refusing them in the parser lets the grammar-constrained
decoder (`dsl.prefix`) steer a policy away from them as it writes, as it does from a window out of range.

- `sign(x)` of an `x` that is positive (or negative) on almost every day: 1 (or -1), e.g.
  `sign(ts_mean(close * volume, 252))`, `sign(ts_max(high / low, 48))`, `sign(adv20)`,
  `sign(ts_max(abs(returns), 157))`, `sign(ts_std(returns, 20))`. The sign of a quantity that is never
  negative but often exactly 0 is an indicator, not a constant, and stays: `sign(ts_argmax(returns, 5))`
  is 0 on the days that are their week's high, `sign(ts_std(close > open, 3))` on flat stretches.
- a time-series or cross-sectional operator whose expression arguments are all literals (numbers, or
  arithmetic of numbers only): `ts_delta(63, 3)` is 0, `rank(power(2, 3))` is constant; so is `sign` of a
  literal.
- `ts_corr(x, x)`: 1 wherever it is defined; `ts_corr(x, 5)` is undefined and `ts_cov(x, 5)` is 0.

What is known of a sign comes from the registry's `sign` and `continuous` columns, one rule per operator,
and from the fields (prices, volume, vwap and cap are above 0; returns can be anything; every field is
continuous: `abs(returns)` is 0 only on a day whose close did not move). Unknown is the safe answer: only
a call that is constant on nearly every day is refused, which the verifier would score invalid at the top
of a formula (without opinion on more than half the days) and which adds nothing inside one. The checks
are local to one call, so the parser makes them where the call's arguments are complete, in full and in
prefix mode alike.
"""

from __future__ import annotations

from alphagym.dsl.ast import Call, Field, Node, Num
from alphagym.dsl.registry import OPS, POSITIVE_FIELDS

POSITIVE, NONNEGATIVE, UNKNOWN, NONPOSITIVE, NEGATIVE = 2, 1, 0, -1, -2


def sign_class(node: Node) -> int:
    """What is known of `node`'s sign wherever it is defined: POSITIVE (2, above 0 on almost every day),
    NONNEGATIVE (1, may be 0 often), UNKNOWN (0), NONPOSITIVE (-1) or NEGATIVE (-2). The sign of the class
    is the sign of the value; its size says whether 0 can be common.

    >>> from alphagym.dsl.parser import parse
    >>> [sign_class(parse(f)) for f in ("ts_mean(volume, 5)", "ts_max(abs(returns), 5)", "-vwap / close",
    ...                                 "returns", "close - open", "rank(returns) * adv20", "ts_argmax(close, 5)")]
    [2, 2, -2, 0, 0, 1, 1]
    """
    if isinstance(node, Num):
        return POSITIVE if node.value > 0 else NEGATIVE if node.value < 0 else NONNEGATIVE
    if isinstance(node, Field):
        return POSITIVE if node.name in POSITIVE_FIELDS else UNKNOWN
    if not isinstance(node, Call):
        return UNKNOWN
    rule = OPS[node.op].sign
    if rule == "nonneg":
        return NONNEGATIVE
    if rule == "?":
        return UNKNOWN
    if rule == "spread":       # a window's spread is 0 only where the window is flat
        return POSITIVE if continuous(node.args[0]) and (node.window or 0) >= 2 else NONNEGATIVE
    first = sign_class(node.args[0])
    if rule == "same":
        return first
    if rule == "neg":
        return -first
    if rule == "abs":
        return POSITIVE if abs(first) == POSITIVE or continuous(node.args[0]) else NONNEGATIVE
    if rule == "even":
        return first if first > 0 else UNKNOWN
    second = sign_class(node.args[1])
    if not (first and second):
        return UNKNOWN
    if rule == "product":      # 0 is possible where either factor may be 0
        return (1 if (first > 0) == (second > 0) else -1) * min(abs(first), abs(second))
    if rule == "sum":          # agreeing signs keep theirs; 0 is possible only where both may be 0 (for
        if (first > 0) != (second > 0):                         # min and max: where either may be)
            return UNKNOWN
        return (1 if first > 0 else -1) * min(abs(first), abs(second))
    raise ValueError(f"operator {node.op!r} has an unknown sign rule {rule!r} in the registry")


def continuous(node: Node) -> bool:
    """A series that is exactly 0 on almost no day: a field, or operators continuous in their arguments
    (the registry's `continuous`) over such series, with no literal 0 and no subtraction of a series from
    itself. Comparisons, ranks, argmax and sign give steps, which sit at 0 for whole stretches.

    >>> from alphagym.dsl.parser import parse
    >>> [continuous(parse(f)) for f in ("abs(returns)", "ts_std(close > open, 5)", "close - close", "returns * 0")]
    [True, False, False, False]
    """
    if isinstance(node, Field):
        return True
    if not isinstance(node, Call) or not OPS[node.op].continuous:
        return False
    if any(isinstance(a, Num) and a.value == 0 for a in node.args):
        return False
    if node.op == "sub" and node.args[0] == node.args[1]:
        return False
    series = [a for a in node.args if not is_literal(a)]
    return bool(series) and all(continuous(a) for a in series)


def is_literal(node: Node) -> bool:
    """A number, or element-wise arithmetic of numbers only (`power(1, 5)`, `2 * 3`): the same value for
    every stock on every day."""
    if isinstance(node, Num):
        return True
    return isinstance(node, Call) and OPS[node.op].kind == "elem" and all(is_literal(a) for a in node.args)


def constant_arguments(op: str, args: list[Node]) -> str | None:
    """Why a call of `op` on these (complete) expression arguments is constant, or None. `op` is a
    canonical operator name."""
    spec = OPS.get(op)
    if spec is None or not args:
        return None
    if spec.kind in ("ts", "cs") and all(is_literal(a) for a in args):
        return f"{op} of a literal is a constant; give it a series (a field or an expression of one)"
    if op in ("ts_corr", "ts_cov") and any(is_literal(a) for a in args):
        return f"{op} with a literal is {'0' if op == 'ts_cov' else 'undefined'} everywhere"
    if op == "ts_corr" and len(args) == 2 and args[0] == args[1]:
        return "ts_corr of a series with itself is 1 wherever it is defined"
    return None


def constant_call(node: Call) -> str | None:
    """Why this finished call is constant by construction, or None."""
    if node.op == "sign":
        arg = node.args[0]
        if is_literal(arg):
            return "sign of a literal is a constant"
        s = sign_class(arg)
        if abs(s) == POSITIVE:
            what, value = ("positive", "1") if s > 0 else ("negative", "-1")
            return (f"sign of a quantity that is {what} wherever it is defined is {value}: a constant; "
                    "compare it with something first (e.g. sign(x - ts_mean(x, d)))")
    return constant_arguments(node.op, list(node.args))
