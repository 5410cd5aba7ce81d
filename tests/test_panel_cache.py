"""`Panel.read_parquet_cached`, the `score` command's fast start-up: the dense copy reads back the very
panel the parquet holds, a rewritten panel is never answered from an old copy, a torn copy is rebuilt, and
old copies of a file do not pile up."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from alphagym.errors import DataError
from alphagym.panel import PANEL_FIELDS, Panel


def _panel(scale: float = 1.0, days: int = 30) -> Panel:
    rng = np.random.default_rng(0)
    dates = pd.bdate_range("2021-01-04", periods=days, name="date")
    fields = {k: np.ascontiguousarray(rng.lognormal(size=(days, 3)) * scale) for k in PANEL_FIELDS}
    fields["returns"][0] = np.nan
    return Panel(dates, ("AAA", "BBB", "CCC"), ("Tech", "Energy", "Tech"), fields, np.arange(days) >= days - 5)


def _same(a: Panel, b: Panel) -> None:
    assert a.dates.equals(b.dates) and a.dates.name == b.dates.name
    assert (a.tickers, a.sectors) == (b.tickers, b.sectors)
    assert a.in_holdout.dtype == b.in_holdout.dtype and np.array_equal(a.in_holdout, b.in_holdout)
    assert set(a.fields) == set(b.fields)
    for k, v in a.fields.items():
        w = b.fields[k]
        assert w.dtype == v.dtype and w.flags.c_contiguous and np.array_equal(v, w, equal_nan=True), k


def test_the_copy_reads_back_the_parquet_panel(tmp_path):
    path, cache = tmp_path / "train.parquet", tmp_path / "cache"
    _panel().write_parquet(path)
    first = Panel.read_parquet_cached(path, cache)          # reads the parquet, writes the copy
    assert len(list(cache.glob("*.npz"))) == 1
    second = Panel.read_parquet_cached(path, cache)         # from the copy
    _same(first, Panel.read_parquet(path))
    _same(second, Panel.read_parquet(path))


def test_a_rewritten_panel_is_never_answered_from_an_old_copy(tmp_path):
    path, cache = tmp_path / "train.parquet", tmp_path / "cache"
    _panel().write_parquet(path)
    Panel.read_parquet_cached(path, cache)
    _panel(scale=2.0, days=31).write_parquet(path)          # a stage writes it again (atomic replace)
    got = Panel.read_parquet_cached(path, cache)
    _same(got, _panel(scale=2.0, days=31))
    assert len(list(cache.glob("*.npz"))) == 1             # the old copy of this file is gone


def test_a_torn_copy_is_rebuilt(tmp_path):
    path, cache = tmp_path / "train.parquet", tmp_path / "cache"
    _panel().write_parquet(path)
    Panel.read_parquet_cached(path, cache)
    (copy,) = cache.glob("*.npz")
    copy.write_bytes(copy.read_bytes()[:100])                # cut short, as by a full disk
    _same(Panel.read_parquet_cached(path, cache), _panel())
    _same(Panel.read_parquet_cached(path, cache), _panel())  # and the rebuilt copy reads


def test_a_missing_panel_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="panel file not found"):
        Panel.read_parquet_cached(tmp_path / "nope.parquet", tmp_path / "cache")
