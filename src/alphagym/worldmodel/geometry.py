"""Correlation-geometry targets of a window of returns: what the world model's geometry head predicts.

From a stocks x stocks correlation matrix C with eigenvalues l_1 >= ... >= l_n:
- mean_corr: mean off-diagonal correlation;
- market_share: l_1 / trace(C) (the market mode's share);
- effective_fraction: ((sum l)^2 / sum l^2) / n (participation ratio over n: 1 for identity, 1/n for rank one);
- residual_fraction: the same without the market mode (eigenvalues 2..n), over n - 1;
- projector_drift: ||P_past - P_next||_F / sqrt(2k) between the top-k eigenvector subspaces (0: same, 1: orthogonal);
- top_shares: l_1..l_5 / trace(C).
"""

from __future__ import annotations

import numpy as np

TOP_K_DRIFT = 3
TOP_SHARES = 5
TARGET_NAMES = ("mean_corr", "market_share", "effective_fraction", "residual_fraction", "projector_drift",
                *(f"top{i + 1}_share" for i in range(TOP_SHARES)))


def correlation(returns: np.ndarray) -> np.ndarray:
    """Correlation of a (days x stocks) window; constant or missing columns get zero correlation."""
    x = np.nan_to_num(returns - np.nanmean(returns, axis=0))
    sd = np.sqrt((x * x).mean(axis=0))
    ok = sd > 0
    z = np.where(ok, x / np.where(ok, sd, 1.0), 0.0)
    c = z.T @ z / len(z)
    np.fill_diagonal(c, 1.0)
    return c


def _eig(c: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    vals, vecs = np.linalg.eigh(c)
    order = np.argsort(vals)[::-1]
    return np.clip(vals[order], 0.0, None), vecs[:, order]


def projector_drift(c_past: np.ndarray, c_next: np.ndarray, k: int = TOP_K_DRIFT) -> float:
    _, u = _eig(c_past)
    _, v = _eig(c_next)
    p, q = u[:, :k] @ u[:, :k].T, v[:, :k] @ v[:, :k].T
    return float(np.linalg.norm(p - q) / np.sqrt(2 * k))


def geometry_targets(c_next: np.ndarray, c_past: np.ndarray | None = None) -> np.ndarray:
    """The TARGET_NAMES vector for a correlation matrix (drift needs the past window's matrix)."""
    n = c_next.shape[0]
    lam, _ = _eig(c_next)
    tr = lam.sum()
    off = (c_next.sum() - np.trace(c_next)) / (n * (n - 1))
    eff = lam.sum() ** 2 / (lam**2).sum() / n
    rest = lam[1:]
    resid = (rest.sum() ** 2 / (rest**2).sum() / (n - 1)) if (rest**2).sum() > 0 else 0.0
    drift = projector_drift(c_past, c_next) if c_past is not None else 0.0
    shares = lam[:TOP_SHARES] / tr
    return np.array([off, lam[0] / tr, eff, resid, drift, *shares])
