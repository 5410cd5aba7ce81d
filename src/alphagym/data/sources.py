"""The `download` stage: one entry point over the three sources (synthetic, csv, yfinance)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from alphagym.artifacts import write_parquet
from alphagym.data.csv_source import read_csv_folder
from alphagym.data.simulator import simulate_market
from alphagym.errors import ConfigError
from alphagym.params import Params

RAW_COLUMNS = ["date", "ticker", "open", "high", "low", "close", "adjusted_close", "volume",
               "dividend_amount", "split_coefficient", "source_file"]


def load_source(params: Params) -> tuple[pd.DataFrame, dict[str, str], dict[str, Any]]:
    """(long raw prices, ticker -> sector, ground truth or a note saying there is none)."""
    d = params.data
    src = d.source
    if src == "synthetic":
        m = simulate_market(params.simulator, calendar=d.calendar, start=d.start, end=d.end,
                            seed=params.seed)
        prices = m.prices.assign(source_file="simulator")
        return prices, m.sectors, m.ground_truth
    note = {"source": src, "note": "real data: no planted effects, no ground truth"}
    if src == "csv":
        prices, sectors = read_csv_folder(d.csv_dir, d.csv_format, d.universe,
                                          d.sectors_file)
        return prices, sectors, note
    if src == "yfinance":
        from alphagym.data.yfinance_source import download_universe

        prices = download_universe(list(d.universe), d.start, d.end, params.yfinance)
        return prices, {t: "Unknown" for t in d.universe}, note
    raise ConfigError(f"data.source must be synthetic, csv or yfinance; got {src!r}")


def write_raw(paths: dict[str, Path], source: str, prices: pd.DataFrame, sectors: dict[str, str],
              truth: dict[str, Any]) -> None:
    """Write atomically: each file goes to a temporary name first, so a failure never leaves half a file."""
    prices = prices.copy()
    for col in RAW_COLUMNS:
        if col not in prices.columns:
            prices[col] = 1.0 if col == "split_coefficient" else 0.0
    prices = prices[RAW_COLUMNS].sort_values(["date", "ticker"], kind="stable").reset_index(drop=True)
    prices["date"] = pd.to_datetime(prices["date"])
    meta = {"source": source, "tickers": sorted(sectors), "sectors": sectors,
            "rows": int(len(prices))}
    outputs = {
        "prices": lambda p: write_parquet(prices, p),
        "meta": lambda p: p.write_text(json.dumps(meta, indent=1, sort_keys=True)),
        "truth": lambda p: p.write_text(json.dumps(truth, indent=1, sort_keys=True, default=float)),
    }
    for key, write in outputs.items():
        tmp = paths[key].with_suffix(paths[key].suffix + ".tmp")
        write(tmp)
        tmp.replace(paths[key])
