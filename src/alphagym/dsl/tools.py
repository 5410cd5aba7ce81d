"""The `eval` and `alpha101` tools: inspect one formula, or the paper's 101 (the CLI prints the results).

The panel comes as a path: the default (the `panel` stage's train output) is named by the stage table,
which sits above the formula language, so the CLI resolves it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from alphagym.dsl.alpha101 import alpha101, describe
from alphagym.dsl.canonical import canonical, fields_used, node_count, operators_used
from alphagym.dsl.evaluate import Evaluator
from alphagym.dsl.parser import Limits, lookback, parse
from alphagym.panel import DSL_FIELDS, Panel
from alphagym.params import Params


def summarize(values: np.ndarray) -> dict[str, float]:
    ok = np.isfinite(values)
    v = values[ok]
    rows_with = np.isfinite(values).sum(axis=1) >= 2
    out = {"coverage": float(ok.mean()), "days_with_two_or_more_values": int(rows_with.sum())}
    if v.size:
        q = np.quantile(v, [0.01, 0.25, 0.5, 0.75, 0.99])
        out.update(mean=float(v.mean()), std=float(v.std()), min=float(v.min()), max=float(v.max()),
                   p01=float(q[0]), p25=float(q[1]), median=float(q[2]), p75=float(q[3]), p99=float(q[4]),
                   distinct_values=int(min(np.unique(v).size, 10**6)))
    return out


def run_eval(params: Params, formula: str, panel_path: str | Path, out: str | None) -> dict[str, Any]:
    limits = Limits.from_params(params.dsl.limits)
    ast = parse(formula, limits)
    report: dict[str, Any] = {
        "formula": formula, "canonical": canonical(ast, params.dsl.window_buckets),
        "nodes": node_count(ast), "lookback": lookback(ast), "fields": fields_used(ast),
        "operators": operators_used(ast)}
    panel = Panel.read_parquet(panel_path)
    ev = Evaluator(panel)
    values = ev.evaluate(ast)
    report["panel"] = {"path": str(panel_path), "days": panel.shape[0],
                       "stocks": panel.shape[1], "first": str(panel.dates[0].date()),
                       "last": str(panel.dates[-1].date())}
    report["values"] = summarize(values)
    report["notes"] = ev.notes
    if out:
        frame = pd.DataFrame({"date": np.repeat(panel.dates.values, panel.shape[1]),
                              "ticker": np.tile(np.asarray(panel.tickers, dtype=object), panel.shape[0]),
                              "value": values.ravel()})
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(out, index=False)
        report["out"] = out
    return report


def run_alpha101(params: Params, panel_path: str | Path) -> list[dict[str, Any]]:
    """The paper's alphas described, with their coverage on the panel at `panel_path` when it exists."""
    limits = Limits.from_params(params.dsl.limits)
    panel = None
    path = Path(panel_path)
    if path.is_file():
        panel = Panel.read_parquet(path)
    fields = frozenset(DSL_FIELDS) | (frozenset({"cap"}) if panel is not None and "cap" in panel.fields else
                                      frozenset())
    rows = []
    ev = Evaluator(panel) if panel is not None else None
    for a in alpha101(limits, fields):
        d = describe(a)
        if a.canonical:
            d["canonical"] = canonical(a.ast, params.dsl.window_buckets)
        if ev is not None and a.usable:
            d["coverage"] = round(float(np.isfinite(ev.evaluate(a.ast)).mean()), 4)
        rows.append(d)
    return rows
