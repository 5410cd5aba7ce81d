"""A brief as a contract the decoder keeps (`policy.decoding: brief`).

`compile_brief` turns a brief's four checkable fields and its horizon (`briefs/compliance.py`) into a
`Contract`; `ContractChecker` is the grammar's prefix checker (`dsl.prefix.PrefixChecker`) with the
contract added, so the sampler that keeps answers grammatical keeps them compliant too:

- **An answer is done only when it complies**: `<alpha>FORMULA</alpha>` is 'done' when the formula parses
  and passes every hard check (`compliance.check`: mechanism, horizon, input rule, structure, forbidden);
  a formula that parses but breaks one is 'dead'. So every valid answer complies, by construction.
- **A prefix dies at the token that breaks a rule no continuation can repair** (`violation`, read off the
  prefix's tokens): a forbidden operator or field, an operator used more often than allowed, a window
  longer than the horizon allows, more distinct fields than allowed, a smoothed bare price over more
  sessions than allowed, time-series operators nested deeper than allowed, more nodes than allowed, an
  outermost operator other than the required one, an outermost call closed while a requirement is
  still unmet, or requirements unmet that need more distinct fields or nodes than the brief leaves
  (`fields_needed`, `nodes_needed`: lower bounds, never more than a compliant formula adds after any of its
  prefixes, which a test checks). These counts only grow as text is appended, so a prefix refused here has
  no compliant completion; that is what keeps the sampler from writing into a formula it would have to
  throw away. A name cut off at the end counts as each way it can end (`ended`, `_endings`): `vwa` under
  "two fields" after two fields is refused while it is written, not one token after it, when no
  continuation could save it.
- **Requirements the model has not met are met by the completion** ("must use volume", "exactly one
  ts_corr", the horizon's window): the closing search (`PrefixChecker.completion`) also tries appending
  a witness as an operand (` + W`): first one built for what the prefix still lacks within the room it
  leaves (`residual`), then the brief's own, short formulas that meet the whole contract by themselves;
  where a time-series call is open and the horizon's window still lacking, first that window (`, 168`). The
  witnesses come from a fixed library of small formulas (`library`) filtered by the contract's facts; a
  brief for which the library has none is a `BriefError` when it is compiled, which the brief generator
  never draws (`generate.contradicts`; a test checks that the two agree on every catalogue combination).

Whether a prefix has a compliant completion is not decided exactly (as the grammar's own viability is
not): a prefix the rules above keep may still find none in the search budget, and its answer then ends
invalid rather than non-compliant. The sampled distribution is the model's distribution restricted to the
tokens this checker keeps, renormalised (`policy.grammar`).
"""

from __future__ import annotations

import math
import random
import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from itertools import combinations
from typing import Any

import numpy as np

from alphagym.briefs.catalogue import CHECKS, FIELD_PART, Catalogue
from alphagym.briefs.compliance import check, max_window, ts_nesting
from alphagym.dsl.ast import Call, Field, Node, walk
from alphagym.dsl.canonical import fields_used
from alphagym.dsl.errors import DslError
from alphagym.dsl.lexer import Token
from alphagym.dsl.parser import Limits, parse
from alphagym.dsl.prefix import (
    _PARTIAL_NAME,
    FUNCTIONS,
    OPEN,
    OPERAND_DUE,
    PrefixChecker,
    halves_completed,
    last_blank,
)
from alphagym.dsl.registry import ALIASES, FIELDS, OPS, PARAMETERS, SIGNED, SMOOTHERS, WITNESS_ORDER, ts_transforms
from alphagym.errors import BriefError
from alphagym.panel import DSL_FIELDS, PRICE_LEVEL_FIELDS

_INFIX = {s.infix: n for n, s in OPS.items() if s.infix}
_INFIX["?"] = "where"
_INFIX_OPS = frozenset(_INFIX.values())
UNLIMITED = 10**9


@dataclass(frozen=True)
class Contract:
    """What a brief asks of a formula, merged over its fields. `window`: the range of the longest window."""

    require_ops: tuple[frozenset[str], ...] = ()
    require_fields: tuple[frozenset[str], ...] = ()
    forbid_ops: frozenset[str] = frozenset()
    forbid_fields: frozenset[str] = frozenset()
    op_counts: tuple[tuple[str, int, int], ...] = ()          # (op, min, max)
    root: str | None = None
    window: tuple[float, float] = (0.0, math.inf)
    long_price_sums: int | None = None
    max_ts_nesting: int = UNLIMITED
    max_nodes: int = UNLIMITED
    distinct_fields: tuple[int, int] = (0, UNLIMITED)


def merge_specs(specs: list[Mapping[str, Any]], horizon: int, tolerance: float) -> Contract:
    """One contract from the catalogue's check specs (one per brief field) and the brief's horizon."""
    get = lambda key: [s[key] for s in specs if key in s]              # noqa: E731
    dist = get("distinct_fields")
    sums = get("forbid_long_price_sums")
    return Contract(
        require_ops=tuple(frozenset(g) for s in specs for g in s.get("require_ops", [])),
        require_fields=tuple(frozenset(g) for s in specs for g in s.get("require_fields", [])),
        forbid_ops=frozenset(o for s in specs for o in s.get("forbid_ops", [])),
        forbid_fields=frozenset(f for s in specs for f in s.get("forbid_fields", [])),
        op_counts=tuple((c["op"], int(c.get("min", 0)), int(c.get("max", UNLIMITED))) for c in get("op_count")),
        root=(get("root") or [None])[0],
        window=(horizon / (1.0 + tolerance), horizon * (1.0 + tolerance)),
        long_price_sums=min(int(x) for x in sums) if sums else None,
        max_ts_nesting=min([int(x) for x in get("max_ts_nesting")], default=UNLIMITED),
        max_nodes=min([int(x) for x in get("max_nodes")], default=UNLIMITED),
        distinct_fields=(max([int(d.get("min", 0)) for d in dist], default=0),
                         min([int(d.get("max", UNLIMITED)) for d in dist], default=UNLIMITED)),
    )


