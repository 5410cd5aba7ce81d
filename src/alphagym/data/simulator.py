"""The embedded market simulator: a seeded daily OHLCV market that looks like one to a quant.

Structure (all documented in the ground-truth file it writes beside the prices):
- a market factor, sector factors and idiosyncratic shocks, each a GARCH(1,1) with Student-t innovations;
- a two-state regime chain (calm / crisis): in a crisis the market factor's volatility rises more than
  the idiosyncratic one, so the mean pairwise correlation rises and the effective dimension falls;
- an overnight / intraday split of every shock, with rare overnight jumps (earnings-like gaps);
- high and low drawn outside [min(open, close), max(open, close)] with intraday volatility;
- dollar volume: a per-stock level (an order of magnitude apart), a slow and a fast AR(1) component (real
  volume autocorrelation drops fast over a few days, then decays slowly), and a saturating response to the
  day's absolute return;
- planted cross-sectional effects (`EFFECTS`, strengths in `simulator.effects.planted`), each tied to one
  mechanism of the brief catalogue and acting on the next day's intraday return through the standardised
  cross-sectional rank of its signal at today's close: many small, mostly independent edges that survive
  the holdout costs, so a learner that finds several looks different from one that re-finds one; decoys
  that look good in part of the train window and are gone by the holdout (one decays through the train
  years, one pays only in crises); mechanisms with no effect at all; and two traps: betas that pay only in
  rising markets, and price levels with no predictive power. The ground truth lists every one of them.

Why hand-written: no library simulates a cross-section with planted, documented alpha.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from alphagym.data.calendar import sessions
from alphagym.params import Simulator

SQRT252 = np.sqrt(252.0)


@dataclass(frozen=True)
class SimulatedMarket:
    prices: pd.DataFrame          # long: date, ticker, open, high, low, close, volume, ...
    sectors: dict[str, str]
    ground_truth: dict[str, Any]


@dataclass(frozen=True)
class PlantedEffect:
    """One planted effect: the catalogue mechanism it belongs to, the DSL formula that expresses it exactly
    (the ground truth's planted formula), the days of history it needs, and its signal at the close of day
    `t` from the price arrays up to `t` (days x stocks; `sec` the sector code of each stock)."""

    mechanism: str
    formula: str
    lookback: int
    signal: Any


def _window(x: np.ndarray, t: int, w: int) -> np.ndarray:
    return x[t - w + 1:t + 1]


def _skew(x: np.ndarray) -> np.ndarray:
    d = x - x.mean(axis=0)
    m2 = (d * d).mean(axis=0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(m2 > 0, (d ** 3).mean(axis=0) / m2 ** 1.5, 0.0)


def _corr(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Pearson correlation of each column pair (population moments; 0 where either is constant)."""
    dx, dy = x - x.mean(axis=0), y - y.mean(axis=0)
    den = np.sqrt((dx * dx).mean(axis=0) * (dy * dy).mean(axis=0))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, (dx * dy).mean(axis=0) / den, 0.0)


def _sector_demeaned(x: np.ndarray, sec: np.ndarray) -> np.ndarray:
    means = np.bincount(sec, weights=x) / np.bincount(sec)
    return x - means[sec]


# the brief catalogue's mechanisms (briefs/catalogue.yaml; a test keeps the two equal): the ground truth
# names those that carry no planted effect
MECHANISMS = ("reversal", "volume_variability", "price_volume_divergence", "mixed_extremes", "intraday_pressure",
              "overnight_gap", "volatility_regime", "trend_persistence", "volume_surge", "vwap_deviation",
              "return_asymmetry", "tail_risk", "sector_relative", "extreme_recency", "smoothed_flow",
              "liquidity_level", "range_expansion")

