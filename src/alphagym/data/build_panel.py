"""From raw prices to the adjusted, validated panel.

Each data problem has a rule name; params `data.validation.<rule>` chooses `error` (a DataError naming file,
ticker, date and rule) or `repair` (an explicit fix, recorded in the repair log that the stage writes and
logs). Conflicting duplicate rows and non-numeric cells are always errors: there is nothing safe to repair.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from alphagym.data.calendar import sessions
from alphagym.errors import DataError
from alphagym.panel import OHLCV_FIELDS, Panel, typical_price
from alphagym.params import Params

PRICE_COLS = ["open", "high", "low", "close", "adjusted_close"]
RULES = ("duplicate_dates", "non_positive_price", "high_low", "ohlc_bounds", "non_positive_volume",
         "zero_split_coefficient", "missing_sessions", "late_start_early_end")


@dataclass
class Repair:
    rule: str
    ticker: str
    date: str
    detail: str
    file: str = ""


class Validator:
    """Applies each rule in order; collects repairs; raises on `error` rules."""

    def __init__(self, rules: dict[str, Any]) -> None:
        unknown = set(rules) - set(RULES) - {"max_fill_gap"}
        if unknown:
            raise DataError("config", f"unknown validation rules {sorted(unknown)} (known: {list(RULES)})")
        for rule in RULES:
            if rules.get(rule, "error") not in ("error", "repair"):
                raise DataError("config", f"data.validation.{rule} must be 'error' or 'repair', "
                                f"got {rules.get(rule)!r}")
        self.rules = rules
        self.repairs: list[Repair] = []

    def _act(self, rule: str, rows: pd.DataFrame, detail_fn: Any) -> bool:
        """Raise for an `error` rule (on the first offending row); else log every row and return True."""
        if rows.empty:
            return False
        if self.rules.get(rule, "error") == "error":
            r = rows.iloc[0]
            raise DataError(rule, detail_fn(r) + f" ({len(rows)} row(s) break this rule; set "
                            f"data.validation.{rule}: repair to fix them)", file=str(r.get("source_file", "")),
                            ticker=str(r["ticker"]), date=str(pd.Timestamp(r["date"]).date()))
        for _, r in rows.iterrows():
            self.repairs.append(Repair(rule, str(r["ticker"]), str(pd.Timestamp(r["date"]).date()),
                                       detail_fn(r), str(r.get("source_file", ""))))
        return True

    def check_rows(self, df: pd.DataFrame) -> pd.DataFrame:
        df = df.copy()
        if "source_file" not in df.columns:
            df["source_file"] = ""
        # duplicated dates
        dup = df.duplicated(["ticker", "date"], keep=False)
        if dup.any():
            groups = df[dup].groupby(["ticker", "date"], sort=True)
            for (ticker, date), g in groups:
                if len(g[PRICE_COLS + ["volume"]].drop_duplicates()) > 1:
                    r = g.iloc[0]
                    raise DataError("duplicate_dates", f"{len(g)} conflicting rows for one date",
                                    file=str(r["source_file"]), ticker=str(ticker),
                                    date=str(pd.Timestamp(date).date()))
            first = df[dup].drop_duplicates(["ticker", "date"])
            self._act("duplicate_dates", first, lambda r: "identical duplicate rows; kept one")
            df = df.drop_duplicates(["ticker", "date"], keep="first")
        # non-positive prices -> the row becomes missing (then the missing-session rule fills it)
        bad = (df[PRICE_COLS] <= 0).any(axis=1)
        if self._act("non_positive_price", df[bad], lambda r: "price <= 0: " + ", ".join(
                f"{c}={r[c]:g}" for c in PRICE_COLS if r[c] <= 0) + "; row dropped"):
            df = df[~bad]
        # high < low
        bad = df["high"] < df["low"]
        if self._act("high_low", df[bad], lambda r: f"high {r['high']:g} < low {r['low']:g}; swapped"):
            hi, lo = df.loc[bad, "high"].copy(), df.loc[bad, "low"].copy()
            df.loc[bad, "high"], df.loc[bad, "low"] = lo, hi
        # open/close outside [low, high]
        top = df[["open", "close"]].max(axis=1)
        bot = df[["open", "close"]].min(axis=1)
        bad = (top > df["high"]) | (bot < df["low"])
        if self._act("ohlc_bounds", df[bad], lambda r: f"open {r['open']:g} / close {r['close']:g} outside "
                     f"[low {r['low']:g}, high {r['high']:g}]; range widened"):
            df.loc[bad, "high"] = np.maximum(df.loc[bad, "high"], top[bad])
            df.loc[bad, "low"] = np.minimum(df.loc[bad, "low"], bot[bad])
        # a split coefficient of 0 (some exports' "no split") -> 1
        if "split_coefficient" in df.columns:
            bad = df["split_coefficient"] == 0
            if self._act("zero_split_coefficient", df[bad], lambda r: "split_coefficient 0; read as 1 (no split)"):
                df.loc[bad, "split_coefficient"] = 1.0
        # zero or negative volume -> missing, filled from the previous session later
        bad = df["volume"] <= 0
        if self._act("non_positive_volume", df[bad], lambda r: f"volume {r['volume']:g}; "
                     "filled from the previous session"):
            df.loc[bad, "volume"] = np.nan
        return df

    def align_to_sessions(self, df: pd.DataFrame, days: pd.DatetimeIndex,
                          start: int = 0) -> dict[str, pd.DataFrame]:
        """Wide (sessions x tickers) frames; fills short gaps, keeps late starts / early ends missing.

        `start`: index in `days` of the panel's first session (earlier days are history a file may have
        before it). A ticker starts late when it has no data on the panel's first session, and ends early
        when its data stop more than `max_fill_gap` sessions before the panel's last; a shorter stop at the
        end is a run of missing sessions like any other.
        """
        off = ~df["date"].isin(days)
        if off.any():
            r = df[off].iloc[0]
            raise DataError("not_a_session", f"{int(off.sum())} row(s) on dates that are not sessions of the "
                            "calendar", file=str(r["source_file"]), ticker=str(r["ticker"]),
                            date=str(pd.Timestamp(r["date"]).date()))
        wide = {c: df.pivot(index="date", columns="ticker", values=c).reindex(days)
                for c in PRICE_COLS + ["volume", "split_coefficient"]}
        files = df.groupby("ticker")["source_file"].first()
        max_gap = int(self.rules.get("max_fill_gap", 5))
        present = wide["close"].notna()
        n = len(days)
        for ticker in wide["close"].columns:
            have = present[ticker].to_numpy()
            if not have[start:].any():
                raise DataError("late_start_early_end", f"no rows inside the panel's date range "
                                f"{days[start].date()} to {days[-1].date()}",
                                file=str(files.get(ticker, "")), ticker=str(ticker))
            first = int(np.argmax(have))
            last = n - 1 - int(np.argmax(have[::-1]))
            late, early = first > start, n - 1 - last > max_gap
            if late or early:
                where = (f"starts {days[first].date()}, after the panel's first session {days[start].date()}"
                         if late else "")
                where += ("; " if late and early else "") + (
                    f"ends {days[last].date()}, {n - 1 - last} sessions before the panel's last session "
                    f"{days[-1].date()} (more than max_fill_gap {max_gap}: a truncated file?)" if early else "")
                edge = pd.DataFrame([{"ticker": ticker, "date": days[first] if late else days[last],
                                      "source_file": files.get(ticker, "")}])
                self._act("late_start_early_end", edge, lambda r, w=where: (
                    f"{w}; with repair the ticker is kept and its missing days stay missing"))
            if not early:
                last = n - 1                 # a short stop at the end is filled like a missing session
            inside = ~have[first:last + 1]
            if inside.any():
                gaps = np.flatnonzero(inside) + first
                run_len = _longest_run(inside)
                rows = pd.DataFrame({"ticker": ticker, "date": days[gaps], "source_file": files.get(ticker, "")})
                if run_len > max_gap and self.rules.get("missing_sessions") == "repair":
                    raise DataError("missing_sessions", f"gap of {run_len} sessions exceeds max_fill_gap "
                                    f"{max_gap}", file=str(files.get(ticker, "")), ticker=str(ticker),
                                    date=str(days[gaps[0]].date()))
                self._act("missing_sessions", rows, lambda r: "session missing; prices carried forward "
                          "from the previous close, volume from the previous session")
                prev_close = wide["close"][ticker].ffill()
                for c in ("open", "high", "low", "close"):
                    wide[c].loc[days[gaps], ticker] = prev_close.loc[days[gaps]].to_numpy()
                ratio = (wide["adjusted_close"][ticker] / wide["close"][ticker]).ffill()
                wide["adjusted_close"].loc[days[gaps], ticker] = (prev_close * ratio).loc[days[gaps]].to_numpy()
                wide["split_coefficient"].loc[days[gaps], ticker] = 1.0
            # fill volumes set missing by non_positive_volume (and in filled sessions) inside the life
            vol = wide["volume"][ticker]
            life = slice(days[first], days[last])
            wide["volume"].loc[life, ticker] = vol.loc[life].ffill().bfill().to_numpy()
        return wide

    def repair_log(self) -> list[dict[str, str]]:
        return [asdict(r) for r in self.repairs]


def _longest_run(mask: np.ndarray) -> int:
    best = cur = 0
    for m in mask:
        cur = cur + 1 if m else 0
        best = max(best, cur)
    return best


def adjust(wide: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Split- and dividend-adjust: prices x adjusted_close/close; volume x later split factors.

    The price factor is taken from the data itself (adjusted_close/close), so it includes dividends; volume
    is adjusted for splits only (a dividend does not change the number of shares traded).
    """
    factor = wide["adjusted_close"] / wide["close"]
    split = wide["split_coefficient"].fillna(1.0).replace(0.0, 1.0)
    # shares after all later splits per share today: product of split coefficients strictly after t
    later = split.iloc[::-1].cumprod().iloc[::-1].shift(-1).fillna(1.0)
    out = {c: wide[c] * factor for c in ("open", "high", "low", "close")}
    out["volume"] = wide["volume"] * later
    return out


