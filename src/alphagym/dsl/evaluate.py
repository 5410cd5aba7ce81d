"""Evaluate an AST on a panel: (days x stocks) float64 in, (days x stocks) float64 out.

Common subexpressions are evaluated once per formula (frozen AST nodes are the cache keys). Every output
is finite or NaN: kernels map overflow, division by zero and invalid logs to NaN.

One result outlives a formula: the cross-sectional rank of a bare field (`rank(volume)`, `rank(close)`),
a function of the panel alone and the commonest leaf of the Alpha101 vocabulary (31 of its 169 distinct
ranks). It is computed on first use and kept read-only with the panel's fields, at most one array per
field, so a stream of formulas does not rank the same field again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from alphagym.dsl.ast import Call, Field, Node, Num
from alphagym.dsl.errors import UnavailableFieldError
from alphagym.dsl.registry import OPS
from alphagym.panel import DSL_FIELDS, Panel


@dataclass
class EvalContext:
    """What cross-sectional kernels need besides the arrays: the stock grouping (sector codes 0..G-1)."""
    codes: np.ndarray

    def group_codes(self) -> np.ndarray:
        return self.codes


def is_rank_root(node: Node) -> bool:
    """The formula's value is a cross-sectional rank (the book can skip ranking it again)."""
    return isinstance(node, Call) and node.op == "rank"


def is_field_rank(node: Node) -> bool:
    """`rank(<field>)`: depends on the panel only, so the evaluator keeps it across formulas."""
    return (isinstance(node, Call) and node.op == "rank" and len(node.args) == 1 and isinstance(node.args[0], Field)
            and node.window is None and node.param is None)


class Evaluator:
    """Built once per panel; `evaluate` may be called for many formulas (the field arrays are shared)."""

    def __init__(self, panel: Panel) -> None:
        self.panel = panel
        self.shape = panel.shape
        self.ctx = EvalContext(np.ascontiguousarray(panel.sector_codes(), dtype=np.int64))
        self.notes: list[str] = []
        self._field_ranks: dict[Node, np.ndarray] = {}

    def forget_field_ranks(self) -> None:
        """Drop the kept `rank(<field>)` arrays (benchmarks use it to time every evaluation from scratch)."""
        self._field_ranks.clear()

    def field(self, name: str, pos: int | None = None) -> np.ndarray:
        if name in self.panel.fields and (name in DSL_FIELDS or name == "cap"):
            return self.panel.fields[name]
        if name == "cap":
            raise UnavailableFieldError("field 'cap' (market capitalisation) is not in this panel; "
                                        "use a panel with a cap column or rewrite with dollar volume (adv{d})", pos)
        raise UnavailableFieldError(f"field {name!r} is not in this panel", pos)

    def evaluate(self, node: Node) -> np.ndarray:
        self.notes = []
        cache: dict[Node, np.ndarray] = {}
        out = self._eval(node, cache)
        return out if out.shape == self.shape else np.broadcast_to(out, self.shape).copy()

    def signal(self, node: Node) -> tuple[np.ndarray, bool]:
        """What a book is built from (`engine.scorer.BookScorer.net`, `.cpcv`): the formula's values and
        whether they already are a cross-sectional rank (`is_rank_root`), which the engine cannot tell from
        an array."""
        return self.evaluate(node), is_rank_root(node)

    def _eval(self, node: Node, cache: dict[Node, np.ndarray]) -> np.ndarray | np.float64:
        hit = cache.get(node)
        if hit is not None:
            return hit
        if isinstance(node, Num):
            out = np.float64(node.value)      # element-wise ufuncs broadcast it; no full array
        elif isinstance(node, Field):
            out = self.field(node.name)
        elif is_field_rank(node):
            out = self._field_ranks.get(node)
            if out is None:
                out = OPS["rank"].kernel([self._eval(node.args[0], cache)], None, None, self.ctx)
                out.flags.writeable = False
                self._field_ranks[node] = out
        else:
            assert isinstance(node, Call)
            args = [self._eval(a, cache) for a in node.args]
            if OPS[node.op].kind != "elem":
                args = [a if np.ndim(a) else np.full(self.shape, a) for a in args]
            if node.op == "indneutralize" and node.param not in (None, "sector"):
                note = f"IndClass.{node.param} falls back to sector, the finest grouping the panel has"
                if note not in self.notes:
                    self.notes.append(note)
            out = OPS[node.op].kernel(args, node.window, node.param, self.ctx)
        cache[node] = out
        return out