# name -> the effect; arrays: lc log close, o open, h high, lo low, v volume, r simple return (close to close)
EFFECTS: dict[str, PlantedEffect] = {
    "reversal": PlantedEffect(
        "reversal", "rank(-ts_delta(log(close), 5))", 5,
        lambda a, t, sec: -(a["lc"][t] - a["lc"][t - 5])),
    "lagged_reversal": PlantedEffect(       # the last 5 days skipped: little overlap with gap and intraday
        "reversal", "rank(-delay(ts_delta(log(close), 15), 5))", 20,
        lambda a, t, sec: -(a["lc"][t - 5] - a["lc"][t - 20])),
    "volume_variability": PlantedEffect(
        "volume_variability", "rank(ts_std(volume, 20) / ts_mean(volume, 20))", 19,
        lambda a, t, sec: _window(a["v"], t, 20).std(axis=0) / _window(a["v"], t, 20).mean(axis=0)),
    "overnight_gap": PlantedEffect(
        "overnight_gap", "rank(-ts_mean(open / delay(close, 1), 5))", 5,
        lambda a, t, sec: -(_window(a["o"], t, 5) / np.exp(_window(a["lc"], t - 1, 5))).mean(axis=0)),
    "intraday_pressure": PlantedEffect(
        "intraday_pressure", "rank(ts_mean((high - close) / (high - low), 5))", 4,
        lambda a, t, sec: ((_window(a["h"], t, 5) - np.exp(_window(a["lc"], t, 5)))
                           / (_window(a["h"], t, 5) - _window(a["lo"], t, 5))).mean(axis=0)),
    "volatility_regime": PlantedEffect(
        "volatility_regime", "rank(ts_std(returns, 60) / ts_std(returns, 10))", 60,
        lambda a, t, sec: _window(a["r"], t, 60).std(axis=0) / _window(a["r"], t, 10).std(axis=0)),
    "extreme_recency": PlantedEffect(
        "extreme_recency", "rank(ts_argmax(volume, 20))", 19,
        lambda a, t, sec: np.argmax(_window(a["v"], t, 20)[::-1], axis=0).astype(float)),
    "range_expansion": PlantedEffect(
        "range_expansion", "rank(ts_max(high - low, 10) / ts_mean(high - low, 10))", 9,
        lambda a, t, sec: ((_window(a["h"], t, 10) - _window(a["lo"], t, 10)).max(axis=0)
                           / (_window(a["h"], t, 10) - _window(a["lo"], t, 10)).mean(axis=0))),
    "sector_relative": PlantedEffect(
        "sector_relative", "rank(indneutralize(delay(ts_delta(log(close), 100), 20), IndClass.sector))", 120,
        lambda a, t, sec: _sector_demeaned(a["lc"][t - 20] - a["lc"][t - 120], sec)),
    "return_asymmetry": PlantedEffect(
        "return_asymmetry", "rank(-ts_skew(returns, 20))", 20,
        lambda a, t, sec: -_skew(_window(a["r"], t, 20))),
    "trend_persistence": PlantedEffect(
        "trend_persistence", "rank(delay(ts_delta(log(close), 130), 120))", 250,
        lambda a, t, sec: a["lc"][t - 120] - a["lc"][t - 250]),
    "price_volume_divergence": PlantedEffect(
        "price_volume_divergence", "rank(-ts_corr(close, volume, 20))", 19,
        lambda a, t, sec: -_corr(np.exp(_window(a["lc"], t, 20)), _window(a["v"], t, 20))),
}


def _std_t(rng: np.random.Generator, df: float, size: Any) -> np.ndarray:
    """Student-t draws scaled to unit variance."""
    return rng.standard_t(df, size=size) * np.sqrt((df - 2.0) / df)


def _std_ranks(x: np.ndarray) -> np.ndarray:
    """Cross-sectional ranks standardised to mean 0, std 1 (NaN -> 0)."""
    out = np.zeros_like(x)
    ok = np.isfinite(x)
    n = int(ok.sum())
    if n < 2:
        return out
    r = np.empty(n)
    r[np.argsort(x[ok], kind="stable")] = np.arange(n, dtype=float)
    r = (r - r.mean()) / r.std()
    out[ok] = r
    return out