def check_contracts(brief: Mapping[str, Any], catalogue: Catalogue, tolerance: float) -> dict[str, Contract]:
    """Each hard check's own part of a brief's contract, by check (`CHECKS`): its field's spec with no window
    asked, and the horizon's window alone. What a prefix has not met is named by check (`lacking`), though
    the decoder keeps the merged contract."""
    h = int(brief["horizon"])
    return {name: Contract(window=merge_specs([], h, tolerance).window) if name == "horizon" else
            replace(merge_specs([catalogue.spec(FIELD_PART[name], brief[name])], h, tolerance), window=(0.0, math.inf))
            for name in CHECKS if name in brief}


def brief_specs(brief: Mapping[str, Any], catalogue: Catalogue) -> list[Mapping[str, Any]]:
    return [catalogue.spec("mechanisms", brief["mechanism"]), catalogue.spec("input_rules", brief["input_rule"]),
            catalogue.spec("structures", brief["structure"]), catalogue.spec("forbidden", brief["forbidden"])]


# --- the facts of a prefix, read off its tokens ---

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
        return replace(f, ops={**f.ops, op: f.ops.get(op, 0) + 1}, nodes=f.nodes + 1, operand_due=True)
    if re.fullmatch(r"adv\d+", name):                 # ts_mean(close * volume, d), as `scan` counts it
        ops = {**f.ops, "ts_mean": f.ops.get("ts_mean", 0) + 1, "mul": f.ops.get("mul", 0) + 1}
        return replace(f, ops=ops, fields=f.fields | {"close", "volume"}, nodes=f.nodes + 4,
                       max_window=max(f.max_window, float(name[3:])), ts_depth=max(f.ts_depth, f.ts_open + 1),
                       operand_due=False)
    if name in FIELDS:
        return replace(f, fields=f.fields | {name}, nodes=f.nodes + 1, operand_due=False)
    return f


def unmet_ops(c: Contract, ops: Mapping[str, int]) -> list[frozenset[str]]:
    """The groups of required operators of which a formula with these operator counts uses none."""
    return [g for g in c.require_ops if not any(ops.get(o, 0) for o in g)]


def unmet(c: Contract, ops: Mapping[str, int], fields: set[str], longest: float) -> list[str]:
    """The requirements a formula with these facts has not met yet (empty: all met)."""
    out = [f"one of {sorted(g)}" for g in unmet_ops(c, ops)]
    out += [f"one of the fields {sorted(g)}" for g in c.require_fields if not (g & fields)]
    out += [f"{op} at least {lo} times" for op, lo, _ in c.op_counts if ops.get(op, 0) < lo]
    if len(fields - {"sector"}) < c.distinct_fields[0]:
        out.append(f"at least {c.distinct_fields[0]} fields")
    if longest < c.window[0]:
        out.append(f"a window of at least {math.ceil(c.window[0])}")
    return out


def nodes_needed(c: Contract, f: Facts) -> int:
    """The fewest nodes that text appended to a prefix with facts `f` adds to meet the requirements it has not
    met (a lower bound; `f.nodes` counts only nodes sure to be in the parse, so their sum bounds the whole
    formula's from below): an operator required is a call or infix node with an operand of its own (a literal
    is not an operand a call may take alone, `dsl.degenerate`), each call an operator count still lacks is one
    more, the horizon's window is a time-series call and its operand unless the text ends in a window's
    literal still being written or a time-series call is open (its window is still to come), and each field
    still needed (`fields_needed`) a node of its own."""
    groups = unmet_ops(c, f.ops)
    need = 2 if groups else 0
    lacking = sum(max(0, lo - f.ops.get(op, 0)) for op, lo, _ in c.op_counts)
    if lacking:
        need = max(need, lacking + 1)
    if f.max_window < c.window[0] and not f.window_end and not f.ts_open:
        need = max(need, 2)
    need = max(need, fields_needed(c, f))
    # what is added after a whole operand, where no open call takes another, is joined by an operator node,
    # counted above when it may be one the brief asks for
    joins = any(g & _INFIX_OPS for g in groups) or any(op in _INFIX_OPS and f.ops.get(op, 0) < lo
                                                         for op, lo, _ in c.op_counts)
    return need + 1 if need and not joins and not f.operand_due and not f.free_slot else need


def fields_needed(c: Contract, f: Facts) -> int:
    """The fewest distinct fields that text appended to a prefix with facts `f` adds: those the distinct-field
    minimum still lacks, or one per required group of fields the prefix lacks that shares no field with
    another counted (groups without a common field cannot be met by one field)."""
    apart: list[frozenset[str]] = []
    for g in c.require_fields:
        if not g & f.fields and not any(g & h for h in apart):
            apart.append(g)
    return max(c.distinct_fields[0] - len(f.fields - {"sector"}), len(apart))


