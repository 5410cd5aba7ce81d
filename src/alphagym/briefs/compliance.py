"""Deterministic brief compliance: what a brief asks that can be checked on the formula itself.

Five checks, each pass/fail with a reason: the mechanism's signature (operators and fields it implies),
the horizon (the formula's longest window within a tolerance of the brief's), the input rule, the
structural hint (required operators or root) and the forbidden pattern. The risk preference is about the
book, not the formula, and is not checked here. Compliance is the share of checks passed; it is reported
wherever answers are scored, as the R14 `compliance` channel (rewarded when its priority is above 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from alphagym.briefs.catalogue import CHECKS, Catalogue
from alphagym.briefs.idea import IdeaCheck
from alphagym.dsl.ast import Call, Field, Node, walk
from alphagym.dsl.canonical import fields_used
from alphagym.dsl.registry import OPS, SMOOTHERS
from alphagym.panel import PRICE_LEVEL_FIELDS, Panel

# the probe's and the report's column of each check's pass rate
CHECK_COLUMNS = {k: f"compliance_{k}" for k in CHECKS}


@dataclass(frozen=True)
class Compliance:
    checks: dict[str, bool]
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    @property
    def share(self) -> float:
        return sum(self.checks.values()) / len(self.checks)


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


def check(brief: Mapping[str, Any], ast: Node, catalogue: Catalogue, tolerance: float) -> Compliance:
    """Compliance of a parsed formula with a brief (a row of the brief file: ids into the catalogue)."""
    reasons = {
        "mechanism": check_spec(catalogue.spec("mechanisms", brief["mechanism"]), ast),
        "horizon": horizon_reason(ast, int(brief["horizon"]), tolerance),
        "input_rule": check_spec(catalogue.spec("input_rules", brief["input_rule"]), ast),
        "structure": check_spec(catalogue.spec("structures", brief["structure"]), ast),
        "forbidden": check_spec(catalogue.spec("forbidden", brief["forbidden"]), ast),
    }
    return Compliance({k: r is None for k, r in reasons.items()}, {k: r for k, r in reasons.items() if r})


@dataclass(frozen=True)
class BriefChecker:
    """One brief's compliance check, as the verifier takes it (`Verifier.score_group(..., brief=...)`)."""

    brief: Mapping[str, Any]
    catalogue: Catalogue
    tolerance: float
    checks: tuple[str, ...] = CHECKS
    idea: IdeaCheck | None = None     # mechanism fidelity on the train panel (R15); None: not measured

    def check(self, ast: Node) -> Compliance:
        return check(self.brief, ast, self.catalogue, self.tolerance)

    @property
    def idea_tau(self) -> float:
        return self.catalogue.idea_tau

    def fidelity(self, ast: Node, signal: np.ndarray | None = None, panel: Panel | None = None) -> float | None:
        """A valid formula's fidelity to the brief's mechanism (`briefs.idea`), None without an idea check or a
        mechanism. `signal`: the formula's values on `panel`, read only when that is the idea check's panel."""
        if self.idea is None or "mechanism" not in self.brief:
            return None
        return self.idea.fidelity_of(ast, str(self.brief["mechanism"]), signal if panel is self.idea.panel else None)