def sector_list(counts: dict[str, int], stocks: int) -> list[str]:
    """One sector name per stock: the sector mix of `counts` scaled to `stocks` names by largest remainder
    (ties to the sector listed first), in the order of `counts`. At stocks == sum(counts) it is `counts`."""
    total = sum(counts.values())
    exact = {k: v * stocks / total for k, v in counts.items()}
    alloc = {k: int(np.floor(x)) for k, x in exact.items()}
    order = sorted(counts, key=lambda k: -(exact[k] - alloc[k]))     # stable sort: ties keep the listed order
    for k in order[: stocks - sum(alloc.values())]:
        alloc[k] += 1
    return [k for k in counts for _ in range(alloc[k])]


def simulate_market(sim: Simulator, *, calendar: str, start: str, end: str, seed: int) -> SimulatedMarket:
    """Simulate the market on the sessions of `calendar` between start and end."""
    cal = sim.calibrated
    rng = np.random.default_rng(seed)
    dates = sessions(calendar, start, end)
    n_days = len(dates)
    sector_names = sector_list(sim.sector_counts, sim.stocks)
    n = len(sector_names)
    width = max(2, len(str(n - 1)))
    tickers = [f"S{i:0{width}d}" for i in range(n)]
    sec_codes = np.unique(sector_names, return_inverse=True)[1]
    n_sec = int(sec_codes.max()) + 1

    # --- per-stock constants ---
    vol_ann = cal.ann_vol_median * np.exp(cal.ann_vol_dispersion * rng.standard_normal(n))
    sigma = vol_ann / SQRT252
    lo, hi = sim.beta_range
    betas_sorted = np.sort(rng.uniform(lo, hi, n))
    noisy_vol_rank = np.argsort(np.argsort(np.log(vol_ann) + 0.35 * rng.standard_normal(n)))
    beta = betas_sorted[noisy_vol_rank]                    # high vol tends to mean high beta
    m_share, s_share = cal.market_share, cal.sector_share
    sig_m = np.sqrt(m_share) * np.median(sigma)            # market factor daily vol (calm)
    load_m = beta * sig_m
    load_s = np.sqrt(s_share) * sigma
    idio_var = sigma**2 - load_m**2 - load_s**2
    sig_i = np.sqrt(np.maximum(idio_var, 0.2 * sigma**2))
    p_lo, p_hi = sim.price_start_range
    price0 = np.exp(rng.uniform(np.log(p_lo), np.log(p_hi), n))
    # dollar-volume levels: evenly spaced normal quantiles stretched to the calibrated max/min spread
    from scipy.stats import norm

    q_lv = norm.ppf((np.arange(n) + 0.5) / n)
    q_lv = q_lv / (q_lv.max() - q_lv.min()) * cal.dollar_volume_log10_spread * np.log(10.0)
    dv_level = np.log(cal.dollar_volume_median) + rng.permutation(q_lv)

    # --- regime chain and crisis multipliers (solve for vol ratio v and crisis correlation rho_c) ---
    v, rho_c = cal.crisis_vol_mult, cal.crisis_mean_corr
    mult_m = v * np.sqrt(rho_c / m_share)
    mult_i = v * np.sqrt(max(1e-6, 1 - rho_c) / (1 - m_share))
    crisis = np.zeros(n_days, dtype=bool)
    state = False
    for t in range(n_days):
        u = rng.random()
        if state:
            state = u >= cal.crisis_exit_prob
        else:
            state = u < cal.crisis_enter_prob
        crisis[t] = state

    # --- GARCH-t shocks for market, sectors, stocks ---
    a, b, df = cal.garch_alpha, cal.garch_beta, cal.t_df
    omega = 1.0 - a - b
    h_cap = sim.max_variance_mult      # conditional variance at most this x its long-run level
    z_cap = sim.volume_shock_cap
    q = cal.overnight_var_share
    h_m, h_s, h_i = 1.0, np.ones(n_sec), np.ones(n)
    drift_m = sim.market_drift_annual / 252.0
    drift_crisis = sim.crisis_drift_annual / 252.0
    eff = sim.effects
    planted = dict(eff.planted)
    unknown = sorted(set(planted) - set(EFFECTS))
    if unknown:
        raise ValueError(f"simulator.effects.planted: no planted effect named {unknown}; known: {sorted(EFFECTS)}")
    names = [k for k in EFFECTS if k in planted]
    mechanisms = [EFFECTS[k].mechanism for k in names]
    if len(set(mechanisms)) < len(mechanisms):
        raise ValueError(f"simulator.effects.planted: two effects of one mechanism in {names}; plant one")
    years = np.arange(n_days) / 252.0
    phi_e, sc_e = eff.effect_noise_ar, eff.effect_noise_scale
    # Each effect's strength noise comes from its own stream, keyed by the seed and the effect's place in
    # EFFECTS, never from the market's: planting, removing or retuning an effect changes the planted drifts
    # and nothing else (regimes, shocks and volumes stay the same path), so effects can be compared and
    # calibrated on one market.
    e_noise = np.zeros((n_days, len(names)))
    for j, k in enumerate(names):
        z = np.random.default_rng([seed, 1, list(EFFECTS).index(k)]).standard_normal(n_days)
        for t in range(1, n_days):
            e_noise[t, j] = phi_e * e_noise[t - 1, j] + np.sqrt(1 - phi_e**2) * z[t]
    coef = np.stack([planted[k].strength * 0.5 ** (years / planted[k].half_life_years)
                     * np.where(crisis, planted[k].crisis_mult, planted[k].calm_mult)
                     * (1 + sc_e * e_noise[:, j]) for j, k in enumerate(names)], axis=1) if names else \
        np.zeros((n_days, 0))

    log_close = np.log(price0)
    opens, highs, lows, closes, volumes = (np.empty((n_days, n)) for _ in range(5))
    phi_v = cal.log_volume_ar
    persist = np.zeros(n)
    vol_pers_sd = cal.log_volume_persistent_sd
    phi_f, vol_fast_sd = cal.log_volume_fast_ar, cal.log_volume_fast_sd    # a short-memory component
    fast = np.zeros(n)
    mu_next = np.zeros(n)
    log_closes, rets = np.full((n_days, n), np.nan), np.full((n_days, n), np.nan)
    arrays = {"lc": log_closes, "o": opens, "h": highs, "lo": lows, "v": volumes, "r": rets}
    for t in range(n_days):
        cm = mult_m if crisis[t] else 1.0
        ci = mult_i if crisis[t] else 1.0
        zs = [_std_t(rng, df, size) for size in (1, n_sec, n)]
        zs_on = [_std_t(rng, df, size) for size in (1, n_sec, n)]
        f_m = np.sqrt(h_m) * (np.sqrt(q) * zs_on[0][0] + np.sqrt(1 - q) * zs[0][0])
        f_s = np.sqrt(h_s) * (np.sqrt(q) * zs_on[1] + np.sqrt(1 - q) * zs[1])
        e_i = np.sqrt(h_i) * (np.sqrt(q) * zs_on[2] + np.sqrt(1 - q) * zs[2])
        on = (cm * load_m * np.sqrt(h_m) * np.sqrt(q) * zs_on[0][0]
              + ci * load_s * np.sqrt(h_s[sec_codes]) * np.sqrt(q) * zs_on[1][sec_codes]
              + ci * sig_i * np.sqrt(h_i) * np.sqrt(q) * zs_on[2])
        jumps = rng.random(n) < cal.jump_prob
        on = on + jumps * cal.jump_scale * sig_i * rng.standard_normal(n)
        day_drift = (drift_crisis if crisis[t] else drift_m) * beta
        intra = (cm * load_m * np.sqrt(h_m) * np.sqrt(1 - q) * zs[0][0]
                 + ci * load_s * np.sqrt(h_s[sec_codes]) * np.sqrt(1 - q) * zs[1][sec_codes]
                 + ci * sig_i * np.sqrt(h_i) * np.sqrt(1 - q) * zs[2]
                 + day_drift + mu_next)
        h_m = min(omega + a * f_m**2 + b * h_m, h_cap)
        h_s = np.minimum(omega + a * f_s**2 + b * h_s, h_cap)
        h_i = np.minimum(omega + a * e_i**2 + b * h_i, h_cap)
        lo_open = log_close + on
        log_close = lo_open + intra
        sd_intra = ci * sigma * np.sqrt(1 - q) * np.sqrt(h_i)
        top = np.maximum(lo_open, log_close) + cal.range_k * sd_intra * np.abs(rng.standard_normal(n))
        bot = np.minimum(lo_open, log_close) - cal.range_k * sd_intra * np.abs(rng.standard_normal(n))
        r_tot = on + intra
        persist = phi_v * persist + np.sqrt(1 - phi_v**2) * vol_pers_sd * rng.standard_normal(n)
        fast = phi_f * fast + np.sqrt(1 - phi_f**2) * vol_fast_sd * rng.standard_normal(n)
        shock = np.minimum(np.abs(r_tot) / sigma, z_cap)      # volume responds to a move, then saturates
        log_dv = (dv_level + persist + fast + cal.volume_abs_return_slope * (shock - 0.8)
                  + cal.log_volume_noise * rng.standard_normal(n))
        opens[t], closes[t], highs[t], lows[t] = np.exp(lo_open), np.exp(log_close), np.exp(top), np.exp(bot)
        volumes[t] = np.maximum(1.0, np.round(np.exp(log_dv) / closes[t]))

        # planted effects for tomorrow's intraday return, from information up to today's close
        log_closes[t] = log_close
        if t:
            rets[t] = closes[t] / closes[t - 1] - 1.0
        mu_next[:] = 0.0
        for j, k in enumerate(names):
            if t >= EFFECTS[k].lookback:
                mu_next += coef[t, j] * sig_i * _std_ranks(EFFECTS[k].signal(arrays, t, sec_codes))

    idx = pd.MultiIndex.from_product([dates, tickers], names=["date", "ticker"])
    prices = pd.DataFrame({
        "open": opens.ravel(), "high": highs.ravel(), "low": lows.ravel(), "close": closes.ravel(),
        "volume": volumes.ravel(),
    }, index=idx).reset_index()
    prices["adjusted_close"] = prices["close"]
    prices["split_coefficient"] = 1.0
    prices["dividend_amount"] = 0.0
    sectors = dict(zip(tickers, sector_names))
    year_of = pd.DatetimeIndex(dates).year
    truth = {
        "seed": seed,
        "tickers": tickers,
        "sectors": sectors,
        "beta": dict(zip(tickers, np.round(beta, 6).tolist())),
        "ann_vol": dict(zip(tickers, np.round(vol_ann, 6).tolist())),
        "crisis_sessions": int(crisis.sum()),
        "crisis_share": float(crisis.mean()),
        "effects": {
            **{k: {"kind": planted[k].kind, "mechanism": EFFECTS[k].mechanism, "formula": EFFECTS[k].formula,
                   "acts_on": "intraday return of t+1 (inside the book's open(t+1)->open(t+2) holding)",
                   "coef_by_year": {str(y): v for y, v in
                                    pd.Series(coef[:, j]).groupby(year_of).mean().round(6).to_dict().items()},
                   **dict(planted[k])} for j, k in enumerate(names)},
            "high_beta_trap": {
                "kind": "trap",
                "formula": "rank(ts_std(returns, 63))",
                "why": "volatility ranks with beta (see `beta`); the book is long beta and pays only "
                       "when the market rises; the market factor explains its P&L",
                "planted_alpha": 0.0,
            },
            "price_level_trap": {
                "kind": "trap",
                "formula": "rank(ts_mean(close, 126))",
                "why": "price levels are drawn at random and carry no information; a slow static tilt",
                "planted_alpha": 0.0,
            },
        },
        "mechanisms_without_effect": sorted(set(MECHANISMS) - {EFFECTS[k].mechanism for k in names}),
        "coefficient_units": "expected intraday return in units of the stock's idiosyncratic daily vol "
                             "per unit of standardised rank",
    }
    return SimulatedMarket(prices=prices, sectors=sectors, ground_truth=truth)
