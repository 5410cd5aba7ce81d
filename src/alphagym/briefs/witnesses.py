"""Witnesses: small formulas that meet a contract on their own, which the decoder appends as an operand where
an answer still lacks a requirement of its brief.

- `built`: built for the contract from its requirements (fields, then operators, then the horizon's window),
  with `variant` k > 0 drawing the preferences and the window by a generator seeded with k;
- `witnesses`: those, else the fewest-node pairs of a fixed term library (`library`);
- `idea_witnesses`: the mechanism's reference formulas scaled to the horizon.

Invariant: every witness returned `meets` the contract it was built for (each is checked whole before it is
kept), so appending one never breaks a rule it was built under.
"""


from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import combinations

import numpy as np

from alphagym.briefs.contract import Contract, meets, ts_nesting
from alphagym.dsl.ast import Call, Field, walk
from alphagym.dsl.canonical import fields_used
from alphagym.dsl.errors import DslError
from alphagym.dsl.parser import Limits, parse
from alphagym.dsl.registry import OPS, SIGNED, SMOOTHERS, WITNESS_ORDER, ts_transforms
from alphagym.panel import DSL_FIELDS, PRICE_LEVEL_FIELDS

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

