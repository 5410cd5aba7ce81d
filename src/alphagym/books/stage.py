"""The `books` stage: one per rung (`alphagym books --rung NAME`), on the probe's shipped checkpoint.

Three books of the shipped checkpoint's valid answers, each scored on the holdout year after holdout costs:
- equal weight: every answer valid on both windows, averaged (an answer written n times weighs n);
- correlation-capped: chosen on train-window numbers only (`capped_selection`: train CPCV order, turnover
  floor, a cap on |corr| of train P&L with answers already in), then averaged;
- positive: the equal-weight book of the answers with positive train CPCV (chosen on train numbers only: the
  book a user who keeps the answers that paid in training would hold).
And the rung's archive book: the same rule over every distinct valid formula the rung wrote in training
(its last checkpoint's `written.json`, with the train CPCV and turnover each scored when written), at most
`books.archive_size` of them, chosen on train numbers only and then scored on the holdout year.
Writes the metrics of the four and of the market, and the daily returns the report plots.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from alphagym.artifacts import read_json, read_parquet, write_parquet
from alphagym.books import columns as C
from alphagym.books.metrics import book_metrics, capped_selection, capped_stream
from alphagym.errors import ArtifactError, DataError
from alphagym.panel import Panel
from alphagym.params import Params
from alphagym.tracking import StageRun
from alphagym.verifier.verifier import Verifier

# the trainer's record of written formulas in each checkpoint (`rl.env.WRITTEN`; a test keeps the two equal):
# named here so that the books stage does not import the RL code (and rerun whenever it changes)
WRITTEN = "written.json"
CHECKPOINT = re.compile(r"checkpoint-(\d{6})")

# what the books read of the probe's answers
ANSWER_COLUMNS = ("step", "valid", "formula", "canonical", "brief")


def books(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun, item: str) -> dict[str, Any]:
    cfg = params.books
    probe = read_json(deps["probe"], keys=("shipped_step", "checkpoints"), what="probe summary")
    answers = read_parquet(deps["answers"], columns=ANSWER_COLUMNS, what="probe answers")
    step = probe["shipped_step"]
    if not isinstance(step, int) or step not in probe["checkpoints"] or step not in set(answers["step"]):
        raise ArtifactError(deps["probe"], f"the shipped step {step!r} is not among the probe's checkpoints "
                                           f"{probe['checkpoints']} and answers (steps {sorted(set(answers['step']))} "
                                           f"in {deps['answers']}): the probe's outputs disagree; rerun "
                                           f"`alphagym probe --rung {item}`")
    valid = answers[(answers["step"] == step) & answers["valid"]]
    # every valid answer counts in the equal-weight book (as the seed gym reports it); a formula written n
    # times is scored once and weighted n times
    counts = valid.groupby("formula", sort=False).size()
    shipped = valid.drop_duplicates("formula")
    # the probe keeps scores, not daily P&L series: the shipped formulas (a handful) are scored again here
    train_v = Verifier(Panel.read_parquet(deps["train"]), params)
    holdout_panel = Panel.read_parquet(deps["holdout"])
    holdout_v = Verifier(holdout_panel, params, window="holdout")
    rows, train_pnl, hold_pnl = [], [], []
    for r in shipped.itertuples(index=False):
        tc, hc = train_v.score_one(r.formula), holdout_v.score_one(r.formula)
        if not (tc.valid and hc.valid):
            continue
        rows.append({"formula": r.formula, "canonical": r.canonical, "brief": r.brief, "count": int(counts[r.formula]),
                     C.TRAIN_CPCV: tc.channels["cpcv"], C.TRAIN_TURNOVER: tc.metrics["turnover"],
                     C.HOLDOUT_SCORE: hc.metrics[C.HOLDOUT_SCORE], C.HOLDOUT_SHARPE: hc.metrics["sharpe_net"],
                     C.HOLDOUT_RETURN: float(np.prod(1 + hc.pnl) - 1), C.HOLDOUT_TURNOVER: hc.metrics["turnover"]})
        train_pnl.append(tc.pnl)
        hold_pnl.append(hc.pnl)
    market = holdout_v.market[holdout_v.rows]
    dates = holdout_panel.dates[: len(holdout_v.rows)][holdout_v.rows]
    daily = pd.DataFrame({"date": dates, "market": market})
    out: dict[str, Any] = {"rung": item, "shipped_step": step, "answers": rows,
                           "market": book_metrics(market[None, :], market, cfg.down_day)}
    if not rows:
        out["equal_weight"] = out["capped"] = out["positive"] = None
        out["note"] = f"no answer of checkpoint {step} is valid on both windows: no book"
    else:
        pnl_t, pnl_h = np.stack(train_pnl), np.stack(hold_pnl)
        pick = capped_selection([r[C.TRAIN_CPCV] for r in rows], [r[C.TRAIN_TURNOVER] for r in rows], pnl_t,
                                cfg.min_turnover, cfg.max_corr)
        weights = np.array([r["count"] for r in rows])
        out["equal_weight"] = book_metrics(np.repeat(pnl_h, weights, axis=0), market, cfg.down_day)
        out["capped"] = book_metrics(pnl_h[pick], market, cfg.down_day) if pick else None
        out["capped_members"] = [rows[i]["canonical"] for i in pick]
        paid = [i for i, r in enumerate(rows) if r[C.TRAIN_CPCV] > 0]
        out["positive"] = (book_metrics(np.repeat(pnl_h[paid], weights[paid], axis=0), market, cfg.down_day)
                           if paid else None)
        daily["equal_weight"] = np.average(pnl_h, axis=0, weights=weights)
        daily["capped"] = pnl_h[pick].mean(axis=0) if pick else np.nan
        daily["positive"] = np.average(pnl_h[paid], axis=0, weights=weights[paid]) if paid else np.nan
    pool = _written(deps["checkpoints"])
    names = sorted(pool)
    cands = [(float(pool[f][C.TRAIN_CPCV]), float(pool[f][C.TRAIN_TURNOVER])) for f in names]

    def train_pnl(i: int) -> np.ndarray | None:
        card = train_v.score_one(names[i])
        return card.pnl if card.valid else None

    chosen = capped_stream(cands, train_pnl, cfg.archive_size, cfg.min_turnover, cfg.max_corr)
    held = [c.pnl for c in (holdout_v.score_one(names[i]) for i in chosen) if c.valid]
    out["archive"] = book_metrics(np.stack(held), market, cfg.down_day) if held else None
    out["archive_members"] = [names[i] for i in chosen]
    out["archive_pool"] = len(pool)
    daily["archive"] = np.mean(held, axis=0) if held else np.nan
    if len(daily) != len(market):
        raise DataError("holdout_rows", f"holdout dates ({len(daily)}) and P&L rows ({len(market)}) disagree",
                        file=str(deps["holdout"]))
    write_parquet(daily, outs["daily"])
    outs["books"].write_text(json.dumps(out, indent=1, default=float))
    for name in ("equal_weight", "capped", "positive", "archive"):
        if out.get(name):
            run.log_metrics({f"books/{name}/{k}": float(v) for k, v in out[name].items()})
    run.set_tag("rung", item)
    ew = out["equal_weight"] or {}
    return {"rung": item, "shipped_step": step, "answers": len(rows), C.HOLDOUT_RETURN: ew.get("return"),
            "beta": ew.get("beta")}


def _written(checkpoints: Path) -> dict[str, dict[str, float]]:
    """Every distinct valid formula the rung wrote, from its last checkpoint (empty for a rung without one, or
    one saved before the record existed)."""
    found = sorted(p for p in Path(checkpoints).iterdir() if p.is_dir() and CHECKPOINT.fullmatch(p.name))
    if not found or not (found[-1] / WRITTEN).is_file():
        return {}
    return dict(read_json(found[-1] / WRITTEN, what="formulas the rung wrote"))
