"""Seeded random formulas drawn from the registry: for property tests and non-triviality baselines."""

from __future__ import annotations

import numpy as np

from alphagym.dsl.errors import DegenerateError
from alphagym.dsl.parser import parse
from alphagym.dsl.registry import OPS
from alphagym.panel import DSL_FIELDS as _FIELDS

_INFIX = {spec.infix: name for name, spec in OPS.items() if spec.infix}


def random_formula(seed: int, max_depth: int = 4, max_window: int = 30) -> str:
    """A formula text the parser accepts, using every kind of operator; lookback stays small. A draw with a
    call the parser refuses as constant (`sign(close)`, `ts_corr(1, vwap, 18)`) is drawn again from a
    seed derived from `seed` and the attempt."""
    for attempt in range(100):
        text = _draw(np.random.default_rng(seed if attempt == 0 else [seed, attempt]), max_depth, max_window)
        try:
            parse(text)
        except DegenerateError:
            continue
        return text
    raise RuntimeError(f"random_formula: 100 draws from seed {seed} were all constant")


def _draw(rng: np.random.Generator, max_depth: int, max_window: int) -> str:
    ts_ops = [n for n, s in OPS.items() if s.kind == "ts"]
    unary = [n for n, s in OPS.items() if s.arity == 1 and s.kind in ("elem", "cs") and n != "neg"]

    def expr(depth: int) -> str:
        if depth <= 0 or rng.random() < 0.25:
            return str(rng.choice(_FIELDS)) if rng.random() < 0.85 else f"{rng.integers(1, 10)}"
        roll = rng.random()
        if roll < 0.4:
            op = str(rng.choice(ts_ops))
            w = int(rng.integers(1, max_window))
            args = [expr(depth - 1) for _ in range(OPS[op].arity)]
            return f"{op}({', '.join(args)}, {w})"
        if roll < 0.65:
            return f"{rng.choice(unary)}({expr(depth - 1)})"
        if roll < 0.9:
            sym = str(rng.choice(list(_INFIX)))
            return f"({expr(depth - 1)} {sym} {expr(depth - 1)})"
        return f"({expr(depth - 1)} ? {expr(depth - 1)} : {expr(depth - 1)})"

    return expr(max_depth)