def violation(c: Contract, f: Facts) -> str | None:
    """A broken rule that no appended text can repair, or None."""
    bad = sorted(c.forbid_ops & set(f.ops))
    if bad:
        return f"uses forbidden {', '.join(bad)}"
    bad = sorted(c.forbid_fields & f.fields)
    if bad:
        return f"uses forbidden field {', '.join(bad)}"
    for op, _, hi in c.op_counts:
        if f.ops.get(op, 0) > hi:
            return f"uses {op} more than {hi} times"
    if f.max_window > c.window[1]:
        return f"window {f.max_window:g} is longer than {c.window[1]:.0f}"
    if len(f.fields - {"sector"}) > c.distinct_fields[1]:
        return f"more than {c.distinct_fields[1]} distinct fields"
    if c.distinct_fields[1] < UNLIMITED and len(f.fields - {"sector"}) + fields_needed(c, f) > c.distinct_fields[1]:
        return f"no room left for the fields still required (at most {c.distinct_fields[1]} distinct fields)"
    if c.long_price_sums is not None and f.long_sum is not None and f.long_sum[2] > c.long_price_sums:
        return f"{f.long_sum[0]}({f.long_sum[1]}, {f.long_sum[2]:g}) is a long price sum"
    if f.ts_depth > c.max_ts_nesting:
        return f"nests {f.ts_depth} time-series operators"
    if f.nodes > c.max_nodes:
        return f"more than {c.max_nodes} nodes"
    if c.max_nodes < UNLIMITED and f.nodes + nodes_needed(c, f) > c.max_nodes:
        return f"a requirement unmet needs more than the {c.max_nodes - f.nodes} nodes left"
    if c.root is not None and f.first is not None:
        if not c.root.startswith(f.first) or (f.root_call and f.first != c.root):
            return f"outermost operator is not {c.root}"
        if f.after_root:
            return f"text after the outermost {c.root}(...)"
        if f.root_closed and unmet(c, f.ops, f.fields, f.max_window):
            return f"{c.root}( is closed with a requirement unmet"
    return None


def residual(c: Contract, f: Facts) -> Contract:
    """What an operand added to a prefix with facts `f` must bring for the whole to meet `c`, as a contract
    of its own (no root: the operand sits inside the formula): the requirements still unmet, the operator
    counts and the node and nesting room left, and no field beyond the distinct-field room left (counted as
    if the operand's fields were all new, so a witness of it never breaks the limit). A guide for the
    completion search, not a check: the completed answer is judged against `c` itself."""
    used = f.fields - {"sector"}
    lo_f, hi_f = c.distinct_fields
    forbid_fields, distinct = c.forbid_fields, (max(0, lo_f - len(used)), UNLIMITED)
    if distinct[0]:                      # fields the prefix lacks: the operand's must be new ones
        forbid_fields = forbid_fields | used
    if hi_f < UNLIMITED:
        if len(used) >= hi_f:
            forbid_fields = forbid_fields | (frozenset(DSL_FIELDS) - used)
        else:
            distinct = (distinct[0], hi_f - len(used))
    counts = tuple((op, max(0, lo - f.ops.get(op, 0)), hi - f.ops.get(op, 0) if hi < UNLIMITED else hi)
                   for op, lo, hi in c.op_counts)
    room = lambda limit, taken: limit - taken if limit < UNLIMITED else UNLIMITED      # noqa: E731
    return Contract(
        require_ops=tuple(unmet_ops(c, f.ops)),
        require_fields=tuple(g for g in c.require_fields if not g & f.fields),
        forbid_ops=c.forbid_ops | frozenset(op for op, _, hi in counts if hi <= 0),
        forbid_fields=forbid_fields,
        op_counts=tuple(x for x in counts if x[2] > 0),
        window=c.window,
        long_price_sums=c.long_price_sums,
        max_ts_nesting=room(c.max_ts_nesting, f.ts_open),
        max_nodes=room(c.max_nodes, f.nodes + 1),                   # + 1: the ` + ` that joins it
        distinct_fields=distinct,
    )


# --- witnesses: small formulas that meet a contract on their own ---

_LEAVES = (*DSL_FIELDS, "(high - low)", "(close - open)", "(close / vwap)", "(open / delay(close, 1))")
_TS1 = tuple(sorted(ts_transforms(1)))
_TS2 = ts_transforms(2)
_WRAPS = ("rank({x})", "sign({x})", "-{x}", "indneutralize({x}, IndClass.sector)", "ts_rank({x}, {s})",
          "ts_zscore({x}, {s})", "ts_decay_linear({x}, {s})", "ts_ema({x}, {s})", "ts_std({x}, {s})",
          "ts_max({x}, {s})", "ts_argmax({x}, {s})", "ts_delta({x}, {s})", "ts_mean({x}, {s}) / ts_mean({x}, {w})",
          "rank({x}) - rank(returns)", "rank({x}) - rank(volume)", "ts_slope({x}, {s})", "ts_kurt({x}, {s})",
          "ts_skew({x}, {s})", "ts_sum({x}, {s})")
