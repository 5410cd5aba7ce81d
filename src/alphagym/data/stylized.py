"""Stylized facts a quant checks first; the same function measures the simulator and real data."""

from __future__ import annotations

import numpy as np

from alphagym.panel import Panel


def _acf(x: np.ndarray, lags: tuple[int, ...]) -> float:
    """Mean autocorrelation at `lags` of each column (NaNs dropped per column), median over columns."""
    vals = []
    for col in x.T:
        col = col[np.isfinite(col)]
        if len(col) < 50:
            continue
        col = col - col.mean()
        den = float(col @ col)
        if den == 0:
            continue
        vals.append(np.mean([float(col[k:] @ col[:-k]) / den for k in lags]))
    return float(np.median(vals))


def mean_pairwise_corr(r: np.ndarray) -> float:
    ok = np.isfinite(r).all(axis=1)
    c = np.corrcoef(r[ok].T)
    n = c.shape[0]
    return float((c.sum() - n) / (n * (n - 1)))


def stylized_facts(panel: Panel) -> dict[str, float]:
    """Annual vol, mean pairwise corr, excess kurtosis, ACF of r^2 (lags 1-5), ACF(1) of log volume,
    mean high-low log range over daily vol, and the dispersion of median dollar volume (log10 max/min)."""
    close = panel["close"]
    logret = np.full_like(close, np.nan)
    logret[1:] = np.log(close[1:] / close[:-1])
    sd = np.nanstd(logret, axis=0)
    ann_vol = float(np.median(sd * np.sqrt(252)))
    z = (logret - np.nanmean(logret, axis=0)) / sd
    kurt = float(np.median(np.nanmean(z**4, axis=0) - 3.0))
    rng = np.log(panel["high"] / panel["low"])
    range_over_vol = float(np.nanmean(rng / sd))
    logv = np.log(panel["volume"])
    dv = np.nanmedian(panel["dollar_volume"], axis=0)
    return {
        "ann_vol": ann_vol,
        "mean_corr": mean_pairwise_corr(logret[1:]),
        "kurtosis": kurt,
        "sq_return_acf": _acf(logret[1:] ** 2, (1, 2, 3, 4, 5)),
        "log_volume_acf": _acf(logv, (1,)),
        "log_volume_acf20": _acf(logv, (20,)),
        "range_over_vol": range_over_vol,
        "dollar_volume_log10_spread": float(np.log10(dv.max() / dv.min())),
    }


# fact -> (tolerance key in params `stylized_tolerance`, relative?)
TOLERANCES = {
    "ann_vol": ("ann_vol_rel", True),
    "mean_corr": ("mean_corr_abs", False),
    "kurtosis": ("kurtosis_rel", True),
    "sq_return_acf": ("sq_return_acf_abs", False),
    "log_volume_acf": ("log_volume_acf_abs", False),
    "log_volume_acf20": ("log_volume_acf_abs", False),
    "range_over_vol": ("range_over_vol_rel", True),
}


def compare_facts(real: dict[str, float], sim: dict[str, float],
                  tolerance: dict[str, float]) -> list[dict[str, object]]:
    """One row per fact: real, simulated, the allowed gap and whether the simulator is inside it."""
    rows = []
    for fact, (key, relative) in TOLERANCES.items():
        tol = float(tolerance[key])
        gap = abs(sim[fact] - real[fact]) / (abs(real[fact]) if relative else 1.0)
        rows.append({"fact": fact, "real": real[fact], "simulated": sim[fact],
                     "tolerance": f"{tol:.0%} relative" if relative else f"±{tol} absolute",
                     "gap": gap, "ok": gap <= tol})
    return rows


def facts_table(rows: list[dict[str, object]]) -> str:
    lines = ["| fact | real | simulator | tolerance | within |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['fact']} | {r['real']:.3f} | {r['simulated']:.3f} | {r['tolerance']} | "
                     f"{'yes' if r['ok'] else 'NO'} |")
    return "\n".join(lines)
