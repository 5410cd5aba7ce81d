import numpy as np
import pytest

from alphagym.worldmodel.geometry import TARGET_NAMES, correlation, geometry_targets, projector_drift

N = 46
IDX = {k: i for i, k in enumerate(TARGET_NAMES)}


def test_identity_has_full_effective_dimension():
    t = geometry_targets(np.eye(N))
    assert t[IDX["effective_fraction"]] == pytest.approx(1.0)
    assert t[IDX["mean_corr"]] == pytest.approx(0.0)
    assert t[IDX["market_share"]] == pytest.approx(1 / N)


def test_rank_one_is_all_market():
    c = np.ones((N, N))
    t = geometry_targets(c)
    assert t[IDX["market_share"]] == pytest.approx(1.0)
    assert t[IDX["effective_fraction"]] == pytest.approx(1 / N)
    assert t[IDX["mean_corr"]] == pytest.approx(1.0)


def test_identical_subspaces_have_zero_drift_orthogonal_have_one():
    rng = np.random.default_rng(0)
    r = rng.normal(size=(300, N)) + rng.normal(size=(300, 1)) * 2
    c = correlation(r)
    assert projector_drift(c, c) == pytest.approx(0.0, abs=1e-12)
    a = np.diag(np.r_[[5.0, 4.0, 3.0], np.ones(N - 3)])
    b = np.diag(np.r_[np.ones(3), [5.0, 4.0, 3.0], np.ones(N - 6)])
    assert projector_drift(a, b) == pytest.approx(1.0)


def test_more_common_factor_means_more_market_share():
    rng = np.random.default_rng(1)
    common = rng.normal(size=(500, 1))
    lo = geometry_targets(correlation(rng.normal(size=(500, N)) + 0.3 * common))
    hi = geometry_targets(correlation(rng.normal(size=(500, N)) + 2.0 * common))
    assert hi[IDX["market_share"]] > lo[IDX["market_share"]]
    assert hi[IDX["effective_fraction"]] < lo[IDX["effective_fraction"]]
    assert hi[IDX["mean_corr"]] > lo[IDX["mean_corr"]]
    shares = hi[[IDX[f"top{i}_share"] for i in range(1, 6)]]
    assert (np.diff(shares) <= 1e-12).all()