_OP_INDEX = {op: i for i, op in enumerate(OPS)}
_FIELD_INDEX = {f: i for i, f in enumerate(DSL_FIELDS)}
# how two terms are joined into one witness: the template, and the operators it adds
_JOINS = (("{a}", {}), ("{a} + {b}", {"add": 1}), ("rank({a}) - rank({b})", {"sub": 1, "rank": 2}))
_POOL = 300            # the fewest-node terms that break no rule of the contract, paired with each other


def _templates() -> list[str]:
    """Terms with a main window `{w}` and a short one `{s}`: a core (a field, a composite, a time-series
    operator over one, a correlation of two fields), bare or under one wrapper."""
    cores = [*_LEAVES, *(f"{op}({x}, {{w}})" for op in _TS1 for x in _LEAVES),
             *(f"{op}({a}, {b}, {{w}})" for op in _TS2 for a, b in combinations(DSL_FIELDS, 2))]
    return [*cores, *(wrap.replace("{x}", core) for core in cores for wrap in _WRAPS)]


@dataclass(frozen=True)
class Library:
    """The witness terms and their facts, one row each, as arrays (a contract filters them at once)."""

    texts: tuple[str, ...]
    ops: np.ndarray            # terms x operators: count
    fields: np.ndarray         # terms x fields: used
    nesting: np.ndarray
    nodes: np.ndarray
    root: np.ndarray           # operator index of the root, -1 for a field
    price_sum: np.ndarray      # a smoother of a bare price field over the main window


@lru_cache(maxsize=1)
def library() -> Library:
    """Parsed once a process (about 5,000 terms; windows 20 and 5 stand for the main and short ones)."""
    texts, ops, fields, nesting, nodes, root, price_sum = [], [], [], [], [], [], []
    for t in _templates():
        try:
            ast = parse(t.replace("{w}", "20").replace("{s}", "5"))
        except DslError:
            continue
        row = np.zeros(len(_OP_INDEX), np.int16)
        for n in walk(ast):
            if isinstance(n, Call):
                row[_OP_INDEX[n.op]] += 1
        used = np.zeros(len(_FIELD_INDEX), bool)
        for f in fields_used(ast):
            if f in _FIELD_INDEX:
                used[_FIELD_INDEX[f]] = True
        texts.append(t)
        ops.append(row)
        fields.append(used)
        nesting.append(ts_nesting(ast))
        nodes.append(sum(1 for _ in walk(ast)))
        root.append(_OP_INDEX[ast.op] if isinstance(ast, Call) else -1)
        price_sum.append(any(isinstance(n, Call) and n.op in SMOOTHERS and n.window == 20
                             and isinstance(n.args[0], Field) and n.args[0].name in PRICE_LEVEL_FIELDS
                             for n in walk(ast)))
    return Library(tuple(texts), np.array(ops), np.array(fields), np.array(nesting), np.array(nodes),
                   np.array(root), np.array(price_sum))


def _windows(c: Contract, limits: Limits) -> list[tuple[int, int]]:
    """(main, short) window pairs whose main window is in the contract's range, nearest its middle first."""
    lo, hi = math.ceil(c.window[0] - 1e-9), min(math.floor(c.window[1] + 1e-9), limits.max_window)
    mid = round(math.sqrt(c.window[0] * c.window[1]))
    mains = sorted({x for x in (mid, lo, hi) if lo <= x <= hi}, key=lambda x: abs(x - mid))
    return [(w, s) for w in mains for s in (5, 2) if s <= w]


def witnesses(c: Contract, limits: Limits | None = None, k: int = 4) -> tuple[str, ...]:
    """Up to `k` formulas that meet the contract on their own (checked in full): those `built` for it,
    else the library's, fewest nodes first (one term, or two joined by `_JOINS`, under the required root
    when there is one). The library's search costs about 0.1 s a contract; every catalogue brief has a
    built witness (tests/test_contract.py), so it is the fallback for contracts written by hand."""
    limits = limits or Limits()
    out = tuple(dict.fromkeys(built(c, limits)))[:k]
    return out or _witnesses(c, limits, k)


# the fields a built witness takes first (its operators: the registry's `WITNESS_ORDER`)
_FIELD_ORDER = ("close", "returns", "volume", "high", "low", "open", "vwap")





def _piece(op: str, f: str, g: str, w: int, s: int) -> str:
    """One term that uses `op` (over field `f`, and `g` where it takes two inputs) with main window `w`."""
    spec = OPS[op]
    if op == "indneutralize":
        return f"indneutralize({f}, IndClass.sector)"
    if op == "div":
        return f"({f} / {g})"
    if spec.kind == "ts":
        return f"{op}({f}, {g}, {w})" if spec.arity == 2 else f"{op}({f}, {w})"
    if spec.infix:
        return f"({f} {spec.infix} {g})"
    return f"{op}({f})" if spec.arity == 1 else f"{op}({f}, {g})"


