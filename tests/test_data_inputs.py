"""CSV formats, split/dividend adjustment, and every bad-input rule with the message it gives."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from alphagym.data.build_panel import build_panel
from alphagym.data.calendar import sessions
from alphagym.data.csv_source import read_csv_folder, read_ticker_csv
from alphagym.errors import DataError, SourceUnavailableError
from cfg_helpers import updated

DAYS = sessions("XNYS", "2021-01-04", "2021-03-31")


def _params(params, validation=None):
    d = params.data.model_copy(update=dict(start="2021-01-04", train_end="2021-02-26", holdout_start="2021-03-01",
                                           end="2021-03-31", holdout_warmup_sessions=10, source="csv"))
    d = d.model_copy(update={"validation": d.validation.model_copy(update=validation or {})})
    return params.model_copy(update={"data": d})


def _write_plain(folder: Path, ticker: str, days=DAYS, seed=0, edit=None) -> Path:
    rng = np.random.default_rng(seed)
    close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, len(days))))
    df = pd.DataFrame({"date": [d.strftime("%Y-%m-%d") for d in days], "open": close * 0.999,
                       "high": close * 1.01, "low": close * 0.99, "close": close,
                       "volume": rng.integers(1_000_000, 2_000_000, len(days))})
    df = df.astype(object)
    if edit:
        df = edit(df)
    path = folder / f"{ticker}.csv"
    df.to_csv(path, index=False)
    return path


def _folder(tmp_path, edit=None, bad_ticker="BBB", **kw):
    folder = tmp_path / "csv"
    folder.mkdir(exist_ok=True)
    _write_plain(folder, "AAA", seed=1)
    _write_plain(folder, bad_ticker, seed=2, edit=edit, **kw)
    _write_plain(folder, "CCC", seed=3)
    return folder


def _build(folder, params, validation=None):
    prices, sectors = read_csv_folder(folder)
    return build_panel(prices, sectors, _params(params, validation))


def test_plain_format_builds_a_panel(tmp_path, params):
    train, holdout, repairs = _build(_folder(tmp_path), params)
    assert train.shape == (len(sessions("XNYS", "2021-01-04", "2021-02-26")), 3)
    assert repairs == []
    assert np.isnan(train["returns"][0]).sum() == 3  # first session: no previous close in range
    np.testing.assert_allclose(train["vwap"], (train["high"] + train["low"] + train["close"]) / 3)


def test_alphavantage_format_and_ticker_from_name(shared_data):
    df = read_ticker_csv(shared_data / "DA-BRK.B-T-2021-04-21.csv")
    assert df["ticker"].iloc[0] == "BRK.B"
    assert {"adjusted_close", "split_coefficient", "dividend_amount"} <= set(df.columns)


@pytest.mark.parametrize("ticker, split_day, ratio", [("AAPL", "2014-06-09", 7), ("AAPL", "2020-08-31", 4),
                                                      ("TSLA", "2020-08-31", 5)])
def test_splits_leave_no_jump(shared_data, params, ticker, split_day, ratio):
    p = updated(params, {"data.source": "csv", "data.csv_dir": str(shared_data), "data.start": "2012-06-29",
                         "data.train_end": "2020-04-21", "data.holdout_start": "2020-04-22", "data.end": "2021-04-21"})
    prices, sectors = read_csv_folder(shared_data, universe=[ticker, "MSFT"])
    raw = prices[prices.ticker == ticker].set_index("date")
    i = raw.index.get_loc(pd.Timestamp(split_day))
    assert raw["close"].iloc[i - 1] / raw["close"].iloc[i] > ratio * 0.8  # the raw file jumps
    train, holdout, _ = build_panel(prices, sectors, p)
    panel = train if pd.Timestamp(split_day) <= train.dates[-1] else holdout
    k = panel.tickers.index(ticker)
    t = panel.dates.get_loc(pd.Timestamp(split_day))
    assert abs(panel["returns"][t, k]) < 0.2    # adjusted: no -75%..-86% jump (TSLA really rose 12.6% that day)
    v_before, v_after = panel["volume"][t - 5:t, k].mean(), panel["volume"][t:t + 5, k].mean()
    assert 0.33 < v_after / v_before < 3.0                     # volume adjusted by the split factor only
    # volume before the split x every later split coefficient of the file (the vendor writes 7:1 as 7.000007)
    later = raw["split_coefficient"].iloc[i:].prod()
    assert later == pytest.approx(ratio * (4 if (ticker, split_day) == ("AAPL", "2014-06-09") else 1), rel=1e-5)
    raw_v = raw["volume"].iloc[i - 5:i].mean()
    assert panel["volume"][t - 5:t, k].mean() == pytest.approx(raw_v * later, rel=1e-12)


def _set(row, col, value):
    def edit(df):
        df.loc[row, col] = value
        return df
    return edit


@pytest.mark.parametrize("edit, validation, rule, fragment", [
    (_set(5, "close", "abc"), {}, "non_numeric", "column 'close' row 7: 'abc' is not a number"),
    (_set(5, "date", "2021/01/12"), {}, "non_numeric", "date '2021/01/12' is not YYYY-MM-DD"),
    (_set(5, "low", -3.0), {"non_positive_price": "error"}, "non_positive_price", "low=-3"),
    (_set(5, "high", 1.0), {"high_low": "error"}, "high_low", "high 1 < low"),
    (_set(5, "volume", 0), {"non_positive_volume": "error"}, "non_positive_volume", "volume 0"),
    (_set(5, "open", 1e6), {"ohlc_bounds": "error"}, "ohlc_bounds", "outside"),
    (lambda df: df.drop(index=[5, 6]), {"missing_sessions": "error"}, "missing_sessions", "session missing"),
    (lambda df: df.drop(index=range(0, 8)), {}, "late_start_early_end",
     "starts 2021-01-14, after the panel's first session 2021-01-04"),
    (lambda df: df.iloc[:-10], {}, "late_start_early_end", "ends 2021-03-17, 10 sessions before the panel's last"),
    (lambda df: pd.concat([df, df.iloc[[5]].assign(close=1.0)]), {}, "duplicate_dates", "conflicting rows"),
    (lambda df: pd.concat([df, df.iloc[[5]].assign(date="2021-01-16")]), {}, "not_a_session",
     "not sessions"),
])
def test_bad_input_errors_name_file_ticker_date_rule(tmp_path, params, edit, validation, rule, fragment):
    folder = _folder(tmp_path, edit=edit)
    with pytest.raises(DataError) as info:
        _build(folder, params, validation)
    err = info.value
    assert err.rule == rule
    assert fragment in str(err)
    assert err.ticker == "BBB"
    assert err.file and err.file.endswith("BBB.csv")
    if rule != "late_start_early_end" and "YYYY" not in fragment:   # a bad date cell has no date to name
        assert err.date is not None


@pytest.mark.parametrize("edit, rule, check", [
    (lambda df: pd.concat([df, df.iloc[[5]]]), "duplicate_dates", None),
    (_set(5, "volume", 0), "non_positive_volume", lambda p, t: p["volume"][t, 1] > 0),
    (_set(5, "open", 1e6), "ohlc_bounds", lambda p, t: p["high"][t, 1] >= 1e6 * 0.9),
    (lambda df: df.drop(index=[5, 6]), "missing_sessions", lambda p, t: p["close"][t, 1] == p["close"][t - 1, 1]),
    (lambda df: df.drop(index=range(0, 8)), "late_start_early_end", lambda p, t: np.isnan(p["close"][0, 1])),
])
def test_repairs_are_logged_and_applied(tmp_path, params, edit, rule, check):
    folder = _folder(tmp_path, edit=edit)
    train, _, repairs = _build(folder, params, {rule: "repair"})
    assert repairs and all(r["rule"] == rule for r in repairs)
    assert all(r["ticker"] == "BBB" and r["file"].endswith("BBB.csv") for r in repairs)
    if check:
        assert check(train, 5)


def test_long_gap_is_an_error_even_in_repair_mode(tmp_path, params):
    folder = _folder(tmp_path, edit=lambda df: df.drop(index=range(10, 20)))
    with pytest.raises(DataError, match="gap of 10 sessions exceeds max_fill_gap 5"):
        _build(folder, params, {"missing_sessions": "repair"})


def test_unknown_header_and_missing_folder(tmp_path):
    (tmp_path / "X.csv").write_text("when,price\n2021-01-04,1\n")
    with pytest.raises(DataError, match="unknown header"):
        read_csv_folder(tmp_path)
    with pytest.raises(SourceUnavailableError, match="data.source=synthetic"):
        read_csv_folder(tmp_path / "nope")


def test_bad_validation_action_is_named(tmp_path, params):
    with pytest.raises(DataError, match="data.validation.high_low must be 'error' or 'repair'"):
        _build(_folder(tmp_path), params, {"high_low": "ignore"})


def test_a_failed_stage_leaves_no_stale_outputs_downstream(tmp_path, params):
    """A download that fails on a bad CSV removes the raw data of the previous run, so `panel` cannot
    quietly rebuild from stale prices: it stops with a clear missing-input error."""
    from alphagym.errors import DataError as Err
    from alphagym.pipeline import stage_table
    from alphagym.stages import run_stage

    p = updated(_params(params), {"data.csv_dir": str(_folder(tmp_path)), "data.universe": []})
    run_stage(p, "download")
    run_stage(p, "panel")
    raw = stage_table(p)["download"].paths("outs")
    assert all(f.is_file() for f in raw.values())
    _write_plain(Path(p["data"]["csv_dir"]), "BBB", seed=2, edit=_set(5, "close", "oops"))
    with pytest.raises(DataError, match="non_numeric"):
        run_stage(p, "download")
    assert not any(f.exists() for f in raw.values())
    with pytest.raises(Err, match="stage 'panel' needs its input 'prices', not found; run `alphagym download`"):
        run_stage(p, "panel")



def test_a_short_stop_at_the_end_is_filled_like_missing_sessions(tmp_path, params):
    """A file ending at most max_fill_gap sessions early is carried forward (and logged), not an error."""
    train, holdout, repairs = _build(_folder(tmp_path, edit=lambda df: df.iloc[:-3]), params)
    assert [r["rule"] for r in repairs] == ["missing_sessions"] * 3
    assert holdout["close"][-1, 1] == holdout["close"][-4, 1]


def test_history_before_the_panel_start_is_not_a_late_start(tmp_path, params):
    """A ticker listed weeks before data.start (FB: 2012-05-18 against 2012-06-29) has every panel day; one
    whose file starts earlier than the others' must not make the others look late."""
    folder = _folder(tmp_path)
    _write_plain(folder, "EARLY", days=sessions("XNYS", "2020-11-02", "2021-03-31"), seed=4)
    train, _, repairs = _build(folder, params)
    assert repairs == [] and train.shape[1] == 4 and train.dates[0] == pd.Timestamp("2021-01-04")


