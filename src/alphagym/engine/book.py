"""Signal -> daily dollar-neutral book -> P&L, with the timing that keeps it honest.

Timing: the signal at close t becomes weights w[t] (rank, demean, gross 1); they are traded at open(t+1) and
earn open(t+1) -> open(t+2). So P&L row t is realised two sessions later; the last two rows have none.
Stocks without a signal get weight 0; a day with fewer than `min_valid` signals is flat.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba import njit

from alphagym.kernels import cs_rank


@njit(cache=True, error_model="numpy")
def _demean_scale(r: np.ndarray, min_valid: int) -> np.ndarray:
    """Per row: subtract the mean over stocks with a value, divide by the sum of |deviations|; rows with
    fewer than min_valid values, or all tied, are flat. The count is an integer and the sums run in four
    interleaved partial sums, so no pass waits on one long chain of dependent float additions."""
    t_len, n = r.shape
    w = np.zeros((t_len, n))
    for t in range(t_len):
        cnt = 0
        s0 = s1 = s2 = s3 = 0.0
        for i in range(0, n - 3, 4):
            a, b, c, d = r[t, i], r[t, i + 1], r[t, i + 2], r[t, i + 3]
            cnt += (a == a) + (b == b) + (c == c) + (d == d)
            s0 += a if a == a else 0.0
            s1 += b if b == b else 0.0
            s2 += c if c == c else 0.0
            s3 += d if d == d else 0.0
        for i in range(n - n % 4, n):
            v = r[t, i]
            cnt += v == v
            s0 += v if v == v else 0.0
        if cnt < min_valid:
            continue
        m = ((s0 + s1) + (s2 + s3)) / cnt
        g0 = g1 = g2 = g3 = 0.0
        for i in range(0, n - 3, 4):
            a, b, c, d = r[t, i], r[t, i + 1], r[t, i + 2], r[t, i + 3]
            g0 += abs(a - m) if a == a else 0.0
            g1 += abs(b - m) if b == b else 0.0
            g2 += abs(c - m) if c == c else 0.0
            g3 += abs(d - m) if d == d else 0.0
        for i in range(n - n % 4, n):
            v = r[t, i]
            g0 += abs(v - m) if v == v else 0.0
        g = (g0 + g1) + (g2 + g3)
        if g <= 1e-12:          # all ties: no opinion, flat
            continue
        for i in range(n):
            v = r[t, i]
            w[t, i] = (v - m) / g if v == v else 0.0
    return w


def weights_from_signal(signal: np.ndarray, min_valid: int = 2, ranked: bool = False) -> np.ndarray:
    """Rank across stocks with a value, subtract the mean, divide by sum |w| (long $ = short $ = 0.5).

    ranked=True: the signal is already the evaluator's cross-sectional rank (a formula whose root is
    `rank`). Ranking a rank returns it bit for bit (same order, same ties, same count), so the second rank,
    the costliest step of a book, is skipped; a test checks the equality.
    """
    r = np.ascontiguousarray(signal, dtype=np.float64)
    return _demean_scale(r if ranked else cs_rank(r), min_valid)


def forward_open_returns(opens: np.ndarray) -> np.ndarray:
    """fwd[t] = open[t+2] / open[t+1] - 1: what weights decided at close t earn. NaN where unknown."""
    fwd = np.full_like(opens, np.nan)
    fwd[:-2] = opens[2:] / opens[1:-1] - 1.0
    return fwd


@njit(cache=True)
def _turnover(w: np.ndarray) -> np.ndarray:
    t_len, n = w.shape
    out = np.zeros(t_len)
    for t in range(t_len):
        s = 0.0
        for i in range(n):
            prev = w[t - 1, i] if t > 0 else 0.0
            s += abs(w[t, i] - prev)
        out[t] = s
    return out


def turnover(w: np.ndarray) -> np.ndarray:
    """Sum_i |w[t] - w[t-1]| (1.0 = the whole gross book replaced); the first day trades in from cash."""
    return _turnover(w)


def market_forward(fwd: np.ndarray) -> np.ndarray:
    """Equal-weight return of the stocks over the book's holding period (T - 2 rows; NaN when none)."""
    f = fwd[:-2]
    ok = np.isfinite(f)
    cnt = ok.sum(axis=1)
    with np.errstate(all="ignore"):
        return np.where(cnt > 0, np.where(ok, f, 0.0).sum(axis=1) / cnt, np.nan)


@njit(cache=True, error_model="numpy")
def _gross_pnl(w: np.ndarray, fwd: np.ndarray) -> np.ndarray:
    t_len, n = w.shape
    out = np.zeros(max(t_len - 2, 0))
    for t in range(t_len - 2):
        s = 0.0
        for i in range(n):
            f = fwd[t, i]
            s += 0.0 if np.isnan(f) else w[t, i] * f
        out[t] = s
    return out


def gross_pnl(w: np.ndarray, fwd: np.ndarray) -> np.ndarray:
    """Daily gross P&L (fraction of gross book) for rows with realised forward returns (T - 2 rows)."""
    return _gross_pnl(np.ascontiguousarray(w, dtype=np.float64), np.ascontiguousarray(fwd, dtype=np.float64))