@lru_cache(maxsize=16384)
def built(c: Contract, limits: Limits, variant: int = 0) -> tuple[str, ...]:
    """Witnesses built for the contract, goal first: the fewest fields that meet its field requirements and
    counts, the fewest operators that meet its operator groups and counts (one that meets several groups
    first), each operator a term over those fields at the middle of the horizon's window range, the terms
    summed, wrappers (`rank`, `sign`, ...) around a time-series term, under the required root. The results
    differ in the order of the fields; each is kept only if it `holds`. `variant` k > 0 builds them the same
    way with the field and operator preferences shuffled and the main window drawn in the range, all by a
    generator seeded with k: as small, different terms (`ContractChecker.repairs` draws k per answer)."""
    windows = _windows(c, limits)
    if not windows:
        return ()
    w, s = windows[0]
    field_order, op_order = _FIELD_ORDER, WITNESS_ORDER
    if variant:
        rng = random.Random(variant)
        field_order = tuple(rng.sample(_FIELD_ORDER, len(_FIELD_ORDER)))
        op_order = tuple(rng.sample(WITNESS_ORDER, len(WITNESS_ORDER)))
        mains = [m for m, _ in windows]
        w = rng.randint(min(mains), max(mains))
        s = 5 if w >= 5 else 2                  # `_windows` has no main window below 2
    allowed = [f for f in field_order if f not in c.forbid_fields]
    fields: list[str] = []
    for g in c.require_fields:
        if not g & set(fields):
            pick = next((f for f in allowed if f in g), None)
            if pick is None:
                return ()
            fields.append(pick)
    groups = [set(g) - c.forbid_ops for g in c.require_ops]
    if any(not g for g in groups):
        return ()
    ops: list[str] = []
    while groups:
        best = min(set().union(*groups), key=lambda o: (-sum(o in g for g in groups),
                                                        op_order.index(o) if o in op_order else len(op_order), o))
        ops.append(best)
        groups = [g for g in groups if best not in g]
    for op, lo, _ in c.op_counts:
        ops += [op] * max(0, lo - ops.count(op) - (op == c.root))
    ts_ops = [o for o in ops if OPS[o].kind == "ts" and o != "delay"]
    if not ts_ops:                       # the horizon's window needs a time-series operator
        extra = next((o for o in op_order if OPS[o].kind == "ts" and o not in c.forbid_ops and o != "delay"
                      and all(o != op or hi > 0 for op, _, hi in c.op_counts)), None)
        if extra is None:
            return ()
        ops.append(extra)
    two = any(OPS[o].arity == 2 for o in ops)
    need = max(c.distinct_fields[0], len(fields), 2 if two and c.distinct_fields[1] >= 2 else 1)
    for f in allowed:
        if len(fields) >= need:
            break
        if f not in fields:
            fields.append(f)
    if not fields or len(fields) > c.distinct_fields[1]:
        return ()
    wraps = [o for o in ops if OPS[o].kind != "ts" and OPS[o].arity == 1 and o != "indneutralize"]
    terms = [o for o in ops if o not in wraps]
    out = []
    for shift in range(len(fields)):
        order = fields[shift:] + fields[:shift]
        # a smoother of a bare price field over a long window is a long price sum: smooth a non-price field
        long_sum = c.long_price_sums is not None and w > c.long_price_sums
        pieces = []
        for i, op in enumerate(terms):
            f = order[i % len(order)]
            if long_sum and op in SMOOTHERS and f in PRICE_LEVEL_FIELDS:
                f = next((x for x in order if x not in PRICE_LEVEL_FIELDS), f"rank({f})")
            g = next((x for x in order if x != f), f)
            pieces.append(_piece(op, f, g, w, s))
        try:
            used = set(fields_used(parse(" + ".join(pieces), limits))) if pieces else set()
        except DslError:                 # e.g. a correlation of the one field the contract leaves with itself
            continue
        pieces += [x for x in order if x not in used]
        # a wrapper goes around a term whose sign varies (`sign` of a positive average is a constant, which
        # the parser refuses): a relationship or a change first, then any time-series term
        heads = [p.split("(")[0] for p in pieces]
        targets = sorted(range(len(pieces)), key=lambda i: (heads[i] not in SIGNED, OPS.get(heads[i]) is None
                                                            or OPS[heads[i]].kind != "ts", i))
        for target in targets[: 1 + len(terms)] if wraps else [0]:
            wrapped = list(pieces)
            for op in wraps:
                wrapped[target] = f"{op}({wrapped[target]})"
            text = " + ".join(wrapped)
            if c.root is not None:
                text = f"{c.root}({text})"
            if meets(c, text, limits):
                out.append(text)
                break
    return tuple(out)


def _ix(names: frozenset[str] | set[str], index: dict[str, int]) -> list[int]:
    return [index[n] for n in sorted(names) if n in index]


