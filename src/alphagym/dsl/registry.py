"""The operator registry: one declarative row per operator (name, arity, kind, lookback rule, kernel, doc).

Everything the parser, the canonical form, the lookback check and the evaluator need to know about an
operator lives in its row; adding an operator is adding a row.
kind: 'elem' element-wise | 'cs' cross-sectional per day | 'ts' time series per stock (takes a window)
lookback: 'max' (max over children) | 'window' (+ d - 1) | 'shift' (+ d)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from alphagym import kernels as K
from alphagym.dsl import elementwise as E
from alphagym.panel import DSL_FIELDS

Array = np.ndarray


@dataclass(frozen=True)
class OpSpec:
    name: str
    arity: int                     # expression arguments (windows not counted)
    kind: str
    lookback: str
    kernel: Callable[..., Array]   # kernel(args, window, param, ctx) -> array
    doc: str
    commutative: bool = False
    infix: str | None = None       # symbol when printed infix
    sign: str = "?"                # what is known of the output's sign (`dsl.degenerate.sign_class`):
    # 'nonneg' never negative, may be 0 | 'abs' never negative, positive if the argument is never 0 |
    # 'spread' never negative, positive over a window of a continuous series | 'same' the first
    # argument's | 'even' the first argument's if it is never negative | 'product' of the two arguments' |
    # 'sum' theirs when they agree | 'neg' flipped | '?' unknown
    continuous: bool = False       # continuous in its arguments: continuous inputs give a value that is
    # exactly 0 (or tied) on almost no day (arithmetic, moments), unlike comparisons, ranks, argmax, sign
    smoother: bool = False         # an average or sum over its window: of a bare price over a long window, a
    # long price sum (`briefs.compliance`)
    signed: bool = False           # a relationship or a change, whose sign varies: a built witness wraps
    # `sign`/`rank` around such a term first (`sign` of a positive average is a constant)
    motif_wrapper: bool = False    # wraps one time-series motif without making it another (`verifier.channels`)
    parameter: bool = False        # its second argument may be a literal parameter rather than a node
    witness_rank: int | None = None  # preference among the operators a built witness may take, lowest first
    # (`briefs.witnesses.built`); None: never chosen for a witness
    draw_rank: int | None = None   # the corpus's draw order of its one-input time-series operators
    # (`policy.corpus`); None: after the ranked ones


def _ew(fn: Callable[..., Array], fill_literals: bool = True) -> Callable[..., Array]:
    """Element-wise kernel from `elementwise` (NaN in -> NaN out; inf/overflow -> NaN). The power functions
    keep literal exponents as scalars (numpy and `int_power` have fast paths for them)."""
    def run(args: list[Array], window: Any, param: Any, ctx: Any) -> Array:
        shapes = [np.shape(a) for a in args if np.ndim(a)]
        if fill_literals and shapes and len(shapes) < len(args):
            # a literal next to an array: a full array is faster than the ufunc's strided broadcast loop
            # (docs/notes/evaluator-performance.md)
            args = [a if np.ndim(a) else np.full(shapes[0], a) for a in args]
        with np.errstate(all="ignore"):
            return fn(*args)
    return run


def _scale(args: list[Array], window: Any, param: Any, ctx: Any) -> Array:
    return K.cs_scale(args[0], 1.0 if param is None else float(param))


def _indneutralize(args: list[Array], window: Any, param: Any, ctx: Any) -> Array:
    codes = ctx.group_codes()
    return K.cs_group_demean(args[0], codes, int(codes.max()) + 1 if len(codes) else 0)


def _ts(fn: Callable[..., Array], kind: int, pair: bool = False) -> Callable[..., Array]:
    def run(args: list[Array], window: int, param: Any, ctx: Any) -> Array:
        if pair:
            out = fn(args[0], args[1], window, kind)
        elif fn is K.ts_moments:
            out = fn(args[0], args[0], window, kind)
        else:
            out = fn(args[0], window, kind)
        return E.finite_or_nan(out, out=out) if kind == K.K_PRODUCT else out
    return run


def _delay(args: list[Array], window: int, param: Any, ctx: Any) -> Array:
    x = args[0]
    out = np.full_like(x, np.nan)
    if window < len(x):
        out[window:] = x[:-window]
    return out


def _delta(args: list[Array], window: int, param: Any, ctx: Any) -> Array:
    with np.errstate(all="ignore"):
        return E.sub(args[0], _delay(args, window, param, ctx))


_POWER = _ew(E.power, fill_literals=False)
_SIGNEDPOWER = _ew(E.signedpower, fill_literals=False)

_ROWS = [
    # element-wise
    OpSpec("add", 2, "elem", "max", _ew(E.add), "a + b", True, "+", sign="sum", continuous=True),
    OpSpec("sub", 2, "elem", "max", _ew(E.sub), "a - b", False, "-", continuous=True),
    OpSpec("mul", 2, "elem", "max", _ew(E.mul), "a * b", True, "*", sign="product", continuous=True),
    OpSpec("div", 2, "elem", "max", _ew(E.div), "a / b; NaN where b == 0", False, "/", sign="product", continuous=True,
           witness_rank=20),
    OpSpec("pow", 2, "elem", "max", _POWER, "a ^ b (binds tighter than *); NaN if not real", False, "^", sign="even",
           continuous=True),
    OpSpec("neg", 1, "elem", "max", _ew(E.neg), "-a", sign="neg", continuous=True, motif_wrapper=True),
    OpSpec("abs", 1, "elem", "max", _ew(E.absolute), "|x|", sign="abs", continuous=True),
    OpSpec("log", 1, "elem", "max", _ew(E.log), "natural log; NaN where x <= 0", continuous=True),
    OpSpec("sign", 1, "elem", "max", _ew(E.sign), "-1, 0 or 1", witness_rank=19, motif_wrapper=True),
    OpSpec("sqrt", 1, "elem", "max", _ew(E.sqrt), "square root; NaN where x < 0", sign="even", continuous=True),
    OpSpec("power", 2, "elem", "max", _POWER, "x ^ a", sign="even", continuous=True),
    OpSpec("signedpower", 2, "elem", "max", _SIGNEDPOWER, "sign(x) * |x| ^ a", sign="same", continuous=True),
    OpSpec("min", 2, "elem", "max", _ew(E.minimum), "element-wise minimum (min(x, literal) is ts_min)", True,
           sign="sum", parameter=True),
    OpSpec("max", 2, "elem", "max", _ew(E.maximum), "element-wise maximum (max(x, literal) is ts_max)", True,
           sign="sum", parameter=True),
    OpSpec("lt", 2, "elem", "max", _ew(E.lt), "1 if a < b else 0", False, "<", sign="nonneg"),
    OpSpec("le", 2, "elem", "max", _ew(E.le), "1 if a <= b else 0", False, "<=", sign="nonneg"),
    OpSpec("gt", 2, "elem", "max", _ew(E.gt), "1 if a > b else 0", False, ">", sign="nonneg"),
    OpSpec("ge", 2, "elem", "max", _ew(E.ge), "1 if a >= b else 0", False, ">=", sign="nonneg"),
    OpSpec("eq", 2, "elem", "max", _ew(E.eq), "1 if a == b else 0", True, "==", sign="nonneg"),
    OpSpec("ne", 2, "elem", "max", _ew(E.ne), "1 if a != b else 0", True, "!=", sign="nonneg"),
    OpSpec("or", 2, "elem", "max", _ew(E.logical_or), "1 if a or b is non-zero", True, "||", sign="nonneg"),
    OpSpec("and", 2, "elem", "max", _ew(E.logical_and), "1 if both non-zero", True, "&&", sign="nonneg"),
    OpSpec("where", 3, "elem", "max", _ew(E.where), "c ? a : b (NaN where c is NaN)"),
    # cross-sectional
    OpSpec("rank", 1, "cs", "max", lambda a, w, p, c: K.cs_rank(a[0]),
           "(average rank - 1) / (n - 1) over stocks with a value, ties averaged", sign="nonneg",
           witness_rank=18, motif_wrapper=True),
    OpSpec("scale", 1, "cs", "max", _scale, "x * a / sum(|x|) (a = 1 by default); 0 where the sum is 0",
           continuous=True, motif_wrapper=True, parameter=True),
    OpSpec("indneutralize", 1, "cs", "max", _indneutralize, "x minus its group (sector) mean", continuous=True,
           witness_rank=21),
    # time series (window d counted in sessions, today included)
    OpSpec("delay", 1, "ts", "shift", _delay, "x[t - d]", sign="same", continuous=True, witness_rank=17),
    OpSpec("ts_delta", 1, "ts", "shift", _delta, "x[t] - x[t - d]", continuous=True,
           witness_rank=5, draw_rank=4, signed=True),
    OpSpec("ts_sum", 1, "ts", "window", _ts(K.ts_moments, K.K_SUM), "sum of the last d values", sign="same",
           continuous=True, witness_rank=8, draw_rank=14, smoother=True),
    OpSpec("ts_mean", 1, "ts", "window", _ts(K.ts_moments, K.K_MEAN), "mean of the last d values", sign="same",
           continuous=True, witness_rank=0, draw_rank=0, smoother=True),
    OpSpec("ts_std", 1, "ts", "window", _ts(K.ts_moments, K.K_STD), "population std (ddof 0)", sign="spread",
           continuous=True, witness_rank=3, draw_rank=1),
    OpSpec("ts_zscore", 1, "ts", "window", _ts(K.ts_moments, K.K_ZSCORE), "(x - mean) / std; NaN if constant",
           continuous=True, witness_rank=4, draw_rank=2, signed=True),
    OpSpec("ts_corr", 2, "ts", "window", _ts(K.ts_moments, K.K_CORR, True),
           "Pearson correlation; NaN over a constant window", True, continuous=True, witness_rank=2, signed=True),
    OpSpec("ts_cov", 2, "ts", "window", _ts(K.ts_moments, K.K_COV, True), "population covariance", True,
           continuous=True, witness_rank=16, signed=True),
    OpSpec("ts_max", 1, "ts", "window", _ts(K.ts_extreme, K.K_MAX), "max of the last d values", sign="same",
           continuous=True, witness_rank=9, draw_rank=5),
    OpSpec("ts_min", 1, "ts", "window", _ts(K.ts_extreme, K.K_MIN), "min of the last d values", sign="same",
           continuous=True, witness_rank=10, draw_rank=6),
    OpSpec("ts_argmax", 1, "ts", "window", _ts(K.ts_extreme, K.K_ARGMAX),
           "sessions since the max (0 = today, ties to the most recent)", sign="nonneg", witness_rank=14, draw_rank=7),
    OpSpec("ts_argmin", 1, "ts", "window", _ts(K.ts_extreme, K.K_ARGMIN),
           "sessions since the min (0 = today, ties to the most recent)", sign="nonneg", witness_rank=15, draw_rank=8),
    OpSpec("ts_rank", 1, "ts", "window", _ts(K.ts_window_scan, K.K_RANK),
           "share of the other d-1 values strictly below today's, ties 1/2, in [0, 1]", sign="nonneg",
           witness_rank=1, draw_rank=3),
    OpSpec("ts_product", 1, "ts", "window", _ts(K.ts_window_scan, K.K_PRODUCT), "product of the last d values",
           sign="even", continuous=True),
    OpSpec("ts_skew", 1, "ts", "window", _ts(K.ts_window_scan, K.K_SKEW), "population skewness", continuous=True,
           witness_rank=12, draw_rank=11, signed=True),
    OpSpec("ts_kurt", 1, "ts", "window", _ts(K.ts_window_scan, K.K_KURT), "population excess kurtosis",
           continuous=True, witness_rank=13, draw_rank=12),
    OpSpec("ts_decay_linear", 1, "ts", "window", _ts(K.ts_weighted, K.K_DECAY),
           "weights d, d-1, ..., 1 (today d), normalised", sign="same", continuous=True,
           witness_rank=6, draw_rank=9, smoother=True),
    OpSpec("ts_ema", 1, "ts", "window", _ts(K.ts_weighted, K.K_EMA),
           "weights (1-a)^k over the last d values, a = 2/(d+1), normalised", sign="same", continuous=True,
           witness_rank=7, draw_rank=10, smoother=True),
    OpSpec("ts_slope", 1, "ts", "window", _ts(K.ts_weighted, K.K_SLOPE), "OLS slope on 0..d-1 (per session)",
           continuous=True, witness_rank=11, draw_rank=13, signed=True),
]

OPS: dict[str, OpSpec] = {row.name: row for row in _ROWS}
INFIX = {row.infix: row.name for row in _ROWS if row.infix}

# paper spellings -> canonical names (names are matched case-insensitively)
ALIASES = {
    "correlation": "ts_corr", "covariance": "ts_cov", "stddev": "ts_std", "delta": "ts_delta",
    "sum": "ts_sum", "product": "ts_product", "decay_linear": "ts_decay_linear",
    "ts_argmax": "ts_argmax", "ts_argmin": "ts_argmin", "ts_rank": "ts_rank",
}

FIELDS = (*DSL_FIELDS, "cap")    # cap: market capitalisation, read when a panel carries it
POSITIVE_FIELDS = frozenset(FIELDS) - {"returns"}     # prices, volume, vwap, cap: above 0 on every real day
GROUPS = ("sector", "industry", "subindustry")


# the subsets read off the rows' attributes
SMOOTHERS = frozenset(n for n, s in OPS.items() if s.smoother)
SIGNED = frozenset(n for n, s in OPS.items() if s.signed)
MOTIF_WRAPPERS = frozenset(n for n, s in OPS.items() if s.motif_wrapper)
PARAMETERS = frozenset(n for n, s in OPS.items() if s.parameter)
WITNESS_ORDER = tuple(sorted((n for n, s in OPS.items() if s.witness_rank is not None),
                             key=lambda n: OPS[n].witness_rank))


def draw_order(names: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    """`names` in the corpus's draw order (`draw_rank`; unranked ones last, in the order given)."""
    last = len(OPS)
    return tuple(sorted(names, key=lambda n: OPS[n].draw_rank if OPS[n].draw_rank is not None else last))


def ts_transforms(arity: int) -> tuple[str, ...]:
    """The time-series operators of `arity` expression arguments that compute something over their window,
    in registry order: delay is left out, as it only moves its argument back."""
    return tuple(n for n, s in OPS.items() if s.kind == "ts" and s.arity == arity and n != "delay")
