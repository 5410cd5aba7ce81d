"""R3, the stress channel: score a formula again in the world model's stress markets and charge the drop.

R3 = -min(1, scale * log(1 + mean over kept worlds of max(0, CPCV_base - CPCV_world))), with the same CPCV
and training costs as R1. Each world costs one more evaluation of the formula.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from alphagym.data.panel import Panel
from alphagym.dsl.evaluate import Evaluator, is_rank_root
from alphagym.engine.book import forward_open_returns, gross_pnl, turnover, weights_from_signal
from alphagym.engine.costs import train_cost
from alphagym.verifier.cpcv import cpcv_statistic, make_slices, masked_sharpes


class BookScorer:
    """CPCV and Sharpe of a formula's net P&L on one panel (train costs)."""

    def __init__(self, panel: Panel, params: dict[str, Any]) -> None:
        v = params["verifier"]
        self.ev = Evaluator(panel)
        self.fwd = forward_open_returns(panel["open"])
        self.min_valid = int(v["book"]["min_valid_stocks"])
        self.costs = v["costs"]["train"]
        c = v["cpcv"]
        self.slices = make_slices(panel.shape[0] - 2, c["blocks"], c["test_blocks"], c["purge"], c["embargo"])
        self.std_penalty = float(c["std_penalty"])

    def net(self, ast: Any) -> np.ndarray:
        w = weights_from_signal(self.ev.evaluate(ast), self.min_valid, is_rank_root(ast))
        return gross_pnl(w, self.fwd) - train_cost(turnover(w)[:-2], self.costs)

    def cpcv(self, ast: Any) -> float:
        return cpcv_statistic(masked_sharpes(self.net(ast), self.slices.test), self.std_penalty)


def stress_channel(base_cpcv: float, world_cpcvs: list[float], scale: float) -> float:
    drops = [max(0.0, base_cpcv - w) for w in world_cpcvs]
    return -min(1.0, scale * float(np.log1p(np.mean(drops)))) + 0.0 if drops else 0.0


def load_kept_worlds(gates_path: Path, worlds_dir: Path) -> dict[str, Panel]:
    """The worlds the gate report kept (a missing report means no worlds)."""
    if not gates_path.is_file():
        return {}
    kept = json.loads(gates_path.read_text()).get("kept_channels", [])
    return {c: Panel.read_parquet(worlds_dir / f"{c}.parquet") for c in kept}
