"""Data tools outside the DAG: fit the simulator to a real folder, compare their stylized facts."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import yaml

from alphagym.data.build_panel import build_panel
from alphagym.data.calibrate import calibrate
from alphagym.data.csv_source import read_csv_folder
from alphagym.data.stylized import stylized_facts
from alphagym.panel import Panel
from alphagym.params import Params


def folder_panel(params: Params, folder: str) -> Panel:
    """All of a real CSV folder as one panel (every session it has; no holdout split)."""
    d = params.data
    prices, sectors = read_csv_folder(folder, d.csv_format, None, d.sectors_file)
    first, last = prices["date"].min(), prices["date"].max()
    local = params.model_copy(update={"data": d.model_copy(update={
        "start": str(first.date()), "end": str(last.date()), "train_end": str((last - pd.Timedelta(days=1)).date()),
        "holdout_start": str(last.date()), "holdout_warmup_sessions": 0})})
    train, _, _ = build_panel(prices, sectors, local)
    return train


def calibrated_block(params: Params, folder: str, out: str | None) -> str:
    """Fit the simulator to a real folder; the `simulator.calibrated` params block as YAML (also to `out`)."""
    cal = calibrate(folder_panel(params, folder), params.simulator, calendar=params.data.calendar,
                    seed=params.seed)
    text = yaml.safe_dump({"simulator": {"calibrated": cal}}, sort_keys=False)
    if out:
        Path(out).write_text(text)
    return text


def compare_with_real(params: Params, folder: str, seeds: int = 16, first_seed: int = 100,
                      plot: str | None = None) -> str:
    """Simulator (mean over `seeds` seeds the calibration never used) next to the real train window, as
    Markdown."""
    from alphagym.data.calibrate import quick_panel, simulated_facts
    from alphagym.data.stylized import compare_facts, facts_table

    real_train = folder_panel(params, folder)
    real = stylized_facts(real_train)
    sim = simulated_facts(params.simulator, calendar=params.data.calendar,
                          start=str(real_train.dates[0].date()), end=str(real_train.dates[-1].date()),
                          seeds=range(first_seed, first_seed + seeds))
    rows = compare_facts(real, sim, params.stylized_tolerance)
    head = (f"Real: {folder}, {real_train.shape[0]} sessions {real_train.dates[0].date()} to "
            f"{real_train.dates[-1].date()}. Simulator: same sessions, mean over seeds "
            f"{first_seed}..{first_seed + seeds - 1} (calibration used seeds {params.seed}.."
            f"{params.seed + 15}).\n\n")
    extra = (f"\n\nDollar-volume spread across stocks (log10 max/min of medians): real "
             f"{real['dollar_volume_log10_spread']:.2f}, simulator {sim['dollar_volume_log10_spread']:.2f}.")
    if plot:
        from alphagym.data.plots import stylized_figure
        from alphagym.data.simulator import simulate_market

        sim_panel = quick_panel(simulate_market(params.simulator, calendar=params.data.calendar,
                                                start=str(real_train.dates[0].date()),
                                                end=str(real_train.dates[-1].date()), seed=first_seed))
        stylized_figure(real_train, sim_panel, plot, f"real ({folder}) vs simulator (seed {first_seed})")
        extra += f"\n\nFigure: {plot}"
    return head + facts_table(rows) + extra
