"""Numba kernels over (days x stocks) float64 arrays. Row t of every output reads only rows <= t.

Time-series kernels run one stock per thread (`prange` over columns); the cross-sectional rank runs one day
per thread. Streaming, O(1) per cell where an update rule exists:
- sums, mean, std, zscore, cov, corr: add/remove updates of values centred on an anchor, with an exact
  recompute of the whole window every d rows (amortised O(1)), so rounding cannot drift;
- decay_linear, slope (linear weights) and ema (exponential weights): the same update-and-recompute scheme;
- max, min, argmax, argmin: monotonic deques.
O(d) per cell where no exact streaming form exists: ts_rank, ts_product, ts_skew, ts_kurt.
A window holding any NaN, and the first d-1 rows, give NaN. Constant windows are detected exactly (run
length of equal values): std is exactly 0 there and correlation, zscore, skew and kurt are NaN.
Comparisons are written branch-free (integer counts) where it lets the compiler vectorise.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

NAN = np.nan

K_SUM, K_MEAN, K_STD, K_ZSCORE, K_COV, K_CORR = 0, 1, 2, 3, 4, 5
K_DECAY, K_SLOPE, K_EMA = 0, 1, 2
K_MAX, K_MIN, K_ARGMAX, K_ARGMIN = 0, 1, 2, 3
K_RANK, K_PRODUCT, K_SKEW, K_KURT = 0, 1, 2, 3


@njit(cache=True, parallel=True)
def ts_moments(x, y, d, kind):
    t_len, n = x.shape
    out = np.full((t_len, n), NAN)
    pair = kind >= K_COV
    for j in prange(n):
        ax = 0.0
        ay = 0.0
        sx = sy = sxx = syy = sxy = 0.0
        nan_cnt = 0
        runx = 0
        runy = 0
        for t in range(t_len):
            xv = x[t, j]
            yv = y[t, j] if pair else 0.0
            runx = runx + 1 if t > 0 and xv == x[t - 1, j] else 1
            if pair:
                runy = runy + 1 if t > 0 and yv == y[t - 1, j] else 1
            if np.isnan(xv) or (pair and np.isnan(yv)):
                nan_cnt += 1
            else:
                cx = xv - ax
                cy = yv - ay
                sx += cx
                sxx += cx * cx
                if pair:
                    sy += cy
                    syy += cy * cy
                    sxy += cx * cy
            if t >= d:
                ov = x[t - d, j]
                ow = y[t - d, j] if pair else 0.0
                if np.isnan(ov) or (pair and np.isnan(ow)):
                    nan_cnt -= 1
                else:
                    cx = ov - ax
                    cy = ow - ay
                    sx -= cx
                    sxx -= cx * cx
                    if pair:
                        sy -= cy
                        syy -= cy * cy
                        sxy -= cx * cy
            if (t + 1) % d == 0:      # exact recompute of the full window around a fresh anchor
                lo = t - d + 1
                cnt = 0
                mx = 0.0
                my = 0.0
                for k in range(lo, t + 1):
                    if not (np.isnan(x[k, j]) or (pair and np.isnan(y[k, j]))):
                        mx += x[k, j]
                        if pair:
                            my += y[k, j]
                        cnt += 1
                ax = mx / cnt if cnt > 0 else 0.0
                ay = my / cnt if cnt > 0 else 0.0
                sx = sy = sxx = syy = sxy = 0.0
                for k in range(lo, t + 1):
                    if not (np.isnan(x[k, j]) or (pair and np.isnan(y[k, j]))):
                        cx = x[k, j] - ax
                        sx += cx
                        sxx += cx * cx
                        if pair:
                            cy = y[k, j] - ay
                            sy += cy
                            syy += cy * cy
                            sxy += cx * cy
            if t < d - 1 or nan_cnt > 0:
                continue
            mean_x = sx / d
            if kind == K_SUM:
                out[t, j] = sx + d * ax
            elif kind == K_MEAN:
                out[t, j] = ax + mean_x
            elif kind == K_STD or kind == K_ZSCORE:
                const = runx >= d
                var = max(sxx / d - mean_x * mean_x, 0.0)
                if kind == K_STD:
                    out[t, j] = 0.0 if const else np.sqrt(var)
                elif not const and var > 0.0:
                    out[t, j] = (xv - (ax + mean_x)) / np.sqrt(var)
            else:
                const = runx >= d or runy >= d
                mean_y = sy / d
                cov = sxy / d - mean_x * mean_y
                if kind == K_COV:
                    out[t, j] = 0.0 if const else cov
                elif not const:
                    vx = sxx / d - mean_x * mean_x
                    vy = syy / d - mean_y * mean_y
                    if vx > 0.0 and vy > 0.0:
                        out[t, j] = min(1.0, max(-1.0, cov / np.sqrt(vx * vy)))
    return out


@njit(cache=True, parallel=True)
def ts_weighted(x, d, kind):
    """decay_linear (weights d..1, today d), slope (OLS on 0..d-1) or ema (weights (1-a)^k, a = 2/(d+1))."""
    t_len, n = x.shape
    out = np.full((t_len, n), NAN)
    q = 1.0 - 2.0 / (d + 1.0)
    qd = q ** d
    wsum_ema = 0.0
    for k in range(d):
        wsum_ema += q ** k
    tri = d * (d + 1) / 2.0
    sxx = d * (d * d - 1) / 12.0
    for j in prange(n):
        anchor = 0.0
        s = 0.0     # plain sum of centred values
        w = 0.0     # weighted sum of centred values
        nan_cnt = 0
        for t in range(t_len):
            v = x[t, j]
            c = 0.0
            if np.isnan(v):
                nan_cnt += 1
            else:
                c = v - anchor
            old = 0.0
            if t >= d:
                ov = x[t - d, j]
                if np.isnan(ov):
                    nan_cnt -= 1
                else:
                    old = ov - anchor
            if kind == K_EMA:
                w = q * w + c - qd * old
            elif t >= d:
                w = w - s + d * c
            else:
                w = w + (t + 1) * c
            s = s + c - old
            if (t + 1) % d == 0:      # exact recompute around a fresh anchor
                lo = t - d + 1
                cnt = 0
                m = 0.0
                for k in range(lo, t + 1):
                    if not np.isnan(x[k, j]):
                        m += x[k, j]
                        cnt += 1
                anchor = m / cnt if cnt > 0 else 0.0
                s = 0.0
                w = 0.0
                for k in range(lo, t + 1):
                    if not np.isnan(x[k, j]):
                        ck = x[k, j] - anchor
                        s += ck
                        w += (q ** (t - k) if kind == K_EMA else k - lo + 1.0) * ck
            if t < d - 1 or nan_cnt > 0:
                continue
            if kind == K_DECAY:
                out[t, j] = anchor + w / tri
            elif kind == K_EMA:
                out[t, j] = anchor + w / wsum_ema
            elif d > 1:
                out[t, j] = (w - s - (d - 1) / 2.0 * s) / sxx
    return out


SCAN_MAX_WINDOW = 14      # below this a plain scan beats the deque (measured: 0.39 vs 0.95 ms at d = 5)


@njit(cache=True, parallel=True)
def _ts_extreme_scan(x, d, kind):
    t_len, n = x.shape
    out = np.full((t_len, n), NAN)
    is_max = kind == K_MAX or kind == K_ARGMAX
    for j in prange(n):
        nan_cnt = 0
        for t in range(t_len):
            if np.isnan(x[t, j]):
                nan_cnt += 1
            if t >= d and np.isnan(x[t - d, j]):
                nan_cnt -= 1
            if t < d - 1 or nan_cnt > 0:
                continue
            best = x[t - d + 1, j]
            where = t - d + 1
            for k in range(t - d + 2, t + 1):
                v = x[k, j]
                if (v >= best) if is_max else (v <= best):      # >=: ties go to the most recent
                    best = v
                    where = k
            out[t, j] = best if (kind == K_MAX or kind == K_MIN) else t - where
    return out


def ts_extreme(x, d, kind):
    """Rolling max/min and sessions since it (0 = today, ties to the most recent): a plain scan for short
    windows, monotonic deques (O(1) per cell) for long ones. Both give identical results."""
    return _ts_extreme_scan(x, d, kind) if d <= SCAN_MAX_WINDOW else _ts_extreme_deque(x, d, kind)


@njit(cache=True, parallel=True)
def _ts_extreme_deque(x, d, kind):
    t_len, n = x.shape
    out = np.full((t_len, n), NAN)
    is_max = kind == K_MAX or kind == K_ARGMAX
    for j in prange(n):
        dq = np.empty(t_len, np.int64)
        head = 0
        tail = 0
        last_nan = -d - 1
        for t in range(t_len):
            v = x[t, j]
            if np.isnan(v):
                last_nan = t
                head = 0
                tail = 0
                continue
            if is_max:
                while tail > head and x[dq[tail - 1], j] <= v:
                    tail -= 1
            else:
                while tail > head and x[dq[tail - 1], j] >= v:
                    tail -= 1
            dq[tail] = t
            tail += 1
            while dq[head] <= t - d:
                head += 1
            if t < d - 1 or t - last_nan < d:
                continue
            if kind == K_MAX or kind == K_MIN:
                out[t, j] = x[dq[head], j]
            else:
                out[t, j] = t - dq[head]
    return out


@njit(cache=True, parallel=True)
def ts_window_scan(x, d, kind):
    """O(d) per cell: ts_rank (share of the other d-1 values below today, ties 1/2), product, skew, kurt."""
    t_len, n = x.shape
    out = np.full((t_len, n), NAN)
    for j in prange(n):
        nan_cnt = 0
        run = 0
        for t in range(t_len):
            v = x[t, j]
            if np.isnan(v):
                nan_cnt += 1
            if t >= d and np.isnan(x[t - d, j]):
                nan_cnt -= 1
            run = run + 1 if t > 0 and v == x[t - 1, j] else 1
            if t < d - 1 or nan_cnt > 0:
                continue
            lo = t - d + 1
            if kind == K_RANK:
                if d == 1:
                    out[t, j] = 0.5
                    continue
                less = 0
                equal = 0
                for k in range(lo, t):
                    w = x[k, j]
                    less += w < v
                    equal += w == v
                out[t, j] = (less + 0.5 * equal) / (d - 1)
            elif kind == K_PRODUCT:
                p = 1.0
                for k in range(lo, t + 1):
                    p *= x[k, j]
                out[t, j] = p
            elif run < d:               # constant window: moments undefined
                m = 0.0
                for k in range(lo, t + 1):
                    m += x[k, j]
                m /= d
                m2 = 0.0
                m3 = 0.0
                m4 = 0.0
                for k in range(lo, t + 1):
                    c = x[k, j] - m
                    c2 = c * c
                    m2 += c2
                    m3 += c2 * c
                    m4 += c2 * c2
                m2 /= d
                if m2 > 0.0:
                    out[t, j] = (m3 / d) / m2 ** 1.5 if kind == K_SKEW else (m4 / d) / (m2 * m2) - 3.0
    return out


@njit(cache=True, parallel=True)
def cs_rank(x):
    """Per row over non-NaN values: (average rank - 1) / (n - 1) in [0, 1]; a lone value gets 0.5.

    First pass counts only values strictly below (one comparison per pair); without ties those counts are
    a permutation of 0..n-1 and sum to n(n-1)/2. Only rows where the sum falls short have ties and get the
    second pass that also counts equal values.
    """
    t_len, n = x.shape
    out = np.full((t_len, n), NAN)
    less = np.zeros((t_len, n), np.int64)
    for t in prange(t_len):
        cnt = 0
        for i in range(n):
            cnt += not np.isnan(x[t, i])
        if cnt == 0:
            continue
        if cnt == 1:
            for i in range(n):
                if not np.isnan(x[t, i]):
                    out[t, i] = 0.5
            continue
        total = 0
        for i in range(n):
            v = x[t, i]
            c = 0
            for k in range(n):
                c += x[t, k] < v          # NaN compares false on either side
            less[t, i] = c
            if not np.isnan(v):
                total += c
        if total == cnt * (cnt - 1) // 2:
            for i in range(n):
                if not np.isnan(x[t, i]):
                    out[t, i] = less[t, i] / (cnt - 1)
            continue
        for i in range(n):
            v = x[t, i]
            if np.isnan(v):
                continue
            equal = 0
            for k in range(n):
                equal += x[t, k] == v
            out[t, i] = (less[t, i] + (equal - 1) / 2.0) / (cnt - 1)
    return out


@njit(cache=True, parallel=True)
def cs_scale(x, target):
    """Per row: target * x / sum(|x|) over non-NaN values; 0 where that sum is 0; NaN stays NaN."""
    t_len, n = x.shape
    out = np.empty((t_len, n))
    for t in prange(t_len):
        s = 0.0
        for i in range(n):
            v = x[t, i]
            if not np.isnan(v):
                s += abs(v)
        for i in range(n):
            v = x[t, i]
            if np.isnan(v):
                out[t, i] = NAN
            elif s > 0:
                r = target * v / s
                out[t, i] = r if np.isfinite(r) else NAN
            else:
                out[t, i] = 0.0
    return out


@njit(cache=True, parallel=True)
def cs_group_demean(x, codes, n_groups):
    """Per row: x minus the mean of its group (codes[i] in 0..n_groups-1) over the group's non-NaN values."""
    t_len, n = x.shape
    out = np.empty((t_len, n))
    sums = np.zeros((t_len, n_groups))
    counts = np.zeros((t_len, n_groups))
    for t in prange(t_len):
        for i in range(n):
            v = x[t, i]
            if not np.isnan(v):
                sums[t, codes[i]] += v
                counts[t, codes[i]] += 1.0
        for i in range(n):
            g = codes[i]
            out[t, i] = x[t, i] - sums[t, g] / counts[t, g] if counts[t, g] > 0 else NAN
    return out
