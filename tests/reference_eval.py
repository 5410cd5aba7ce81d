"""The slow reference: the DSL's semantics written plainly with wide pandas DataFrames.

Uses pandas' built-in rolling operations wherever they exist (mean, std, sum, max, min, corr, cov, rank,
skew, kurt) and `rolling().apply(raw=True)` elsewhere, as a quant would write it, with each convention of
docs/dsl.md mapped explicitly (population moments, NaN windows, constant windows, rank normalisation).
Used by the equivalence tests and as the peer in benchmarks/bench_eval.py. Never used by the pipeline.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from alphagym.dsl.ast import Field, Node, Num
from alphagym.panel import Panel


def _clean(df: pd.DataFrame) -> pd.DataFrame:
    return df.where(np.isfinite(df.to_numpy()))


def _const(df: pd.DataFrame, d: int) -> pd.DataFrame:
    r = df.rolling(d)
    return r.max() == r.min()


def _rows(flags: pd.Series, like: pd.DataFrame) -> pd.DataFrame:
    """A per-day flag broadcast to a (days x stocks) frame."""
    return pd.DataFrame(np.repeat(flags.to_numpy()[:, None], like.shape[1], axis=1), index=like.index,
                        columns=like.columns)


def _apply(df: pd.DataFrame, d: int, fn) -> pd.DataFrame:
    return df.rolling(d).apply(fn, raw=True)


def _argext(d: int, is_max: bool):
    def fn(w):
        target = w.max() if is_max else w.min()
        last = np.flatnonzero(w == target)[-1]
        return d - 1 - last
    return fn


def _weights(kind: str, d: int) -> np.ndarray:
    if kind == "decay":
        w = np.arange(1, d + 1, dtype=float)
    else:
        a = 2.0 / (d + 1)
        w = (1 - a) ** np.arange(d - 1, -1, -1, dtype=float)
    return w / w.sum()


class ReferenceEvaluator:
    def __init__(self, panel: Panel) -> None:
        self.panel = panel
        self.frames = {k: pd.DataFrame(v) for k, v in panel.fields.items()}
        self.sectors = pd.Series(panel.sector_codes())

    def evaluate(self, node: Node) -> np.ndarray:
        return self._eval(node).to_numpy(dtype=float)

    def _eval(self, node: Node) -> pd.DataFrame:
        t, n = self.panel.shape
        if isinstance(node, Num):
            return pd.DataFrame(np.full((t, n), node.value))
        if isinstance(node, Field):
            return self.frames[node.name]
        a = [self._eval(x) for x in node.args]
        d = node.window
        op = node.op
        with np.errstate(all="ignore"):
            if op in _EW:
                return _clean(_EW[op](*a))
            if op in _CMP:
                out = _CMP[op](a[0], a[1]).astype(float)
                return out.where(a[0].notna() & a[1].notna())
            if op == "where":
                out = a[1].where(a[0] != 0, a[2])
                return _clean(out.where(a[0].notna()))
            if op == "rank":
                r = a[0].rank(axis=1, method="average")
                cnt = a[0].count(axis=1)
                out = r.sub(1.0).div((cnt - 1).replace(0, np.nan), axis=0)
                return out.where(~_rows(cnt == 1, out) | a[0].isna(), 0.5)
            if op == "scale":
                target = 1.0 if node.param is None else float(node.param)
                s = a[0].abs().sum(axis=1)
                out = a[0].mul(target).div(s.replace(0, np.nan), axis=0)
                out = out.where(~_rows(s == 0, out), 0.0)
                return _clean(out.where(a[0].notna()))
            if op == "indneutralize":
                means = a[0].T.groupby(self.sectors.to_numpy()).transform("mean").T
                return a[0] - means
            if op == "delay":
                return a[0].shift(d)
            if op == "ts_delta":
                return a[0] - a[0].shift(d)
            if op == "ts_sum":
                return a[0].rolling(d).sum()
            if op == "ts_mean":
                return a[0].rolling(d).mean()
            if op == "ts_std":
                return a[0].rolling(d).std(ddof=0).mask(_const(a[0], d), 0.0)
            if op == "ts_zscore":
                r = a[0].rolling(d)
                return _clean(((a[0] - r.mean()) / r.std(ddof=0)).mask(_const(a[0], d)))
            if op == "ts_corr":
                c = a[0].rolling(d).corr(a[1])
                return _clean(c.mask(_const(a[0], d) | _const(a[1], d)).clip(-1, 1))
            if op == "ts_cov":
                c = a[0].rolling(d).cov(a[1], ddof=0)
                return c.mask((_const(a[0], d) | _const(a[1], d)) & c.notna(), 0.0)
            if op == "ts_max":
                return a[0].rolling(d).max()
            if op == "ts_min":
                return a[0].rolling(d).min()
            if op in ("ts_argmax", "ts_argmin"):
                return _apply(a[0], d, _argext(d, op == "ts_argmax"))
            if op == "ts_rank":
                if d == 1:
                    return a[0].where(a[0].isna(), 0.5)
                return (a[0].rolling(d).rank(method="average") - 1.0) / (d - 1)
            if op == "ts_product":
                return _clean(_apply(a[0], d, np.prod))
            if op == "ts_skew":
                if d < 3:
                    return _apply(a[0], d, _pop_skew)
                g = a[0].rolling(d).skew() * (d - 2) / np.sqrt(d * (d - 1))
                return _clean(g.mask(_const(a[0], d)))
            if op == "ts_kurt":
                if d < 4:
                    return _apply(a[0], d, _pop_kurt)
                big = a[0].rolling(d).kurt()
                g = (big * (d - 2) * (d - 3) / (d - 1) - 6.0) / (d + 1)
                return _clean(g.mask(_const(a[0], d)))
            if op in ("ts_decay_linear", "ts_ema"):
                w = _weights("decay" if op == "ts_decay_linear" else "ema", d)
                return _apply(a[0], d, lambda v: float(np.dot(w, v)))
            if op == "ts_slope":
                if d == 1:
                    return a[0] * np.nan
                k = np.arange(d, dtype=float) - (d - 1) / 2.0
                return _apply(a[0], d, lambda v: float(np.dot(k, v) / np.dot(k, k)))
        raise NotImplementedError(op)


def _pop_skew(v: np.ndarray) -> float:
    c = v - v.mean()
    m2 = np.mean(c**2)
    return np.mean(c**3) / m2**1.5 if m2 > 0 and not np.all(v == v[0]) else np.nan


def _pop_kurt(v: np.ndarray) -> float:
    c = v - v.mean()
    m2 = np.mean(c**2)
    return np.mean(c**4) / m2**2 - 3.0 if m2 > 0 and not np.all(v == v[0]) else np.nan


def _sp(x, a):
    return _nan_in_nan_out(np.sign(x) * np.abs(x) ** a, x, a)


def _pow(a, b):
    return _nan_in_nan_out(a ** b, a, b)


def _nan_in_nan_out(out, a, b):
    """pow's NaN ^ 0 = 1 ^ NaN = 1 undone: element-wise operators map NaN in to NaN out (docs/dsl.md)."""
    missing = np.isnan(np.asarray(a, dtype=float)) | np.isnan(np.asarray(b, dtype=float))
    if not isinstance(out, pd.DataFrame):
        return np.nan if missing else out
    return out.mask(np.broadcast_to(missing, out.shape))


_EW = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "pow": _pow, "power": _pow,
    "neg": lambda a: -a, "abs": lambda a: a.abs(), "sign": lambda a: np.sign(a),
    "log": lambda a: np.log(a.where(a > 0)), "sqrt": lambda a: np.sqrt(a.where(a >= 0)),
    "signedpower": _sp,
    "min": lambda a, b: pd.DataFrame(np.minimum(a.to_numpy(), b.to_numpy())),
    "max": lambda a, b: pd.DataFrame(np.maximum(a.to_numpy(), b.to_numpy())),
}
_CMP = {
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "or": lambda a, b: (a != 0) | (b != 0), "and": lambda a, b: (a != 0) & (b != 0),
}
