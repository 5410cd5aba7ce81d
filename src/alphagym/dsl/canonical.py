"""Canonical form and size measures of a formula.

canonical(): aliases resolved (the parser already did), commutative arguments sorted (sums and products
flattened first), literals normalised, every window replaced by its bucket, so that trivially jittered
variants of one idea (`ts_mean(close, 20)` vs `ts_mean(close, 21)`) share one string.
"""

from __future__ import annotations

from collections.abc import Sequence

from alphagym.dsl.ast import Call, Field, Node, Num, walk
from alphagym.dsl.registry import OPS

WINDOW_BUCKETS = (5, 21, 63, 126, 252)   # default; params.yaml `dsl.window_buckets` is passed by callers


def bucket(window: int, buckets: Sequence[int] = WINDOW_BUCKETS) -> int:
    """Nearest bucket; a tie goes to the smaller one."""
    return min(buckets, key=lambda b: (abs(b - window), b))


def literal(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return str(int(v))
    return format(v, ".10g")


def canonical(node: Node, buckets: Sequence[int] = WINDOW_BUCKETS) -> str:
    """The canonical string. Every operator expression is parenthesised where it is an operand of another
    operator, so the string is unambiguous without precedence rules; a function's argument (delimited by
    commas) and the whole formula are written without outer parentheses: `rank(a / b)`, not `rank((a / b))`."""
    return _canon(node, buckets, False)


def _canon(node: Node, buckets: Sequence[int], operand: bool) -> str:
    if isinstance(node, Num):
        return literal(node.value)
    if isinstance(node, Field):
        return node.name
    spec = OPS[node.op]
    wrap = (lambda text: f"({text})") if operand else (lambda text: text)
    if node.op in ("add", "mul"):
        terms: list[str] = []
        stack = [node]
        while stack:                       # flatten a + (b + c) and (a + b) + c alike
            n = stack.pop()
            if isinstance(n, Call) and n.op == node.op:
                stack.extend(n.args)
            else:
                terms.append(_canon(n, buckets, True))
        return wrap(f" {spec.infix} ".join(sorted(terms)))
    if spec.infix or node.op in ("neg", "where"):
        args = [_canon(a, buckets, True) for a in node.args]
        if spec.commutative:
            args.sort()
        if spec.infix:
            return wrap(f"{args[0]} {spec.infix} {args[1]}")
        if node.op == "neg":
            return wrap(f"-{args[0]}")
        return wrap(f"{args[0]} ? {args[1]} : {args[2]}")
    args = [_canon(a, buckets, False) for a in node.args]
    if spec.commutative:
        args.sort()
    if node.op == "scale" and node.param not in (None, 1.0):
        args.append(literal(float(node.param)))
    if node.window is not None:
        args.append(str(bucket(node.window, buckets)))
    return f"{node.op}({', '.join(args)})"


def node_count(node: Node) -> int:
    return sum(1 for _ in walk(node))


def fields_used(node: Node) -> list[str]:
    names = {n.name for n in walk(node) if isinstance(n, Field)}
    for n in walk(node):      # adv{d} expands to close*volume; indneutralize reads sectors
        if isinstance(n, Call) and n.op == "indneutralize":
            names.add("sector")
    return sorted(names)


def operators_used(node: Node) -> list[str]:
    return sorted({n.op for n in walk(node) if isinstance(n, Call)})
