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
- planted cross-sectional effects, slowly decaying and regime dependent: short-term reversal and a
  volume-variability premium, strong enough that their formulas clear the holdout costs (a learner that
  finds them and one that finds nothing must look different on the holdout year); and two traps: betas
  that pay only in rising markets, and price levels with no predictive power.

Why hand-written: no library simulates a cross-section with planted, documented alpha.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from alphagym.data.calendar import sessions

SQRT252 = np.sqrt(252.0)


@dataclass(frozen=True)
class SimulatedMarket:
    prices: pd.DataFrame          # long: date, ticker, open, high, low, close, volume, ...
    sectors: dict[str, str]
    ground_truth: dict[str, Any]


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


def simulate_market(sim: dict[str, Any], *, calendar: str, start: str, end: str, seed: int) -> SimulatedMarket:
    """Simulate the market on the sessions of `calendar` between start and end."""
    cal = sim["calibrated"]
    rng = np.random.default_rng(seed)
    dates = sessions(calendar, start, end)
    n_days = len(dates)
    sector_names = sector_list(sim["sector_counts"], int(sim["stocks"]))
    n = len(sector_names)
    width = max(2, len(str(n - 1)))
    tickers = [f"S{i:0{width}d}" for i in range(n)]
    sec_codes = np.unique(sector_names, return_inverse=True)[1]
    n_sec = int(sec_codes.max()) + 1

    # --- per-stock constants ---
    vol_ann = cal["ann_vol_median"] * np.exp(cal["ann_vol_dispersion"] * rng.standard_normal(n))
    sigma = vol_ann / SQRT252
    lo, hi = sim["beta_range"]
    betas_sorted = np.sort(rng.uniform(lo, hi, n))
    noisy_vol_rank = np.argsort(np.argsort(np.log(vol_ann) + 0.35 * rng.standard_normal(n)))
    beta = betas_sorted[noisy_vol_rank]                    # high vol tends to mean high beta
    m_share, s_share = cal["market_share"], cal["sector_share"]
    sig_m = np.sqrt(m_share) * np.median(sigma)            # market factor daily vol (calm)
    load_m = beta * sig_m
    load_s = np.sqrt(s_share) * sigma
    idio_var = sigma**2 - load_m**2 - load_s**2
    sig_i = np.sqrt(np.maximum(idio_var, 0.2 * sigma**2))
    p_lo, p_hi = sim["price_start_range"]
    price0 = np.exp(rng.uniform(np.log(p_lo), np.log(p_hi), n))
    # dollar-volume levels: evenly spaced normal quantiles stretched to the calibrated max/min spread
    from scipy.stats import norm

    q_lv = norm.ppf((np.arange(n) + 0.5) / n)
    q_lv = q_lv / (q_lv.max() - q_lv.min()) * cal["dollar_volume_log10_spread"] * np.log(10.0)
    dv_level = np.log(cal["dollar_volume_median"]) + rng.permutation(q_lv)

    # --- regime chain and crisis multipliers (solve for vol ratio v and crisis correlation rho_c) ---
    v, rho_c = cal["crisis_vol_mult"], cal["crisis_mean_corr"]
    mult_m = v * np.sqrt(rho_c / m_share)
    mult_i = v * np.sqrt(max(1e-6, 1 - rho_c) / (1 - m_share))
    crisis = np.zeros(n_days, dtype=bool)
    state = False
    for t in range(n_days):
        u = rng.random()
        if state:
            state = u >= cal["crisis_exit_prob"]
        else:
            state = u < cal["crisis_enter_prob"]
        crisis[t] = state

    # --- GARCH-t shocks for market, sectors, stocks ---
    a, b, df = cal["garch_alpha"], cal["garch_beta"], cal["t_df"]
    omega = 1.0 - a - b
    h_cap = float(sim["max_variance_mult"])      # conditional variance at most this x its long-run level
    z_cap = float(sim["volume_shock_cap"])
    q = cal["overnight_var_share"]
    h_m, h_s, h_i = 1.0, np.ones(n_sec), np.ones(n)
    drift_m = sim["market_drift_annual"] / 252.0
    drift_crisis = sim.get("crisis_drift_annual", -0.4) / 252.0
    eff = sim["effects"]
    years = np.arange(n_days) / 252.0
    phi_e, sc_e = eff["effect_noise_ar"], eff["effect_noise_scale"]
    e_noise = np.zeros((n_days, 2))
    for t in range(1, n_days):
        e_noise[t] = phi_e * e_noise[t - 1] + np.sqrt(1 - phi_e**2) * rng.standard_normal(2)
    rev, vv = eff["reversal"], eff["volume_variability"]
    c_rev = (rev["strength"] * 0.5 ** (years / rev["half_life_years"])
             * np.where(crisis, rev["crisis_mult"], 1.0) * (1 + sc_e * e_noise[:, 0]))
    c_vv = (vv["strength"] * 0.5 ** (years / vv["half_life_years"])
            * np.where(crisis, vv["crisis_mult"], 1.0) * (1 + sc_e * e_noise[:, 1]))
    vv_window = int(vv["window"])

    log_close = np.log(price0)
    opens, highs, lows, closes, volumes = (np.empty((n_days, n)) for _ in range(5))
    phi_v = cal["log_volume_ar"]
    persist = np.zeros(n)
    vol_pers_sd = cal["log_volume_persistent_sd"]
    phi_f, vol_fast_sd = cal["log_volume_fast_ar"], cal["log_volume_fast_sd"]    # a short-memory component
    fast = np.zeros(n)
    mu_next = np.zeros(n)
    hist_lc = np.full((6, n), np.nan)        # ring buffer of log closes for the 5-day reversal
    hist_v = np.full((vv_window, n), np.nan)  # ring buffer of volumes
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
        jumps = rng.random(n) < cal["jump_prob"]
        on = on + jumps * cal["jump_scale"] * sig_i * rng.standard_normal(n)
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
        top = np.maximum(lo_open, log_close) + cal["range_k"] * sd_intra * np.abs(rng.standard_normal(n))
        bot = np.minimum(lo_open, log_close) - cal["range_k"] * sd_intra * np.abs(rng.standard_normal(n))
        r_tot = on + intra
        persist = phi_v * persist + np.sqrt(1 - phi_v**2) * vol_pers_sd * rng.standard_normal(n)
        fast = phi_f * fast + np.sqrt(1 - phi_f**2) * vol_fast_sd * rng.standard_normal(n)
        shock = np.minimum(np.abs(r_tot) / sigma, z_cap)      # volume responds to a move, then saturates
        log_dv = (dv_level + persist + fast + cal["volume_abs_return_slope"] * (shock - 0.8)
                  + cal["log_volume_noise"] * rng.standard_normal(n))
        opens[t], closes[t], highs[t], lows[t] = np.exp(lo_open), np.exp(log_close), np.exp(top), np.exp(bot)
        volumes[t] = np.maximum(1.0, np.round(np.exp(log_dv) / closes[t]))

        # planted effects for tomorrow's intraday return, from information up to today's close
        hist_lc[t % 6] = log_close
        hist_v[t % vv_window] = volumes[t]
        mu_next[:] = 0.0
        if t >= 5:
            rev_sig = -(log_close - hist_lc[(t - 5) % 6])
            mu_next += c_rev[t] * sig_i * _std_ranks(rev_sig)
        if t >= vv_window - 1:
            cv = hist_v.std(axis=0) / hist_v.mean(axis=0)
            mu_next += c_vv[t] * sig_i * _std_ranks(cv)

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
            "reversal": {
                "formula": "rank(-ts_delta(log(close), 5))",
                "acts_on": "intraday return of t+1 (inside the book's open(t+1)->open(t+2) holding)",
                "coef_by_year": pd.Series(c_rev).groupby(year_of).mean().round(6).to_dict(),
                **rev,
            },
            "volume_variability": {
                "formula": f"rank(ts_std(volume, {vv_window}) / ts_mean(volume, {vv_window}))",
                "acts_on": "intraday return of t+1",
                "coef_by_year": pd.Series(c_vv).groupby(year_of).mean().round(6).to_dict(),
                **vv,
            },
            "high_beta_trap": {
                "formula": "rank(ts_std(returns, 63))",
                "why": "volatility ranks with beta (see `beta`); the book is long beta and pays only "
                       "when the market rises; the market factor explains its P&L",
                "planted_alpha": 0.0,
            },
            "price_level_trap": {
                "formula": "rank(ts_mean(close, 126))",
                "why": "price levels are drawn at random and carry no information; a slow static tilt",
                "planted_alpha": 0.0,
            },
        },
        "coefficient_units": "expected intraday return in units of the stock's idiosyncratic daily vol "
                             "per unit of standardised rank",
    }
    truth["effects"]["reversal"]["coef_by_year"] = {str(k): v for k, v in
                                                    truth["effects"]["reversal"]["coef_by_year"].items()}
    truth["effects"]["volume_variability"]["coef_by_year"] = {
        str(k): v for k, v in truth["effects"]["volume_variability"]["coef_by_year"].items()}
    return SimulatedMarket(prices=prices, sectors=sectors, ground_truth=truth)