@lru_cache(maxsize=4096)
def _witnesses(c: Contract, limits: Limits, k: int) -> tuple[str, ...]:
    lib = library()
    # the pool: terms that break no rule on their own, fewest nodes first
    keep = lib.nesting <= c.max_ts_nesting
    if c.forbid_ops:
        keep &= lib.ops[:, _ix(c.forbid_ops, _OP_INDEX)].sum(axis=1) == 0
    if c.forbid_fields:
        keep &= ~lib.fields[:, _ix(c.forbid_fields, _FIELD_INDEX)].any(axis=1)
    for op, _, hi in c.op_counts:
        keep &= lib.ops[:, _OP_INDEX[op]] <= hi
    if c.long_price_sums is not None and math.ceil(c.window[0] - 1e-9) > c.long_price_sums:
        keep &= ~lib.price_sum
    pool = np.array(sorted(np.flatnonzero(keep), key=lambda i: (lib.nodes[i], i))[:_POOL], int)
    if not len(pool):
        return ()
    ops, fields, nodes = lib.ops[pool].astype(int), lib.fields[pool], lib.nodes[pool]
    root_add = {c.root: 1} if c.root is not None else {}
    found: list[tuple[int, str]] = []
    for join, added in _JOINS:
        pair = "{b}" in join
        a_ix, b_ix = (np.repeat(np.arange(len(pool)), len(pool)), np.tile(np.arange(len(pool)), len(pool))) \
            if pair else (np.arange(len(pool)), None)
        extra = dict(added)
        rooted = c.root is not None and not (join.startswith(c.root + "(") and not pair)
        if rooted:
            for op, n in root_add.items():
                extra[op] = extra.get(op, 0) + n
        o = ops[a_ix] + (ops[b_ix] if pair else 0)
        for op, n in extra.items():
            o[:, _OP_INDEX[op]] += n
        f = fields[a_ix] | (fields[b_ix] if pair else False)
        size = nodes[a_ix] + (nodes[b_ix] + sum(added.values()) if pair else 0) + (1 if rooted else 0)
        ok = (size <= c.max_nodes) & (f.sum(axis=1) >= c.distinct_fields[0]) & (f.sum(axis=1) <= c.distinct_fields[1])
        if pair:
            ok &= a_ix < b_ix
        for g in c.require_ops:
            ok &= o[:, _ix(g, _OP_INDEX)].sum(axis=1) > 0
        for g in c.require_fields:
            ok &= f[:, _ix(g, _FIELD_INDEX)].any(axis=1)
        for op, lo, hi in c.op_counts:
            ok &= (o[:, _OP_INDEX[op]] >= lo) & (o[:, _OP_INDEX[op]] <= hi)
        for j in sorted(np.flatnonzero(ok), key=lambda j: (size[j], j))[: 8 * k]:
            text = join.replace("{a}", lib.texts[pool[a_ix[j]]])
            if pair:
                text = text.replace("{b}", lib.texts[pool[b_ix[j]]])
            if rooted:
                text = f"{c.root}({text})"
            found.append((int(size[j]), text))
    out: list[str] = []
    for _, text in sorted(found):
        for w, s in _windows(c, limits):
            formula = text.replace("{w}", str(w)).replace("{s}", str(s))
            if meets(c, formula, limits):
                out.append(formula)
                break
        if len(out) == k:
            break
    return tuple(out)


_WINDOW = re.compile(r"(?<=, )(\d+)(?=\))")


def idea_witnesses(c: Contract, references: tuple[str, ...], limits: Limits) -> tuple[str, ...]:
    """The mechanism's reference formulas (`briefs.idea`) made to meet the contract where they can: their
    windows of 5 sessions or more scaled so the longest is the horizon's (their ratios kept), under the
    required root; those that then hold. The completion search tries these first, so a requirement it
    supplies follows the brief's idea rather than merely naming its operators (a `built` witness for
    reversal is a price level)."""
    out = []
    for ref in references:
        longest = max((int(n) for n in _WINDOW.findall(ref) if int(n) >= 5), default=0)
        for w, _ in _windows(c, limits):
            if not longest:
                text = ref
            else:
                text = _WINDOW.sub(lambda m, w=w, top=longest: str(max(2, round(int(m.group(1)) * w / top)))
                                   if int(m.group(1)) >= 5 else m.group(1), ref)
            for cand in (text, f"{c.root}({text})" if c.root else None):
                if cand is None:
                    continue
                if meets(c, cand, limits):
                    out.append(cand)
                    break
            else:
                continue
            break
    return tuple(dict.fromkeys(out))


def meets(c: Contract, formula: str, limits: Limits) -> bool:
    """The formula parses within `limits` and passes every hard check of the contract."""
    try:
        return holds(c, parse(formula, limits))
    except DslError:
        return False


def holds(c: Contract, ast: Node) -> bool:
    """Every hard check of the contract, on a parsed formula."""
    ops: dict[str, int] = {}
    for n in walk(ast):
        if isinstance(n, Call):
            ops[n.op] = ops.get(n.op, 0) + 1
    fields = set(fields_used(ast)) - {"sector"}
    longest = max_window(ast)
    if longest is None or unmet(c, ops, fields, float(longest)):
        return False
    f = Facts(ops, fields, float(longest), ts_nesting(ast), sum(1 for _ in walk(ast)), None,
              ast.op if isinstance(ast, Call) else None, isinstance(ast, Call), False)
    if c.long_price_sums is not None:
        for n in walk(ast):
            if (isinstance(n, Call) and n.op in SMOOTHERS and (n.window or 0) > c.long_price_sums
                    and isinstance(n.args[0], Field) and n.args[0].name in PRICE_LEVEL_FIELDS):
                return False
    if c.root is not None and f.first != c.root:
        return False
    return violation(c, f) is None


def compile_brief(brief: Mapping[str, Any], catalogue: Catalogue, tolerance: float,
                  limits: Limits | None = None) -> Contract:
    """A brief's contract; a BriefError naming the brief when no formula of the witness library meets it
    (its fields contradict each other, or ask for more than a short formula can give)."""
    c = merge_specs(brief_specs(brief, catalogue), int(brief["horizon"]), tolerance)
    if not witnesses(c, limits, 1):
        fields = ", ".join(f"{k}={brief[k]}" for k in ("mechanism", "horizon", "input_rule", "structure", "forbidden"))
        name = f"brief {brief['id']}: " if brief.get("id") else ""
        raise BriefError(f"{name}no formula meets this brief ({fields}): its constraints cannot be kept together")
    return c


