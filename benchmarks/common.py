"""Shared benchmark setup: the simulated 3,556 x 46 panel, the workload, timing helpers."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))          # the slow pandas reference lives with the tests

from alphagym.config import load_params  # noqa: E402
from alphagym.data.build_panel import build_full_panel  # noqa: E402
from alphagym.data.sources import load_source  # noqa: E402
from alphagym.panel import Panel  # noqa: E402

PROBES = [
    "rank(ts_max(volume / vwap, 11) / ts_mean(close, 21))",
    "rank(ts_max(volume / vwap, 34) / ts_std(returns, 34))",
    "rank(ts_std(volume / (high - low), 34))",
    "rank(ts_std(volume, 8) / ts_std(close, 8))",
    "rank(ts_std(volume, 17) / ts_mean(volume, 17) + ts_std(volume, 17) / ts_mean(volume, 17))",
]


def simulated_panel() -> Panel:
    params = load_params(ROOT / "params.yaml")
    prices, sectors, _ = load_source(params)
    panel, _ = build_full_panel(prices, sectors, params)
    return panel


def best_time(fn: Callable[[], object], repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def geomean(xs: list[float]) -> float:
    import math

    return math.exp(sum(math.log(x) for x in xs) / len(xs))
