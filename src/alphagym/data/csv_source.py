"""Read a folder of per-ticker daily CSV files (AlphaVantage "daily adjusted" or plain OHLCV).

Every cell is checked while reading: a non-numeric cell is a DataError naming the file, the ticker, the
date and the column, raised before anything is written.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from alphagym.errors import DataError, SourceUnavailableError

ALPHAVANTAGE_COLUMNS = ["timestamp", "open", "high", "low", "close", "adjusted_close", "volume",
                        "dividend_amount", "split_coefficient"]
PLAIN_COLUMNS = ["date", "open", "high", "low", "close", "volume"]
NUMERIC = ["open", "high", "low", "close", "adjusted_close", "volume", "dividend_amount", "split_coefficient"]
_AV_NAME = re.compile(r"^DA-(?P<ticker>.+)-T-\d{4}-\d{2}-\d{2}$")


def ticker_from_filename(path: Path) -> str:
    """`DA-AAPL-T-2021-04-21.csv` -> AAPL; `AAPL.csv` -> AAPL."""
    m = _AV_NAME.match(path.stem)
    return m.group("ticker") if m else path.stem


def detect_format(columns: list[str], path: Path, ticker: str | None = None) -> str:
    cols = [c.strip().lower() for c in columns]
    if cols[: len(ALPHAVANTAGE_COLUMNS)] == ALPHAVANTAGE_COLUMNS:
        return "alphavantage"
    if cols[: len(PLAIN_COLUMNS)] == PLAIN_COLUMNS:
        return "plain"
    head = ",".join(columns)
    if head.lstrip().startswith("{"):             # e.g. { "Error Message": ... } or { "Note": ... }
        raise DataError("csv_format", f"the file holds a message from the data provider, not prices: "
                        f"{head[:200]!r}; download it again", file=str(path), ticker=ticker)
    raise DataError("csv_format", f"unknown header {columns}; expected {ALPHAVANTAGE_COLUMNS} "
                    f"or {PLAIN_COLUMNS}", file=str(path), ticker=ticker)


def read_ticker_csv(path: Path, fmt: str = "auto") -> pd.DataFrame:
    """One ticker's file -> DataFrame with the canonical columns (date, ticker, NUMERIC...)."""
    ticker = ticker_from_filename(path)
    try:
        raw = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise DataError("csv_empty", "file is empty (no header, no rows)", file=str(path), ticker=ticker) from None
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise DataError("csv_parse", f"cannot parse: {exc}", file=str(path), ticker=ticker) from exc
    if raw.empty:
        raise DataError("csv_empty", "file has no rows", file=str(path), ticker=ticker)
    found = detect_format(list(raw.columns), path, ticker)
    if fmt != "auto" and fmt != found:
        raise DataError("csv_format", f"expected {fmt} format, found {found}", file=str(path), ticker=ticker)
    raw.columns = [c.strip().lower() for c in raw.columns]
    date_col = "timestamp" if found == "alphavantage" else "date"
    dates = pd.to_datetime(raw[date_col].str.strip(), format="%Y-%m-%d", errors="coerce")
    if dates.isna().any():
        i = int(np.flatnonzero(dates.isna().to_numpy())[0])
        raise DataError("non_numeric", f"row {i + 2}: date {raw[date_col].iloc[i]!r} is not YYYY-MM-DD",
                        file=str(path), ticker=ticker)
    out = pd.DataFrame({"date": dates, "ticker": ticker})
    for col in NUMERIC:
        if col not in raw.columns:
            continue
        vals = pd.to_numeric(raw[col].str.strip(), errors="coerce")
        bad = vals.isna() | ~np.isfinite(vals.to_numpy(dtype=float))
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise DataError("non_numeric", f"column {col!r} row {i + 2}: {raw[col].iloc[i]!r} is not a number",
                            file=str(path), ticker=ticker, date=str(dates.iloc[i].date()))
        out[col] = vals.astype(float).to_numpy()
    if found == "plain":
        out["adjusted_close"] = out["close"]
        out["dividend_amount"] = 0.0
        out["split_coefficient"] = 1.0
    out["source_file"] = str(path)
    return out


def read_sectors(folder: Path, sectors_file: str | None) -> dict[str, str]:
    """Ticker -> sector from a `Symbol,...,Sector` file if the folder has one."""
    if not sectors_file:
        return {}
    path = folder / sectors_file
    if not path.is_file():
        return {}
    df = pd.read_csv(path, dtype=str)
    cols = {c.lower(): c for c in df.columns}
    if "symbol" not in cols or "sector" not in cols:
        raise DataError("sectors_file", f"needs Symbol and Sector columns, has {list(df.columns)}", file=str(path))
    return dict(zip(df[cols["symbol"]].str.strip(), df[cols["sector"]].str.strip()))


def read_csv_folder(folder: str | Path, fmt: str = "auto", universe: list[str] | None = None,
                    sectors_file: str | None = None) -> tuple[pd.DataFrame, dict[str, str]]:
    """Read every per-ticker CSV of a folder (optionally only `universe`); returns (long prices, sectors)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise SourceUnavailableError(f"csv folder {str(folder)!r} does not exist; set data.csv_dir, or use "
                                     "data.source=synthetic (embedded simulator, no files needed)")
    skip = {sectors_file} if sectors_file else set()
    files = sorted(p for p in folder.glob("*.csv") if p.name not in skip)
    by_ticker = {ticker_from_filename(p): p for p in files}
    if universe:
        missing = [t for t in universe if t not in by_ticker]
        if missing:
            raise DataError("universe", f"no file for tickers {missing} (data.universe lists the tickers to "
                            f"read; set data.universe to [] to read every file in the folder)", file=str(folder))
        by_ticker = {t: by_ticker[t] for t in universe}
    if not by_ticker:
        raise DataError("csv_empty", "no *.csv files", file=str(folder))
    frames = [read_ticker_csv(p, fmt) for p in by_ticker.values()]
    sectors = read_sectors(folder, sectors_file)
    prices = pd.concat(frames, ignore_index=True)
    return prices, {t: sectors.get(t, "Unknown") for t in by_ticker}