class ContractChecker(PrefixChecker):
    """The grammar's prefix checker with a brief's contract (module docstring): 'done' only for a compliant
    formula, 'dead' at a prefix that breaks a rule no continuation repairs, and witnesses among the pieces
    its completion search tries."""

    def __init__(self, contract: Contract, brief: Mapping[str, Any], catalogue: Catalogue, tolerance: float,
                 limits: Limits | None = None, fields: tuple[str, ...] = DSL_FIELDS,
                 share: PrefixChecker | None = None, walks: dict[str, tuple[int, Walk]] | None = None,
                 variants: int = 1) -> None:
        super().__init__(limits, fields, share=share)
        self.contract, self.brief, self.catalogue, self.tolerance = contract, brief, catalogue, tolerance
        self.variants = variants         # the witness variants `repairs` draws among (`policy.witness_variants`)
        # text before a whitespace -> (i, the walk before its token i) (`_scan`); a prefix's walk does not
        # depend on the brief, so the checkers of one decoder share theirs (`BriefContracts`)
        self.walks: dict[str, tuple[int, Walk]] = {} if walks is None else walks
        own = idea_witnesses(contract, catalogue.references(str(brief["mechanism"])), self.limits) \
            if "mechanism" in brief else ()
        self.witness_pieces = tuple(f" + {w}" for w in dict.fromkeys([*own, *witnesses(contract, self.limits)]))
        self._idea_share = len(set(own))            # the mechanism's own witnesses lead `witness_pieces`
        self._parts: dict[str, Contract] | None = None          # `check_contracts`, built when first asked

    def continues(self, formula: str) -> bool:
        # the contract's own rules first: reading the facts costs less than the prefix parse
        return self._keeps(formula) and self.viable(formula)

    def finishes(self, formula: str) -> bool:
        return self.complete(formula) and self._complies(formula)

    def _keeps(self, formula: str) -> bool:
        # a token cut in half is judged completed: 'x |' can only become 'x || ...', which a brief without
        # conditionals refuses (left open, it would be a dead end one token later)
        formula = halves_completed(formula)
        try:
            tokens = self._tokens(formula)
        except DslError:
            return True              # the grammar's own check decides
        f = self._scan(formula, tokens)
        if violation(self.contract, f) is not None:
            return False
        # a name cut off at the end (`vwa`, `vwap`) is not counted by `scan` (it may still grow): judge it as
        # each way it can end would be counted, so that a third field under "two fields" is refused before
        # the answer is written into it
        m = _PARTIAL_NAME.search(formula)
        return m is None or any(violation(self.contract, ended(f, name)) is None
                                for name in self._endings(m.group(0).lower(), f))

    def _endings(self, cut: str, f: Facts) -> list[str]:
        """The ways a cut-off name can end that the contract tells apart (`_completions` gives the parser one of
        each kind): every allowed field it can become (which field decides the distinct-field room), and a
        call that meets a requirement still unmet where one can be written from it."""
        c, out = self.contract, self._completions(cut)
        out += [x for x in self.fields if x.startswith(cut) and x not in out and self.allows(x)]
        wanted = {o for g in unmet_ops(c, f.ops) for o in g}
        wanted |= {op for op, lo, _ in c.op_counts if f.ops.get(op, 0) < lo}
        call = next((fn for fn in FUNCTIONS if fn.startswith(cut) and ALIASES.get(fn, fn) in wanted
                     and self.allows(ALIASES.get(fn, fn) + "(")), None)
        return out if call is None else [*out, call + "("]

    def _complies(self, formula: str) -> bool:
        ast = self.parsed(formula)
        if ast is None:
            return False
        return check(self.brief, ast, self.catalogue, self.tolerance).ok and holds(self.contract, ast)

    def _scan(self, formula: str, tokens: list[Token]) -> Facts:
        """`scan(tokens, len(formula))[0]`, resumed from the walk kept for the longest text before one of the
        formula's whitespace characters: each token the sampler tries, and each witness the completion search
        appends, changes only the end of an answer already read. The walk before the last token ahead of the
        formula's last whitespace is kept (that token is read with the one after it)."""
        end = last_blank(formula, len(formula))
        if end <= 0:
            return scan(tokens, len(formula))[0]
        cut, resume = end, self.walks.get(formula[:end])
        while resume is None and cut > 0:
            cut = last_blank(formula, cut)
            resume = self.walks.get(formula[:cut]) if cut > 0 else None
        toks = tokens[:-1] if tokens and tokens[-1].kind == "end" else tokens
        mark = len(toks)
        while mark and toks[mark - 1].pos >= end:
            mark -= 1
        mark -= 1                            # the last token before the whitespace is read with the one after it
        facts, kept = scan(tokens, len(formula), resume, mark if mark > 0 else None)
        if kept is not None:
            if len(self.walks) >= 100_000:
                self.walks.clear()
            self.walks[formula[:end]] = (mark, kept)
        return facts

    def allows(self, name: str) -> bool:
        c = self.contract
        if re.fullmatch(r"adv\d*", name):        # adv<d> reads ts_mean(close * volume, d) (`scan` counts it so)
            return not {"close", "volume"} & c.forbid_fields and self.allows("ts_mean(") and self.allows("mul(")
        if name.endswith("("):
            op = name[:-1]
            return op not in c.forbid_ops and all(o != op or hi > 0 for o, _, hi in c.op_counts)
        return name not in c.forbid_fields

    def _facts(self, text: str) -> tuple[str, Facts | None]:
        """An answer's formula so far and its facts (None where it does not lex)."""
        s = text.lstrip(" \t\n")
        body = s[len(OPEN):] if s.startswith(OPEN) else ""
        try:
            return body, self._scan(body, self._tokens(body))
        except DslError:
            return body, None

    def lacks(self, text: str) -> bool:
        f = self._facts(text)[1]
        return f is None or bool(unmet(self.contract, f.ops, f.fields, f.max_window))

    def lacking(self, text: str) -> tuple[str, ...]:
        """The checks whose own requirements (`check_contracts`) the answer `text` has not met; every check
        that asks for something where the formula does not lex."""
        if self._parts is None:
            self._parts = check_contracts(self.brief, self.catalogue, self.tolerance)
        f = self._facts(text)[1]
        if f is None:
            return tuple(n for n, c in self._parts.items() if unmet(c, {}, set(), 0.0))
        return tuple(n for n, c in self._parts.items() if unmet(c, f.ops, f.fields, f.max_window))

    def repairs(self, text: str) -> tuple[str, ...]:
        """A witness as the whole formula of an empty answer, or added as an operand (` + W`) while the
        formula has a requirement unmet; nothing once every requirement is met (the grammar closes it). A name
        at the end of `text` counts as written: the piece appended ends it (`-high` then ` + W` has used `high`,
        and W must bring the other field, not two)."""
        body, f = self._facts(text + " ")
        # the variant drawn for this answer: a hash of what it has written (so answers that differ get
        # different witnesses, and the same answer the same one: the search and its checks stay repeatable)
        k = zlib.crc32(body.encode()) % self.variants if self.variants > 1 else 0
        cut = self._idea_share                       # the idea's witnesses stay ahead of the generic ones
        own = _rotated(self.witness_pieces[:cut], k) + _rotated(self.witness_pieces[cut:], k)
        if not body.strip():
            return tuple(w[3:] for w in own)
        if f is None or not unmet(self.contract, f.ops, f.fields, f.max_window):
            return ()
        # first a witness of what is still missing (`residual`: `ts_corr(` under "exactly one ts_corr" takes
        # an operand without one; the drawn variant, then the first), then the brief's own
        need = residual(self.contract, f)
        pieces = tuple(dict.fromkeys([*(f" + {w}" for w in built(need, self.limits, k)),
                                      *(f" + {w}" for w in built(need, self.limits)), *own]))
        if body.rstrip()[-1:] in OPERAND_DUE:     # an operand is due: the witness is it (not ` + W`, a unary plus)
            return tuple(" " + w[3:] for w in pieces)
        if f.ts_open and f.max_window < self.contract.window[0]:
            # an open time-series call may take the horizon's window itself: no new node, under a node limit
            # the only way left
            return (f", {math.ceil(self.contract.window[0])}", *pieces)
        return pieces


