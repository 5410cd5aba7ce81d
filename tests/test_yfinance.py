"""The yfinance source, replayed from a recorded-format response: never the network."""

import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from alphagym.data import yfinance_source as yfs
from alphagym.data.build_panel import adjust
from alphagym.errors import SourceUnavailableError
from alphagym.params import YFinance
from cfg_helpers import partial

FIXTURE = Path(__file__).parent / "data" / "yfinance_history_XYZ.csv"


def recorded(ticker, start, end):
    df = pd.read_csv(FIXTURE, comment="#")
    df.index = pd.DatetimeIndex(pd.to_datetime(df.pop("Date"), utc=True)).tz_convert("America/New_York")
    return df


def test_recorded_response_to_raw_and_cache(tmp_path):
    cfg = partial(YFinance, {"retries": 2, "backoff_s": 0.0, "cache_dir": str(tmp_path / "cache")})
    raw = yfs.download_universe(["XYZ"], "2021-01-04", "2021-01-08", cfg, fetch=recorded)
    assert list(raw["date"].dt.strftime("%Y-%m-%d")) == ["2021-01-04", "2021-01-05", "2021-01-06",
                                                           "2021-01-07", "2021-01-08"]
    assert raw["split_coefficient"].tolist() == [1.0, 1.0, 1.0, 2.0, 1.0]
    wide = {c: raw.pivot(index="date", columns="ticker", values=c)
            for c in ("open", "high", "low", "close", "adjusted_close", "volume", "split_coefficient")}
    adj = adjust(wide)
    assert adj["volume"]["XYZ"].iloc[0] == 2_000_000          # before the split: x2
    np.testing.assert_allclose(adj["close"]["XYZ"].iloc[:2].to_numpy(), [100.0, 100.99])
    # second call is served from the cache: a fetch that fails proves it is not called
    again = yfs.download_universe(["XYZ"], "2021-01-04", "2021-01-08", cfg,
                                  fetch=lambda *a: pytest.fail("fetched although cached"))
    pd.testing.assert_frame_equal(raw, again)
    # a cache file cut short is fetched again, not read as a traceback or as fewer rows
    cached = next((tmp_path / "cache").glob("XYZ_*.parquet"))
    cached.write_bytes(cached.read_bytes()[:200])
    calls = []
    refetched = yfs.download_universe(["XYZ"], "2021-01-04", "2021-01-08", cfg,
                                      fetch=lambda *a: calls.append(a) or recorded(*a))
    assert len(calls) == 1
    pd.testing.assert_frame_equal(raw, refetched)


def test_retries_then_clear_error(tmp_path):
    calls = []

    def flaky(ticker, start, end):
        calls.append(ticker)
        raise ConnectionError("connection reset")

    cfg = partial(YFinance, {"retries": 3, "backoff_s": 0.0, "cache_dir": str(tmp_path)})
    with pytest.raises(SourceUnavailableError, match="XYZ failed after 3 tries.*data.source=synthetic"):
        yfs.download_universe(["XYZ"], "2021-01-04", "2021-01-08", cfg, fetch=flaky)
    assert len(calls) == 3


def test_offline_fails_fast_and_names_alternatives(tmp_path, monkeypatch):
    monkeypatch.setattr(yfs, "network_available", lambda *a, **k: False)
    cfg = partial(YFinance, {"retries": 3, "backoff_s": 5.0, "cache_dir": str(tmp_path)})
    t0 = time.perf_counter()
    with pytest.raises(SourceUnavailableError) as info:
        yfs.download_universe(["XYZ"], "2021-01-04", "2021-01-08", cfg)
    assert time.perf_counter() - t0 < 1.0
    assert "data.source=synthetic" in str(info.value) and "data.source=csv" in str(info.value)


def test_incomplete_response_is_a_data_error(tmp_path):
    from alphagym.errors import DataError

    cfg = partial(YFinance, {"retries": 1, "backoff_s": 0.0, "cache_dir": str(tmp_path)})
    with pytest.raises(DataError, match="empty or incomplete response"):
        yfs.download_universe(["XYZ"], "2021-01-04", "2021-01-08", cfg, fetch=lambda *a: pd.DataFrame())
