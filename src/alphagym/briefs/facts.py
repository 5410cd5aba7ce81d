"""The facts of a formula prefix, read off its tokens in one left-to-right walk (`scan`): operator and field
counts, the longest window, time-series nesting, nodes sure to be in the parse, the outermost call, whether an
operand is due. The walk can resume from a kept state (`Walk`), so the decoder reads only the end of an answer
it has read before.

Invariant: every count is monotone in the text appended (a fact once true stays true), which is what lets
`briefs.contract.violation` refuse a prefix for good; a name cut off at the end is not counted until it ends
(`ended` counts it as one way it can end).
"""


from __future__ import annotations

import re
from dataclasses import dataclass, replace

from alphagym.dsl.lexer import Token
from alphagym.dsl.registry import (
    ALIASES,
    FIELDS,
    INFIX,
    OPS,
    PARAMETERS,
    SMOOTHERS,
)
from alphagym.panel import PRICE_LEVEL_FIELDS

_INFIX = {**INFIX, "?": "where"}


@dataclass
class Facts:
    """What a prefix already uses; every count only grows as text is appended (`nodes` counts only the
    nodes certain to be in the parse: calls, infix operators, fields and literals that are no parameter)."""

    ops: dict[str, int]
    fields: set[str]
    max_window: float
    ts_depth: int
    nodes: int
    long_sum: tuple[str, str, float] | None      # (smoother, price field, window)
    first: str | None                           # the first token's text (lower case), None when empty
    root_call: bool                             # the formula starts with a call whose name is complete
    root_closed: bool                           # ... and that call's ')' has been written
    after_root: bool = False                    # ... and a token after it
    ts_open: int = 0                            # time-series calls still open at the end
    window_end: bool = False                    # the text ends in a window's literal (digits may follow)
    operand_due: bool = True                    # an operand may start where the text ends (or a name there may
                                                # still become a call)
    free_slot: bool = True                      # an open call or '?' still takes another operand after this one


class Walk:
    """`scan`'s running state before some token: what the tokens before it hold, and the calls still open
    (per open '(': its operator or None, and the argument index reached)."""

    __slots__ = ("ops", "fields", "stack", "longest", "ts_open", "ts_depth", "nodes", "long_sum", "root_closed",
                 "after_root", "ternary_open")

    def __init__(self) -> None:
        self.ops: dict[str, int] = {}
        self.fields: set[str] = set()
        self.stack: list[tuple[str | None, int]] = []
        self.longest, self.ts_open, self.ts_depth, self.nodes = 0.0, 0, 0, 0
        self.long_sum: tuple[str, str, float] | None = None
        self.root_closed = self.after_root = False
        self.ternary_open = 0                  # '?' still waiting for its ':' and the operand after it

    def copy(self) -> Walk:
        w = Walk()
        w.ops, w.fields, w.stack = dict(self.ops), set(self.fields), list(self.stack)
        w.longest, w.ts_open, w.ts_depth, w.nodes = self.longest, self.ts_open, self.ts_depth, self.nodes
        w.long_sum, w.root_closed, w.after_root = self.long_sum, self.root_closed, self.after_root
        w.ternary_open = self.ternary_open
        return w