def _rotated(items: tuple[str, ...], k: int) -> tuple[str, ...]:
    """`items` starting at its `k`-th (modulo its length)."""
    if not items:
        return items
    k %= len(items)
    return items[k:] + items[:k]


def brief_text(brief: str | Mapping[str, Any]) -> str:
    """The prompt of a brief: a bare text, or a brief record's `text`."""
    return brief if isinstance(brief, str) else str(brief.get("text", ""))


class BriefContracts:
    """The checker the decoder keeps for each prompt, compiled the first time it is asked for: a brief record
    (the fields the generator drew, with the `text` rendered from them: what the trainer, the probe, the SFT
    evaluation and `propose` pass) is compiled from its fields; a record without them, or a bare text (a
    user's own words), is answered under the grammar's own checker. A catalogue brief no formula can meet is
    a BriefError (`compile_brief`). A bare text is read back into fields (`generate.read_text`) only by
    `propose`, at the front door, before it gets here."""

    def __init__(self, catalogue: Catalogue, tolerance: float, limits: Limits | None = None,
                 fields: tuple[str, ...] = DSL_FIELDS, keep: int = 4096, variants: int = 1) -> None:
        self.catalogue, self.tolerance, self.fields, self.keep = catalogue, tolerance, fields, keep
        self.variants = variants
        self.grammar = PrefixChecker(limits, fields)
        self.limits = self.grammar.limits
        self._checkers: dict[tuple[str, ...], PrefixChecker] = {}
        self._walks: dict[str, tuple[int, Walk]] = {}

    def checker(self, brief: str | Mapping[str, Any]) -> PrefixChecker:
        if isinstance(brief, str) or not all(k in brief for k in CHECKS):
            return self.grammar
        key = (brief_text(brief), *(str(brief[k]) for k in CHECKS))
        ck = self._checkers.get(key)
        if ck is None:
            contract = compile_brief(brief, self.catalogue, self.tolerance, self.limits)
            ck = ContractChecker(contract, brief, self.catalogue, self.tolerance, self.limits, self.fields,
                                 share=self.grammar, walks=self._walks, variants=self.variants)
            if len(self._checkers) >= self.keep:        # a run's briefs are a few hundred; a bound all the same
                self._checkers.pop(next(iter(self._checkers)))
            self._checkers[key] = ck
        return ck

    def reads(self, brief: str | Mapping[str, Any]) -> bool:
        """Whether the decoder keeps this brief's contract (else: the grammar alone)."""
        return self.checker(brief) is not self.grammar
