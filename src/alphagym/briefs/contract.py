"""A brief as a contract: what its fields ask of a formula, merged into one `Contract`, and the rules that
judge a formula, whole or in part, against it.

- `merge_specs` and `check_contracts`: the catalogue's check specs of a brief's fields (`briefs/catalogue.yaml`)
  and its horizon, merged (the decoder's contract) and by check (which check a prefix still lacks).
- `holds` / `meets`: every hard check on a whole formula. Invariant: a formula `holds` exactly when
  `briefs.compliance.check` passes it (tests/test_contract.py checks them side by side).
- `unmet`: the requirements a formula's facts (`briefs.facts`) have not met yet; `violation`: the first rule
  they break that no appended text can repair. Invariant: the counts these read only grow as text is
  appended, so a prefix with a violation has no compliant completion, and `nodes_needed` / `fields_needed`
  are lower bounds, never more than a compliant formula adds after any of its prefixes.
- `residual`: what an operand appended to a prefix must bring, as a contract of its own (a guide for the
  witnesses, never a check).
"""


from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from alphagym.briefs.catalogue import CHECKS, FIELD_PART, Catalogue
from alphagym.briefs.facts import Facts
from alphagym.dsl.ast import Call, Field, Node, walk
from alphagym.dsl.canonical import fields_used
from alphagym.dsl.errors import DslError
from alphagym.dsl.parser import Limits, parse
from alphagym.dsl.registry import INFIX, OPS, SMOOTHERS
from alphagym.panel import DSL_FIELDS, PRICE_LEVEL_FIELDS

_INFIX_OPS = frozenset({*INFIX.values(), "where"})
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


def spec_contract(spec: Mapping[str, Any]) -> Contract:
    """One catalogue entry's check (`Catalogue.spec`) as a contract of its own, asking no window."""
    return replace(merge_specs([spec], 1, 0.0), window=(0.0, math.inf))


def horizon_contract(horizon: int, tolerance: float) -> Contract:
    """The horizon check as a contract: the longest window within `tolerance` of `horizon`, nothing else."""
    return Contract(window=merge_specs([], horizon, tolerance).window)


def check_contracts(brief: Mapping[str, Any], catalogue: Catalogue, tolerance: float) -> dict[str, Contract]:
    """Each hard check's own part of a brief's contract, by check (`CHECKS`): its field's spec with no window
    asked, and the horizon's window alone. The compliance check judges each (`compliance.check`), and what a
    prefix has not met is named by check (`lacking`), though the decoder keeps the merged contract."""
    return {name: horizon_contract(int(brief["horizon"]), tolerance) if name == "horizon" else
            spec_contract(catalogue.spec(FIELD_PART[name], brief[name])) for name in CHECKS if name in brief}


def contradiction(c: Contract) -> str | None:
    """Why no formula can meet the contract on its fields' rules alone, or None: a required group all of
    whose operators or fields are forbidden, a required operator count of a forbidden operator, or more
    required field groups with no field in common than the distinct-field limit allows."""
    for g in c.require_ops:
        if g <= c.forbid_ops:
            return f"every operator of {sorted(g)} is forbidden"
    for g in c.require_fields:
        if g <= c.forbid_fields:
            return f"every field of {sorted(g)} is forbidden"
    for op, lo, _ in c.op_counts:
        if lo > 0 and op in c.forbid_ops:
            return f"{op} is both required and forbidden"
    apart = [g for g in c.require_fields if all(not (g & h) for h in c.require_fields if h is not g)]
    if len(apart) > c.distinct_fields[1]:
        return f"{len(apart)} field groups apart, at most {c.distinct_fields[1]} distinct fields"
    return None


def brief_specs(brief: Mapping[str, Any], catalogue: Catalogue) -> list[Mapping[str, Any]]:
    return [catalogue.spec("mechanisms", brief["mechanism"]), catalogue.spec("input_rules", brief["input_rule"]),
            catalogue.spec("structures", brief["structure"]), catalogue.spec("forbidden", brief["forbidden"])]


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


def meets(c: Contract, formula: str, limits: Limits) -> bool:
    """The formula parses within `limits` and passes every hard check of the contract."""
    try:
        return holds(c, parse(formula, limits))
    except DslError:
        return False


def max_window(ast: Node) -> int | None:
    """The longest window of any time-series operator (adv{d} included), or None without one."""
    ws = [n.window for n in walk(ast) if isinstance(n, Call) and n.window is not None]
    return max(ws) if ws else None


def ts_nesting(ast: Node) -> int:
    """Time-series operators on the deepest path."""
    def depth(n: Node) -> int:
        if not isinstance(n, Call):
            return 0
        inner = max((depth(a) for a in n.args), default=0)
        return inner + (OPS[n.op].kind == "ts")
    return depth(ast)


def whole_facts(ast: Node) -> tuple[Facts, bool]:
    """A whole formula's facts (those `scan` reads off a prefix, for the finished parse), and whether it has
    a window at all."""
    ops: dict[str, int] = {}
    long_sum: tuple[str, str, float] | None = None
    for n in walk(ast):
        if isinstance(n, Call):
            ops[n.op] = ops.get(n.op, 0) + 1
            if (n.op in SMOOTHERS and isinstance(n.args[0], Field) and n.args[0].name in PRICE_LEVEL_FIELDS
                    and (long_sum is None or (n.window or 0) > long_sum[2])):
                long_sum = (n.op, n.args[0].name, float(n.window or 0))
    longest = max_window(ast)
    f = Facts(ops, set(fields_used(ast)) - {"sector"}, float(longest or 0), ts_nesting(ast),
              sum(1 for _ in walk(ast)), long_sum, ast.op if isinstance(ast, Call) else None,
              isinstance(ast, Call), isinstance(ast, Call))
    return f, longest is not None


def failure(c: Contract, f: Facts, windowed: bool) -> str | None:
    """The first hard rule of `c` a whole formula with facts `f` (`whole_facts`) breaks, or None: the one
    statement of the rules, which the compliance check (per check, `check_contracts`), the decoder's
    'done' (the merged contract) and the witnesses' test (`holds`) all read. A requirement unmet
    (`unmet`), the outermost operator, then every rule a prefix may break (`violation`)."""
    if c.window[0] > 0 and not windowed:
        return "no time-series window"
    missing = unmet(c, f.ops, f.fields, f.max_window)
    if missing:
        return f"needs {missing[0]}"
    if c.root is not None and f.first != c.root:
        return f"outermost operator is {f.first or 'no call'}, wants {c.root}"
    return violation(c, f)


def holds(c: Contract, ast: Node) -> bool:
    """Every hard check of the contract, on a parsed formula."""
    return failure(c, *whole_facts(ast)) is None

