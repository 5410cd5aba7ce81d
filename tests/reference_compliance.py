"""The brief compliance check written independently, check by check, from the catalogue's specs: a reference
that the check derived from the contract's rules (`briefs.compliance.check`) must agree with, as
`tests/reference_eval.py` is the DSL evaluator's. Not used by the package."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from alphagym.briefs.contract import max_window, ts_nesting  # helpers that read the formula, not rules
from alphagym.dsl.ast import Call, Field, Node, walk
from alphagym.dsl.canonical import fields_used
from alphagym.dsl.registry import SMOOTHERS
from alphagym.panel import PRICE_LEVEL_FIELDS


def _op_counts(ast: Node) -> dict[str, int]:
    out: dict[str, int] = {}
    for n in walk(ast):
        if isinstance(n, Call):
            out[n.op] = out.get(n.op, 0) + 1
    return out


def check_spec(spec: Mapping[str, Any], ast: Node) -> str | None:
    """None when the formula satisfies every key of `spec`, else the first reason it does not."""
    ops = _op_counts(ast)
    fields = set(fields_used(ast)) - {"sector"}
    for group in spec.get("require_ops", []):
        if not any(op in ops for op in group):
            return f"needs one of {', '.join(group)}"
    for group in spec.get("require_fields", []):
        if not any(f in fields for f in group):
            return f"needs one of the fields {', '.join(group)}"
    bad = sorted(set(spec.get("forbid_ops", [])) & set(ops))
    if bad:
        return f"uses forbidden {', '.join(bad)}"
    bad = sorted(set(spec.get("forbid_fields", [])) & fields)
    if bad:
        return f"uses forbidden field {', '.join(bad)}"
    if "op_count" in spec:
        c = spec["op_count"]
        k = ops.get(c["op"], 0)
        if k < c.get("min", 0) or k > c.get("max", 10**9):
            want = f"exactly {c['min']}" if c.get("min") == c.get("max") else \
                f"at least {c['min']}" if "max" not in c else f"at most {c['max']}"
            return f"uses {c['op']} {k} times, wants {want}"
    if "root" in spec:
        root = ast.op if isinstance(ast, Call) else type(ast).__name__.lower()
        if root != spec["root"]:
            return f"outermost operator is {root}, wants {spec['root']}"
    if "forbid_long_price_sums" in spec:
        limit = int(spec["forbid_long_price_sums"])
        for n in walk(ast):
            if (isinstance(n, Call) and n.op in SMOOTHERS and (n.window or 0) > limit
                    and isinstance(n.args[0], Field) and n.args[0].name in PRICE_LEVEL_FIELDS):
                return f"{n.op}({n.args[0].name}, {n.window}) is a price sum over more than {limit} sessions"
    if "max_ts_nesting" in spec and ts_nesting(ast) > int(spec["max_ts_nesting"]):
        return f"nests {ts_nesting(ast)} time-series operators (at most {spec['max_ts_nesting']})"
    if "max_nodes" in spec:
        nodes = sum(1 for _ in walk(ast))
        if nodes > int(spec["max_nodes"]):
            return f"{nodes} nodes (at most {spec['max_nodes']})"
    if "distinct_fields" in spec:
        c, k = spec["distinct_fields"], len(fields)
        if k < c.get("min", 0) or k > c.get("max", 10**9):
            return f"uses {k} distinct fields"
    return None


def horizon_reason(ast: Node, target: int, tolerance: float) -> str | None:
    w = max_window(ast)
    lo, hi = target / (1.0 + tolerance), target * (1.0 + tolerance)
    if w is None:
        return "no time-series window"
    if not lo <= w <= hi:
        return f"longest window {w} is outside [{lo:.0f}, {hi:.0f}] around {target}"
    return None


def check(brief: Mapping[str, Any], ast: Node, catalogue: Any, tolerance: float) -> dict[str, bool]:
    """Compliance of a parsed formula with a brief (a row of the brief file: ids into the catalogue)."""
    reasons = {
        "mechanism": check_spec(catalogue.spec("mechanisms", brief["mechanism"]), ast),
        "horizon": horizon_reason(ast, int(brief["horizon"]), tolerance),
        "input_rule": check_spec(catalogue.spec("input_rules", brief["input_rule"]), ast),
        "structure": check_spec(catalogue.spec("structures", brief["structure"]), ast),
        "forbidden": check_spec(catalogue.spec("forbidden", brief["forbidden"]), ast),
    }
    return {k: r is None for k, r in reasons.items()}


def contradicts(c: Any, b: Mapping[str, Any]) -> bool:
    """True when one field forbids everything another requires (no formula could comply)."""
    specs = [c.spec("mechanisms", b["mechanism"]), c.spec("input_rules", b["input_rule"]),
             c.spec("structures", b["structure"]), c.spec("forbidden", b["forbidden"])]
    groups = lambda s, key: [set(g) for g in s.get(key, [])]  # noqa: E731
    forbid_ops = set().union(*(s.get("forbid_ops", []) for s in specs))
    forbid_fields = set().union(*(s.get("forbid_fields", []) for s in specs))
    need_ops = [g for s in specs for g in groups(s, "require_ops")]
    need_fields = [g for s in specs for g in groups(s, "require_fields")]
    if any(g <= forbid_ops for g in need_ops) or any(g <= forbid_fields for g in need_fields):
        return True
    for s in specs:
        cnt = s.get("op_count")
        if cnt and cnt["op"] in forbid_ops and cnt.get("min", 0) > 0:
            return True
        dist = s.get("distinct_fields")
        if dist and "max" in dist:
            disjoint = [g for g in need_fields if all(not (g & h) for h in need_fields if h is not g)]
            if len(disjoint) > dist["max"]:
                return True
    return False
