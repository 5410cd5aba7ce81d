"""Shared benchmark setup: the simulated 3,556 x 46 panel, the workload, timing helpers."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))          # the slow pandas reference lives with the tests

from alphagym.runtime import configure_runtime  # noqa: E402

configure_runtime()          # what every alphagym command runs with: timed as the pipeline runs

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


def scoring_verifier(params: dict, stress_worlds: str | None = None, kept_only: str | None = None):
    """(train panel, verifier) as the pipeline's scoring sees them: the train window, the novelty archive
    seeded with the Alpha101 books and, R3 on, every world panel in `stress_worlds` (only those the gate
    report `kept_only` keeps, as the pipeline's verifier loads them)."""
    from alphagym.data.build_panel import build_panel
    from alphagym.verifier.loading import load_kept_worlds, seed_archive
    from alphagym.verifier.verifier import Verifier

    prices, sectors, _ = load_source(params)
    train, _, _ = build_panel(prices, sectors, params)
    worlds = {}
    if stress_worlds:
        if kept_only:
            worlds = load_kept_worlds(Path(kept_only), Path(stress_worlds))
            if not worlds:
                print(f"{kept_only} keeps no world: R3 stays off")
        else:
            worlds = {p.stem: Panel.read_parquet(p) for p in sorted(Path(stress_worlds).glob("*.parquet"))}
    verifier = Verifier(train, params, stress_worlds=worlds)
    seed_archive(train, params, progress=False, archive=verifier.archive, scorer=verifier.scorer,
                 evaluator=verifier.evaluator)
    return train, verifier


def times(fn: Callable[[], object], repeats: int) -> list[float]:
    """Wall times of `repeats` calls (seconds)."""
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def median_p90(ts: list[float]) -> tuple[float, float]:
    import numpy as np

    return float(np.median(ts)), float(np.percentile(ts, 90))


class CompetingLoad:
    """A CPU-bound process on one core for the duration of a `with` block, started by the benchmark.

    It stands for what the RL loop runs next to scoring (the policy's torch threads): on 2 cores it takes
    one, and any kernel that wants both waits for the scheduler."""

    def __init__(self, active: bool = True) -> None:
        self.active, self.proc = active, None

    def __enter__(self) -> CompetingLoad:
        if self.active:
            import subprocess

            self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            time.sleep(0.5)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


def print_ratios(name: str, ratios: dict[str, tuple[float, float]]) -> None:
    """A benchmark's last lines, one per condition: `<name>_<condition>_median=` and `_p90=` ratios."""
    for condition, (m, p) in ratios.items():
        print(f"{name}_{condition}_median={m:.2f}")
        print(f"{name}_{condition}_p90={p:.2f}")


def geomean(xs: list[float]) -> float:
    import math

    return math.exp(sum(math.log(x) for x in xs) / len(xs))