@njit(cache=True, error_model="numpy")
def _daily_ic(w: np.ndarray, fwd: np.ndarray) -> np.ndarray:
    t_len, n = w.shape
    out = np.full(max(t_len - 2, 0), np.nan)
    for t in range(t_len - 2):
        cnt = 0.0
        sw = 0.0
        sf = 0.0
        for i in range(n):
            ok = w[t, i] != 0.0 and np.isfinite(fwd[t, i])
            cnt += 1.0 if ok else 0.0
            sw += w[t, i] if ok else 0.0
            sf += fwd[t, i] if ok else 0.0
        if cnt < 3:
            continue
        mw = sw / cnt
        mf = sf / cnt
        num = 0.0
        vw = 0.0
        vf = 0.0
        for i in range(n):
            ok = w[t, i] != 0.0 and np.isfinite(fwd[t, i])
            dw = w[t, i] - mw if ok else 0.0
            df = fwd[t, i] - mf if ok else 0.0
            num += dw * df
            vw += dw * dw
            vf += df * df
        den = np.sqrt(vw * vf)
        if den > 0:
            out[t] = num / den
    return out


def daily_ic(w: np.ndarray, fwd: np.ndarray) -> np.ndarray:
    """Pearson correlation across stocks of w[t] with fwd[t], per day; NaN on flat or degenerate days."""
    return _daily_ic(np.ascontiguousarray(w, dtype=np.float64), np.ascontiguousarray(fwd, dtype=np.float64))


def sharpe(x: np.ndarray) -> float:
    """Annualised (sqrt 252) mean / population std; 0 when the std is 0 or there is no data."""
    if x.size == 0:
        return 0.0
    sd = float(x.std())
    return float(x.mean() / sd * np.sqrt(252.0)) if sd > 0 else 0.0


def max_drawdown(x: np.ndarray) -> float:
    """Largest peak-to-trough fall of cumulative (summed) returns, as a positive number."""
    if x.size == 0:
        return 0.0
    cum = np.cumsum(x)
    return float(np.max(np.maximum.accumulate(np.maximum(cum, 0.0)) - cum))


@njit(cache=True)
def _leg_names(w: np.ndarray) -> np.ndarray:
    t_len, n = w.shape
    out = np.zeros(t_len)
    for t in range(t_len):
        sl = ql = ss = qs = 0.0
        for i in range(n):      # selects, not branches: a book's signs are unpredictable (NaN selects 0)
            v = w[t, i]
            pos = v if v > 0 else 0.0
            neg = -v if v < 0 else 0.0
            sl += pos
            ql += pos * pos
            ss += neg
            qs += neg * neg
        if ql > 0 and qs > 0:
            out[t] = min(sl * sl / ql, ss * ss / qs)
    return out


def leg_names(weights: np.ndarray) -> np.ndarray:
    """Effective number of names of each day's thinner leg, shape (T,): for the long weights L and the
    short weights S of a day, min(PR(L), PR(S)) with the participation ratio PR(x) = (sum x)^2 / sum x^2
    (N names of equal weight: N; one name: 1). 0 on a day with an empty leg (a flat day); NaN weights
    count as 0. A ranked, demeaned book of 46 stocks has about 17 on each leg; `sign(rank(X) * rank(X))`,
    which demeaned is a short in the single lowest-ranked name, has 1. One pass per day (numba): the
    verifier reads it for every answer, and numpy's version made six (T, N) temporaries."""
    return _leg_names(np.ascontiguousarray(weights, dtype=np.float64))


@dataclass(frozen=True)
class Book:
    weights: np.ndarray      # (T, N)
    turnover: np.ndarray     # (T,)
    gross: np.ndarray        # (T-2,)
    cost: np.ndarray         # (T-2,)
    net: np.ndarray          # (T-2,)
    ic: np.ndarray           # (T-2,)
    flat: np.ndarray         # (T,) bool

    def metrics(self, market: np.ndarray, rows: np.ndarray | None = None) -> dict[str, float]:
        """Book metrics over the P&L rows selected by `rows` (all rows by default)."""
        rows = np.ones(len(self.net), bool) if rows is None else rows
        net, gross, cost, ic = self.net[rows], self.gross[rows], self.cost[rows], self.ic[rows]
        m = market[: len(self.net)][rows]
        ok = np.isfinite(m)
        beta = corr = 0.0
        if ok.sum() > 2 and np.var(m[ok]) > 0:
            c = np.cov(net[ok], m[ok], ddof=0)
            beta = float(c[0, 1] / c[1, 1])
            corr = float(c[0, 1] / np.sqrt(c[0, 0] * c[1, 1])) if c[0, 0] > 0 else 0.0
        ic = ic[np.isfinite(ic)]
        return {
            "sharpe_net": sharpe(net), "sharpe_gross": sharpe(gross),
            "annual_return_net": float(net.mean() * 252), "total_return_net": float(net.sum()),
            "max_drawdown": max_drawdown(net), "turnover": float(self.turnover[:-2][rows].mean()),
            "ic": float(ic.mean()) if ic.size else 0.0, "beta": beta, "market_corr": corr,
            "flat_share": float(self.flat[:-2][rows].mean()), "cost_annual": float(cost.mean() * 252),
        }