def build_full_panel(prices: pd.DataFrame, sectors: dict[str, str],
                     params: Params) -> tuple[Panel, list[dict[str, str]]]:
    """Validate, adjust and derive fields over every session from data.start to data.end (no split).

    `in_holdout` marks sessions on or after data.holdout_start. Stages write only the split files
    (`build_panel`); benchmarks and tools use the whole span.
    """
    d = params.data
    prices = prices.copy()
    prices["date"] = pd.to_datetime(prices["date"])
    first_raw = prices["date"].min()
    days_all = sessions(d.calendar, str(min(first_raw, pd.Timestamp(d.start)).date()), d.end)
    in_range = prices["date"] <= pd.Timestamp(d.end)
    validator = Validator(d.validation)
    clean = validator.check_rows(prices[in_range])
    wide = validator.align_to_sessions(clean, days_all, int(days_all.searchsorted(pd.Timestamp(d.start))))
    adj = adjust(wide)
    tickers = list(adj["close"].columns)
    f = {k: adj[k].to_numpy(dtype=np.float64) for k in OHLCV_FIELDS}
    close, opn = f["close"], f["open"]
    f["returns"] = np.full_like(close, np.nan)
    f["returns"][1:] = close[1:] / close[:-1] - 1.0
    f["vwap"] = typical_price(f["high"], f["low"], close)
    f["dollar_volume"] = close * f["volume"]
    oo = np.full_like(opn, np.nan)
    oo[1:] = opn[1:] / opn[:-1] - 1.0
    valid = np.isfinite(oo)
    mkt = np.where(valid.any(axis=1), np.where(valid, oo, 0.0).sum(axis=1) / np.maximum(valid.sum(axis=1), 1),
                   np.nan)
    f["market_return"] = np.repeat(mkt[:, None], len(tickers), axis=1)
    sec = tuple(sectors.get(t, "Unknown") for t in tickers)
    start = days_all.searchsorted(pd.Timestamp(d.start))
    hold_start = days_all.searchsorted(pd.Timestamp(d.holdout_start))
    full = Panel(days_all, tuple(tickers), sec, f, np.arange(len(days_all)) >= hold_start)
    return full.slice_days(start, len(days_all)), validator.repair_log()


def build_panel(prices: pd.DataFrame, sectors: dict[str, str],
                params: Params) -> tuple[Panel, Panel, list[dict[str, str]]]:
    """Validate, adjust, derive fields; return (train, holdout with its warm-up sessions, repairs)."""
    d = params.data
    full, repairs = build_full_panel(prices, sectors, params)
    days = full.dates
    train_end = days.searchsorted(pd.Timestamp(d.train_end), side="right")
    hold_start = days.searchsorted(pd.Timestamp(d.holdout_start))
    if not (0 < train_end <= hold_start < len(days)):
        raise DataError("date_split", f"need start < train_end < holdout_start <= end; got {d.start}, "
                        f"{d.train_end}, {d.holdout_start}, {d.end} on {len(days)} sessions")
    train = full.slice_days(0, train_end)
    warm = max(0, hold_start - d.holdout_warmup_sessions)
    holdout = full.slice_days(warm, len(days))
    return train, holdout, repairs
