"""The mechanism check (briefs/idea.py) on the labelled set written from the mechanisms' descriptions
(tests/mechanism_labels.yaml): it separates on- from off-mechanism formulas, the catalogue's threshold sits
where the accuracy is best, every mechanism has references that pass its own syntactic check, and the
syntactic checks' loophole (`ts_mean(close, d)`, a price level) is off mechanism."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from alphagym.briefs.catalogue import load_catalogue
from alphagym.briefs.compliance import check
from alphagym.briefs.idea import auc, mean_rank_corr
from alphagym.dsl.parser import parse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from idea_calibration import fidelities, labelled  # noqa: E402


def test_rank_correlation_is_invariant_to_monotone_transforms_and_sign_is_left_to_abs():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(40, 30))
    days = np.arange(40)
    assert mean_rank_corr(a, np.exp(a) * 3 + 1, days) == pytest.approx(1.0)
    assert mean_rank_corr(a, -a, days) == pytest.approx(-1.0)
    assert abs(mean_rank_corr(a, rng.normal(size=(40, 30)), days)) < 0.1
    b = a.copy()
    b[:, :25] = np.nan                       # too few stocks on every day: no day counts
    assert mean_rank_corr(a, b, days) == 0.0


def test_the_rank_correlation_of_all_days_at_once_is_the_mean_of_each_days():
    """Against a plain loop over days (scipy's Spearman on each day's jointly finite stocks), with ties, NaN
    cells, a day with too few stocks and a constant day."""
    from scipy.stats import spearmanr

    rng = np.random.default_rng(1)
    a, b = rng.integers(0, 6, size=(60, 25)).astype(float), rng.normal(size=(60, 25))
    a[rng.random(a.shape) < 0.2] = np.nan
    b[rng.random(b.shape) < 0.1] = np.inf
    a[4, 5:] = np.nan                         # 5 stocks left: skipped
    a[8] = 2.0                                # constant: skipped
    days = np.arange(0, 60, 2)
    want = []
    for t in days:
        m = np.isfinite(a[t]) & np.isfinite(b[t])
        if m.sum() >= 10 and np.ptp(a[t, m]) > 0 and np.ptp(b[t, m]) > 0:
            want.append(spearmanr(a[t, m], b[t, m]).statistic)
    assert len(want) == len(days) - 2
    assert mean_rank_corr(a, b, days) == pytest.approx(float(np.mean(want)), abs=1e-12)


def test_every_mechanism_has_references_that_pass_its_syntactic_check():
    cat = load_catalogue()
    for m in cat.ids("mechanisms"):
        refs = cat.references(m)
        assert len(refs) >= 2, m
        brief = {"mechanism": m, "horizon": 21, "input_rule": "two_fields", "structure": "ranked",
                 "forbidden": "no_powers"}
        for f in refs:
            assert check(brief, parse(f), cat, 10.0).checks["mechanism"], (m, f)


@pytest.mark.slow(minutes=1)
def test_the_check_separates_the_labelled_set_and_its_threshold_is_calibrated(sim_panels):
    """On the last 750 train sessions of the default market (tools/idea_calibration.py reports the whole
    train window: AUC 0.995, accuracy 0.972 at idea_tau 0.25)."""
    train = sim_panels[0]
    train = train.slice_days(train.shape[0] - 750, train.shape[0])
    rows = labelled()
    assert {m for m, _, _ in rows} == set(load_catalogue().ids("mechanisms"))
    assert all(f not in load_catalogue().references(m) for m, _, f in rows)      # no reference is labelled
    fid = fidelities(train, rows)
    on = [y for _, y, _ in rows]
    assert auc(fid, on) >= 0.95
    accuracy = {t: float(np.mean([(f >= t) == y for f, y in zip(fid, on)])) for t in np.arange(0.1, 0.75, 0.05)}
    tau = load_catalogue().idea_tau
    assert np.mean([(f >= tau) == y for f, y in zip(fid, on)]) >= max(accuracy.values()) - 0.03
    # negative control: a check that ignores the signal (every formula on mechanism) is no better than chance
    assert auc([1.0] * len(on), on) == 0.5
    loophole = [v for (m, y, f), v in zip(rows, fid) if f == "ts_mean(close, 20)"]
    assert loophole and max(loophole) < tau