def scan(tokens: list[Token], text_end: int, resume: tuple[int, Walk] | None = None,
         mark: int | None = None) -> tuple[Facts, Walk | None]:
    """Facts of a formula prefix from its tokens (the lexer's, 'end' last). A name or number that touches
    the end of the text may still grow: a name is not counted until a token follows it; a number is read
    as written (appending digits only makes a window longer). A token is read with the token after it (a
    name followed by '(' is a call, a '-' before a name a neg node) and the three before it (a smoother's
    window over a bare price), so the walk before token i depends on tokens[:i + 1] alone: `resume` (i, walk)
    starts there from a copy of a walk another prefix with the same tokens[:i + 1] returned, and `mark` asks
    for the walk before token `mark` (None when the walk started after it)."""
    toks = tokens[:-1] if tokens and tokens[-1].kind == "end" else tokens
    first = toks[0].text.lower() if toks else None
    root_call = len(toks) >= 2 and toks[0].kind == "name" and toks[1].text == "("
    start, w = (resume[0], resume[1].copy()) if resume is not None else (0, Walk())
    kept, window_end = None, False
    ops, fields, stack = w.ops, w.fields, w.stack
    for i in range(start, len(toks)):
        if i == mark:
            kept = w.copy()
        t = toks[i]
        w.after_root = w.after_root or w.root_closed
        nxt = toks[i + 1] if i + 1 < len(toks) else None
        if t.kind == "name":
            low = t.text.lower()
            if nxt is not None and nxt.text == "(":
                op = ALIASES.get(low, low)
                ops[op] = ops.get(op, 0) + 1
                w.nodes += 1
            elif nxt is None and t.pos + len(t.text) >= text_end:
                pass                                     # may still grow into another name
            elif low in FIELDS:
                fields.add(low)
                w.nodes += 1
            elif low.startswith("adv") and low[3:].isdigit():
                for op in ("ts_mean", "mul"):
                    ops[op] = ops.get(op, 0) + 1
                fields |= {"close", "volume"}
                w.nodes += 4
                w.longest = max(w.longest, float(low[3:]))
                w.ts_depth = max(w.ts_depth, w.ts_open + 1)
        elif t.kind == "num":
            op, k = stack[-1] if stack else (None, 0)
            spec = OPS.get(op) if op is not None else None
            # a literal is a node of its own but where a call reads it as a parameter (a window, scale's
            # target, min's d) or the call is unknown
            window = spec is not None and spec.kind == "ts" and k == spec.arity
            if op is None or (spec is not None and op not in PARAMETERS and not window):
                w.nodes += 1
            if window:
                w.longest = max(w.longest, t.value)
                window_end = i == len(toks) - 1 and t.pos + len(t.text) >= text_end
                if (op in SMOOTHERS and k == 1 and i >= 3 and toks[i - 1].text == ","
                        and toks[i - 2].kind == "name" and toks[i - 2].text.lower() in PRICE_LEVEL_FIELDS
                        and toks[i - 3].text == "("):
                    w.long_sum = (op, toks[i - 2].text.lower(), t.value) \
                        if w.long_sum is None or t.value > w.long_sum[2] else w.long_sum
        else:
            s = t.text
            prev = toks[i - 1] if i else None
            if s == "(":
                op = ALIASES.get(prev.text.lower(), prev.text.lower()) if prev is not None and prev.kind == "name" \
                    else None
                stack.append((op, 0))
                if op is not None and OPS.get(op) is not None and OPS[op].kind == "ts":
                    w.ts_open += 1
                    w.ts_depth = max(w.ts_depth, w.ts_open)
            elif s == ")":
                if stack:
                    op, _ = stack.pop()
                    if op is not None and OPS.get(op) is not None and OPS[op].kind == "ts":
                        w.ts_open -= 1
                    if not stack and root_call:
                        w.root_closed = True
            elif s == ",":
                if stack:
                    stack[-1] = (stack[-1][0], stack[-1][1] + 1)
            elif s == ":":
                w.ternary_open -= 1
            elif s == "-" and (prev is None or (prev.kind == "op" and prev.text != ")")):
                # unary: a literal's sign, or a neg node; surely one before a name (`dsl.parser`: `-name`)
                w.nodes += nxt is not None and nxt.kind == "name"
            elif s in _INFIX:
                op = _INFIX[s]
                w.ternary_open += s == "?"
                ops[op] = ops.get(op, 0) + 1
                w.nodes += 1
    last = toks[-1] if toks else None
    due = last is None or (last.pos + len(last.text) >= text_end if last.kind == "name"
                           else last.kind == "op" and last.text != ")")
    facts = Facts(ops, fields, w.longest, w.ts_depth, w.nodes, w.long_sum, first, root_call, w.root_closed,
                  w.after_root, w.ts_open, window_end, due,
                  w.ternary_open > 0 or any(_takes_another(op, k) for op, k in stack))
    return facts, kept


def _takes_another(op: str | None, k: int) -> bool:
    """Whether an open call at argument index `k` takes another operand after it (a window or a parameter is
    none; a parenthesis that opens no call takes none; an unknown call is given the benefit of the doubt)."""
    if op is None:
        return False
    spec = OPS.get(op)
    return spec is None or k < spec.arity - 1


def ended(f: Facts, name: str) -> Facts:
    """The facts `f` of a prefix once the name cut off at its end is written whole as `name` (a field,
    `adv<d>`, or a call `op(`), without lexing the prefix again."""
    if name.endswith("("):
        op = ALIASES.get(name[:-1], name[:-1])
        spec = OPS.get(op)
        # a time-series call nests one deeper than the ones open around it, as `scan` counts its '('
        ts = spec is not None and spec.kind == "ts"
        return replace(f, ops={**f.ops, op: f.ops.get(op, 0) + 1}, nodes=f.nodes + 1, operand_due=True,
                       ts_open=f.ts_open + ts, ts_depth=max(f.ts_depth, f.ts_open + 1) if ts else f.ts_depth)
    if re.fullmatch(r"adv\d+", name):                 # ts_mean(close * volume, d), as `scan` counts it
        ops = {**f.ops, "ts_mean": f.ops.get("ts_mean", 0) + 1, "mul": f.ops.get("mul", 0) + 1}
        return replace(f, ops=ops, fields=f.fields | {"close", "volume"}, nodes=f.nodes + 4,
                       max_window=max(f.max_window, float(name[3:])), ts_depth=max(f.ts_depth, f.ts_open + 1),
                       operand_due=False)
    if name in FIELDS:
        return replace(f, fields=f.fields | {name}, nodes=f.nodes + 1, operand_due=False)
    return f

