"""R3, the stress channel: score a formula again in the world model's stress markets and charge the drop.

R3 = -min(1, scale * log(1 + mean over kept worlds of max(0, CPCV_base - CPCV_world))), with the same CPCV
and training costs as R1. Each world costs one more evaluation of the formula.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from alphagym.panel import Panel


def stress_channel(base_cpcv: float, world_cpcvs: list[float], scale: float) -> float:
    drops = [max(0.0, base_cpcv - w) for w in world_cpcvs]
    return -min(1.0, scale * float(np.log1p(np.mean(drops)))) + 0.0 if drops else 0.0


def load_kept_worlds(gates_path: Path, worlds_dir: Path) -> dict[str, Panel]:
    """The worlds the gate report kept (a missing report means no worlds)."""
    if not gates_path.is_file():
        return {}
    kept = json.loads(gates_path.read_text()).get("kept_channels", [])
    return {c: Panel.read_parquet(worlds_dir / f"{c}.parquet") for c in kept}
