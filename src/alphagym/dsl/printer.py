"""Print an AST back as plain formula text: one name per operator (aliases resolved, `adv20` written out),
integer windows, and only the parentheses precedence needs. `parse(plain(ast)) == ast` (tested on the
Alpha101 library and random formulas).

The SFT corpus writes its Alpha101 mutations this way, so the policy learns one spelling of each operator
(`ts_corr`, not also `correlation`) and no fractional windows the parser floors anyway.
"""

from __future__ import annotations

from alphagym.dsl.ast import Call, Field, Node, Num
from alphagym.dsl.canonical import literal
from alphagym.dsl.registry import OPS

# binding strength, loosest first, as the parser reads them (parser._LEVELS, then unary minus, ^, atoms)
_PREC = {"where": 0, "or": 1, "and": 2, "lt": 3, "le": 3, "gt": 3, "ge": 3, "eq": 3, "ne": 3, "add": 4,
         "sub": 4, "mul": 5, "div": 5, "neg": 6, "pow": 7}
_ATOM = 8


def _prec(node: Node) -> int:
    if isinstance(node, Call):
        return _PREC.get(node.op, _ATOM)
    if isinstance(node, Num) and node.value < 0:
        return _PREC["neg"]             # the parser reads "-5" as a negated literal
    return _ATOM


def _wrap(node: Node, parens: bool) -> str:
    text = plain(node)
    return f"({text})" if parens else text


def plain(node: Node) -> str:
    if isinstance(node, Num):
        return literal(node.value)
    if isinstance(node, Field):
        return node.name
    p, args = _prec(node), node.args
    if node.op == "where":
        return f"{_wrap(args[0], _prec(args[0]) <= p)} ? {plain(args[1])} : {plain(args[2])}"
    if node.op == "neg":
        return f"-{_wrap(args[0], _prec(args[0]) < p)}"
    if node.op == "pow":               # base: an atom; exponent: a unary expression
        return f"{_wrap(args[0], _prec(args[0]) < _ATOM)} ^ {_wrap(args[1], _prec(args[1]) < _PREC['neg'])}"
    symbol = OPS[node.op].infix
    if symbol:                         # left-associative: a right operand of equal strength needs parentheses
        return f"{_wrap(args[0], _prec(args[0]) < p)} {symbol} {_wrap(args[1], _prec(args[1]) <= p)}"
    parts = [plain(a) for a in args]
    if node.op == "scale" and node.param not in (None, 1.0):
        parts.append(literal(float(node.param)))
    if node.op == "indneutralize" and node.param not in (None, "sector"):
        parts.append(f"IndClass.{node.param}")
    if node.window is not None:
        parts.append(str(node.window))
    return f"{node.op}({', '.join(parts)})"
