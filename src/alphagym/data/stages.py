"""Implementations of the `download`, `panel` and `calibrate` commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from alphagym.config import results_dir
from alphagym.data.build_panel import build_panel
from alphagym.data.calibrate import calibrate
from alphagym.data.csv_source import read_csv_folder
from alphagym.data.sources import load_source, raw_paths, write_raw
from alphagym.data.stylized import stylized_facts
from alphagym.errors import DataError
from alphagym.tracking import stage_run


def run_download(params: dict[str, Any]) -> dict[str, Path]:
    with stage_run("download", params) as run:
        prices, sectors, truth = load_source(params)
        paths = write_raw(params, prices, sectors, truth)
        run.log_metrics({"rows": len(prices), "tickers": len(sectors)})
        run.log_artifact(paths["meta"])
        if params["data"]["source"] == "synthetic":
            run.log_artifact(paths["truth"])
    return paths


def panel_paths(params: dict[str, Any]) -> dict[str, Path]:
    root = results_dir(params) / "panel"
    return {"train": root / "train.parquet", "holdout": root / "holdout.parquet",
            "repairs": root / "repairs.json", "summary": root / "summary.json"}


def run_panel(params: dict[str, Any]) -> dict[str, Path]:
    raw = raw_paths(params)
    for key in ("prices", "meta"):
        if not raw[key].is_file():
            raise DataError("missing_file", "raw data not found; run `alphagym download` first", file=str(raw[key]))
    meta = json.loads(raw["meta"].read_text())
    with stage_run("panel", params) as run:
        prices = pd.read_parquet(raw["prices"])
        train, holdout, repairs = build_panel(prices, meta["sectors"], params)
        out = panel_paths(params)
        train.write_parquet(out["train"])
        holdout.write_parquet(out["holdout"])
        out["repairs"].write_text(json.dumps(repairs, indent=1))
        facts = stylized_facts(train)
        summary = {"train_sessions": train.shape[0], "holdout_sessions": int(holdout.in_holdout.sum()),
                   "holdout_warmup_sessions": int((~holdout.in_holdout).sum()), "stocks": train.shape[1],
                   "train_first": str(train.dates[0].date()), "train_last": str(train.dates[-1].date()),
                   "holdout_first": str(holdout.dates[holdout.in_holdout][0].date()),
                   "holdout_last": str(holdout.dates[-1].date()), "repairs": len(repairs),
                   "stylized_facts_train": facts}
        out["summary"].write_text(json.dumps(summary, indent=1))
        run.log_metrics({"train_sessions": summary["train_sessions"], "repairs": len(repairs),
                         **{f"train.{k}": v for k, v in facts.items()}})
        run.log_artifact(out["repairs"])
        run.log_artifact(out["summary"])
    return out


def folder_panel(params: dict[str, Any], folder: str) -> Any:
    """All of a real CSV folder as one panel (every session it has; no holdout split)."""
    d = params["data"]
    prices, sectors = read_csv_folder(folder, d.get("csv_format", "auto"), None, d.get("sectors_file"))
    first, last = prices["date"].min(), prices["date"].max()
    local = {**params, "data": {**d, "start": str(first.date()), "end": str(last.date()),
                                "train_end": str((last - pd.Timedelta(days=1)).date()),
                                "holdout_start": str(last.date()), "holdout_warmup_sessions": 0}}
    train, _, _ = build_panel(prices, sectors, local)
    return train


def run_calibrate(params: dict[str, Any], folder: str, out: str | None) -> str:
    """Fit the simulator to a real folder; print (or write) a `simulator.calibrated` params block."""
    cal = calibrate(folder_panel(params, folder), params["simulator"], calendar=params["data"]["calendar"],
                    seed=int(params["seed"]))
    text = yaml.safe_dump({"simulator": {"calibrated": cal}}, sort_keys=False)
    if out:
        Path(out).write_text(text)
    return text


def run_compare_facts(params: dict[str, Any], folder: str, seeds: int = 16, first_seed: int = 100,
                      plot: str | None = None) -> str:
    """Simulator (mean over `seeds` seeds the calibration never used) next to the real train window."""
    from alphagym.data.calibrate import simulated_facts
    from alphagym.data.stylized import compare_facts, facts_table

    real_train = folder_panel(params, folder)
    real = stylized_facts(real_train)
    sim = simulated_facts(params["simulator"], calendar=params["data"]["calendar"],
                          start=str(real_train.dates[0].date()), end=str(real_train.dates[-1].date()),
                          seeds=range(first_seed, first_seed + seeds))
    rows = compare_facts(real, sim, params["stylized_tolerance"])
    head = (f"Real: {folder}, {real_train.shape[0]} sessions {real_train.dates[0].date()} to "
            f"{real_train.dates[-1].date()}. Simulator: same sessions, mean over seeds "
            f"{first_seed}..{first_seed + seeds - 1} (calibration used seeds {params['seed']}.."
            f"{int(params['seed']) + 15}).\n\n")
    extra = (f"\n\nDollar-volume spread across stocks (log10 max/min of medians): real "
             f"{real['dollar_volume_log10_spread']:.2f}, simulator {sim['dollar_volume_log10_spread']:.2f}.")
    if plot:
        from alphagym.data.calibrate import _quick_panel
        from alphagym.data.simulator import simulate_market
        from alphagym.report.plots import stylized_figure

        sim_panel = _quick_panel(simulate_market(params["simulator"], calendar=params["data"]["calendar"],
                                                 start=str(real_train.dates[0].date()),
                                                 end=str(real_train.dates[-1].date()), seed=first_seed))
        stylized_figure(real_train, sim_panel, plot, f"real ({folder}) vs simulator (seed {first_seed})")
        extra += f"\n\nFigure: {plot}"
    return head + facts_table(rows) + extra
