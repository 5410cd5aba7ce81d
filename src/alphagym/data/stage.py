"""The data stages: `download` (simulate or fetch raw prices) and `panel` (validate, adjust, split)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from alphagym.artifacts import read_json, read_parquet
from alphagym.data.build_panel import build_panel
from alphagym.data.sources import load_source, write_raw
from alphagym.data.stylized import stylized_facts
from alphagym.params import Params
from alphagym.tracking import StageRun


def download(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun) -> dict[str, Any]:
    prices, sectors, truth = load_source(params)
    write_raw(outs, params.data.source, prices, sectors, truth)
    run.log_metrics({"rows": len(prices), "tickers": len(sectors)})
    run.log_artifact(outs["meta"])
    if params.data.source == "synthetic":
        run.log_artifact(outs["truth"])
    return {"rows": len(prices), "tickers": len(sectors)}


def panel(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun) -> dict[str, Any]:
    meta = read_json(deps["meta"], keys=("sectors",), what="raw prices' meta")
    prices = read_parquet(deps["prices"], what="raw prices")
    train, holdout, repairs = build_panel(prices, meta["sectors"], params)
    train.write_parquet(outs["train"])
    holdout.write_parquet(outs["holdout"])
    outs["repairs"].write_text(json.dumps(repairs, indent=1))
    facts = stylized_facts(train)
    summary = {"train_sessions": train.shape[0], "holdout_sessions": int(holdout.in_holdout.sum()),
               "holdout_warmup_sessions": int((~holdout.in_holdout).sum()), "stocks": train.shape[1],
               "train_first": str(train.dates[0].date()), "train_last": str(train.dates[-1].date()),
               "holdout_first": str(holdout.dates[holdout.in_holdout][0].date()),
               "holdout_last": str(holdout.dates[-1].date()), "repairs": len(repairs),
               "stylized_facts_train": facts}
    outs["summary"].write_text(json.dumps(summary, indent=1))
    run.log_metrics({"train_sessions": summary["train_sessions"], "repairs": len(repairs),
                     **{f"train.{k}": v for k, v in facts.items()}})
    run.log_artifact(outs["repairs"])
    run.log_artifact(outs["summary"])
    return summary