def test_empty_and_provider_error_files_name_the_ticker(tmp_path):
    (tmp_path / "EMPTY.csv").write_text("")
    with pytest.raises(DataError, match="file is empty") as info:
        read_ticker_csv(tmp_path / "EMPTY.csv")
    assert info.value.ticker == "EMPTY" and info.value.file.endswith("EMPTY.csv")
    api = tmp_path / "DA-XYZ-T-2021-04-21.csv"
    api.write_text('{\n    "Error Message": "Invalid API call. Please retry or visit the documentation."\n}\n')
    with pytest.raises(DataError, match="a message from the data provider, not prices") as info:
        read_ticker_csv(api)
    assert info.value.ticker == "XYZ"


def test_zero_split_coefficient_is_a_logged_repair(tmp_path, params):
    folder = tmp_path / "av"
    folder.mkdir()
    for t, seed in (("AAA", 1), ("BBB", 2), ("CCC", 3)):
        rng = np.random.default_rng(seed)
        close = 100 * np.exp(np.cumsum(rng.normal(0, 0.01, len(DAYS))))
        split = np.ones(len(DAYS))
        if t == "BBB":
            split[7] = 0.0
        pd.DataFrame({"timestamp": [d.strftime("%Y-%m-%d") for d in DAYS][::-1], "open": close[::-1],
                      "high": close[::-1] * 1.01, "low": close[::-1] * 0.99, "close": close[::-1],
                      "adjusted_close": close[::-1], "volume": 1_000_000, "dividend_amount": 0.0,
                      "split_coefficient": split[::-1]}).to_csv(folder / f"DA-{t}-T-2021-04-21.csv", index=False)
    train, _, repairs = _build(folder, params)
    assert [(r["rule"], r["ticker"], r["date"]) for r in repairs] == [
        ("zero_split_coefficient", "BBB", str(DAYS[7].date()))]
    assert np.allclose(train["volume"][:, 1], 1_000_000)            # read as 1: no split, volume unchanged
    with pytest.raises(DataError, match="split_coefficient 0"):
        _build(folder, params, {"zero_split_coefficient": "error"})


def test_missing_universe_ticker_says_how_to_read_every_file(tmp_path):
    with pytest.raises(DataError, match=r"set data.universe to \[\] to read every file"):
        read_csv_folder(_folder(tmp_path), universe=["AAA", "ZZZ"])
    prices, sectors = read_csv_folder(_folder(tmp_path), universe=[])
    assert sorted(sectors) == ["AAA", "BBB", "CCC"]
