"""Trading sessions from exchange_calendars, so simulated and real panels share the real NYSE calendar."""

from __future__ import annotations

from functools import lru_cache

import exchange_calendars as xc
import pandas as pd

from alphagym.errors import ConfigError


@lru_cache(maxsize=16)
def sessions(calendar: str, start: str, end: str) -> pd.DatetimeIndex:
    """All sessions of `calendar` from `start` to `end` inclusive, as tz-naive dates."""
    if calendar not in xc.get_calendar_names(include_aliases=True):
        raise ConfigError(f"data.calendar = {calendar!r}: not a calendar exchange_calendars knows "
                          f"(e.g. XNYS, XLON, XTKS; `exchange_calendars.get_calendar_names()` lists all)")
    cal = xc.get_calendar(calendar, start=pd.Timestamp(start) - pd.Timedelta(days=10),
                          end=pd.Timestamp(end) + pd.Timedelta(days=10))
    out = cal.sessions_in_range(pd.Timestamp(start), pd.Timestamp(end))
    return pd.DatetimeIndex(out.tz_localize(None) if out.tz is not None else out, name="date")
