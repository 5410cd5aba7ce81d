"""Download the universe from Yahoo Finance through `yfinance`, with retries and a per-ticker cache.

The fetch function is injectable so tests replay a recorded response instead of touching the network.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from alphagym.artifacts import read_parquet
from alphagym.errors import ArtifactError, DataError, SourceUnavailableError
from alphagym.params import YFinance

YAHOO_HOST = "query1.finance.yahoo.com"
Fetch = Callable[[str, str, str], pd.DataFrame]


def network_available(host: str = YAHOO_HOST, timeout: float = 3.0) -> bool:
    """One DNS + TCP attempt, so an offline machine fails in seconds, not after every retry."""
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def yahoo_fetch(ticker: str, start: str, end: str) -> pd.DataFrame:
    """The real call: unadjusted OHLCV plus Adj Close, dividends and splits."""
    import yfinance as yf

    end_excl = str((pd.Timestamp(end) + pd.Timedelta(days=1)).date())
    return yf.Ticker(ticker.replace(".", "-")).history(start=start, end=end_excl, auto_adjust=False,
                                                       actions=True)


def to_raw(ticker: str, hist: pd.DataFrame) -> pd.DataFrame:
    """yfinance history frame -> the raw schema shared with the CSV source."""
    need = {"Open", "High", "Low", "Close", "Adj Close", "Volume"}
    if hist is None or hist.empty or not need <= set(hist.columns):
        raise DataError("yfinance_response", f"empty or incomplete response (columns "
                        f"{[] if hist is None else list(hist.columns)})", ticker=ticker)
    idx = pd.DatetimeIndex(hist.index)
    if idx.tz is not None:
        idx = idx.tz_localize(None)
    splits = hist["Stock Splits"] if "Stock Splits" in hist else 0.0
    return pd.DataFrame({
        "date": idx.normalize(), "ticker": ticker,
        "open": hist["Open"].to_numpy(float), "high": hist["High"].to_numpy(float),
        "low": hist["Low"].to_numpy(float), "close": hist["Close"].to_numpy(float),
        "adjusted_close": hist["Adj Close"].to_numpy(float), "volume": hist["Volume"].to_numpy(float),
        "dividend_amount": (hist["Dividends"] if "Dividends" in hist else 0.0),
        "split_coefficient": pd.Series(splits, index=hist.index).replace(0.0, 1.0).to_numpy(float),
        "source_file": f"yfinance:{ticker}",
    }).reset_index(drop=True)


def download_universe(tickers: list[str], start: str, end: str, cfg: YFinance,
                      fetch: Fetch | None = None, check_network: bool = True) -> pd.DataFrame:
    """Fetch each ticker (cache first), retrying transient failures with exponential backoff."""
    cache = Path(cfg.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    todo = [t for t in tickers if not (cache / f"{t}_{start}_{end}.parquet").is_file()]
    if todo and fetch is None:
        if check_network and not network_available():
            raise SourceUnavailableError(
                f"cannot reach {YAHOO_HOST}: no network. Use data.source=synthetic (embedded simulator) or "
                "data.source=csv with data.csv_dir pointing at per-ticker CSV files "
                "(e.g. ../shared/data/sp500-daily)")
        fetch = yahoo_fetch
    from tqdm import tqdm

    frames = []
    for ticker in tqdm(tickers, desc="yfinance", unit="ticker", disable=len(tickers) < 2):
        path = cache / f"{ticker}_{start}_{end}.parquet"
        if path.is_file():
            try:
                frames.append(read_parquet(path, what="yfinance cache file"))
                continue
            except ArtifactError:        # cut short or garbled: a cache, so fetch it again
                path.unlink()
        last: Exception | None = None
        for attempt in range(cfg.retries):
            try:
                raw = to_raw(ticker, fetch(ticker, start, end))
                break
            except DataError:
                raise
            except Exception as exc:  # network errors of any library: retry, then report
                last = exc
                time.sleep(cfg.backoff_s * 2**attempt)
        else:
            raise SourceUnavailableError(f"yfinance: {ticker} failed after {cfg.retries} tries: {last}. "
                                         "Alternatives: data.source=synthetic or data.source=csv")
        tmp = path.with_suffix(".tmp")
        raw.to_parquet(tmp, index=False)
        tmp.replace(path)
        frames.append(raw)
    return pd.concat(frames, ignore_index=True)
