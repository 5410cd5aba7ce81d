"""The panel: (days x stocks) float64 arrays of the fields every later stage reads.

Stored on disk as a long parquet table (date, ticker, sector, fields..., in_holdout) because that is what
pandas, DVC diffs and people read; held in memory as dense C-contiguous arrays because that is what the
evaluator's kernels want.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from alphagym.artifacts import read_parquet, write_parquet
from alphagym.errors import DataError

# The one list of fields. OHLCV_FIELDS are the daily bars a source gives; DSL_FIELDS are what a formula may
# read; PANEL_FIELDS are what a panel file stores (the last two feed costs and the market factor, not formulas).
OHLCV_FIELDS = ("open", "high", "low", "close", "volume")
DSL_FIELDS = (*OHLCV_FIELDS, "returns", "vwap")
PANEL_FIELDS = (*DSL_FIELDS, "dollar_volume", "market_return")
# The fields quoted in currency per share: an average of one over many sessions tracks the price level, a
# market-beta proxy (the briefs' `forbid_long_price_sums` check).
PRICE_LEVEL_FIELDS = frozenset({"open", "high", "low", "close", "vwap"})


def typical_price(high: np.ndarray, low: np.ndarray, close: np.ndarray) -> np.ndarray:
    """The panel's `vwap` field: daily bars carry no intraday volume profile, so the volume-weighted average
    price is approximated by the day's typical price (high + low + close) / 3."""
    return (high + low + close) / 3.0


@dataclass(frozen=True)
class Panel:
    dates: pd.DatetimeIndex
    tickers: tuple[str, ...]
    sectors: tuple[str, ...]
    fields: dict[str, np.ndarray] = field(repr=False)
    in_holdout: np.ndarray = field(repr=False)   # (T,) bool; False on warm-up sessions

    @property
    def shape(self) -> tuple[int, int]:
        return len(self.dates), len(self.tickers)

    def sector_codes(self) -> np.ndarray:
        """Integer sector code per stock (sorted sector names)."""
        return np.unique(np.asarray(self.sectors), return_inverse=True)[1].astype(np.int64)

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self.fields[name]
        except KeyError:
            raise KeyError(f"panel has no field {name!r} (has {sorted(self.fields)})") from None

    def slice_days(self, start: int, stop: int) -> Panel:
        return Panel(self.dates[start:stop], self.tickers, self.sectors,
                     {k: np.ascontiguousarray(v[start:stop]) for k, v in self.fields.items()},
                     self.in_holdout[start:stop])

    def to_long(self) -> pd.DataFrame:
        t, n = self.shape
        out = pd.DataFrame({
            "date": np.repeat(self.dates.values, n),
            "ticker": np.tile(np.asarray(self.tickers, dtype=object), t),
            "sector": np.tile(np.asarray(self.sectors, dtype=object), t),
        })
        for name in PANEL_FIELDS:
            if name in self.fields:
                out[name] = self.fields[name].ravel()
        out["in_holdout"] = np.repeat(self.in_holdout, n)
        return out

    @classmethod
    def from_long(cls, df: pd.DataFrame, source: str = "<frame>") -> Panel:
        need = {"date", "ticker", "sector", "in_holdout"}
        missing = need - set(df.columns)
        if missing:
            raise DataError("panel_schema", f"missing columns {sorted(missing)}", file=source)
        df = df.sort_values(["date", "ticker"], kind="stable")
        dates = pd.DatetimeIndex(df["date"].unique(), name="date")
        tickers = tuple(pd.unique(df["ticker"]))
        t, n = len(dates), len(tickers)
        if len(df) != t * n:
            raise DataError("panel_schema", f"{len(df)} rows is not days x tickers = {t} x {n}", file=source)
        first = df.iloc[:n]
        fields = {c: np.ascontiguousarray(df[c].to_numpy(dtype=np.float64).reshape(t, n))
                  for c in PANEL_FIELDS if c in df.columns}
        return cls(dates, tickers, tuple(first["sector"].astype(str)), fields,
                   df["in_holdout"].to_numpy(dtype=bool).reshape(t, n)[:, 0].copy())

    def write_parquet(self, path: str | Path) -> None:
        write_parquet(self.to_long(), path)    # atomic: a crash never leaves a half-written panel

    @classmethod
    def read_parquet(cls, path: str | Path) -> Panel:
        path = Path(path)
        if not path.is_file():
            raise DataError("missing_file", "panel file not found; run `alphagym panel` first", file=str(path))
        return cls.from_long(read_parquet(path, what="panel"), source=str(path))

    @classmethod
    def read_parquet_cached(cls, path: str | Path, cache_dir: str | Path) -> Panel:
        """`read_parquet` through a dense binary copy in `cache_dir`, for commands whose start-up is their
        cost (`alphagym score` reads the train panel and every kept world: 0.15-0.5 s from parquet in a fresh
        process, about 0.03 s from the copies). The copy is keyed by the file's resolved path, size, mtime
        and inode, as the scoring server checks its inputs: a stage rewrites a panel by an atomic replace
        (a new inode), so a rewritten file never meets an old copy. A copy that cannot be read is rebuilt;
        older copies of the same file are removed when a new one is written."""
        path = Path(path)
        if not path.is_file():
            raise DataError("missing_file", "panel file not found; run `alphagym panel` first", file=str(path))
        st, where = path.stat(), str(path.resolve())
        stem = hashlib.sha1(where.encode()).hexdigest()[:12]
        key = hashlib.sha1(f"{where}|{st.st_size}|{st.st_mtime_ns}|{st.st_ino}".encode()).hexdigest()[:12]
        copy = Path(cache_dir) / f"{stem}-{key}.npz"
        if copy.is_file():
            try:
                return cls._from_npz(copy)
            except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
                copy.unlink(missing_ok=True)          # torn or foreign: read the parquet again
        panel = cls.read_parquet(path)
        copy.parent.mkdir(parents=True, exist_ok=True)
        tmp = copy.with_name(f".{copy.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.savez(fh, dates=panel.dates.values.astype("datetime64[ns]"),
                     tickers=np.asarray(panel.tickers, dtype=str), sectors=np.asarray(panel.sectors, dtype=str),
                     in_holdout=panel.in_holdout,
                     **{f"field_{k}": v for k, v in panel.fields.items()})
        tmp.replace(copy)
        for old in copy.parent.glob(f"{stem}-*.npz"):
            if old != copy:
                old.unlink(missing_ok=True)
        return panel

    @classmethod
    def _from_npz(cls, path: Path) -> Panel:
        with np.load(path, allow_pickle=False) as z:
            fields = {k[len("field_"):]: np.ascontiguousarray(z[k]) for k in z.files if k.startswith("field_")}
            return cls(pd.DatetimeIndex(z["dates"], name="date"), tuple(str(t) for t in z["tickers"]),
                       tuple(str(x) for x in z["sectors"]), fields, z["in_holdout"].astype(bool))
