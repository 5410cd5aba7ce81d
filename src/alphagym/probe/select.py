"""Checkpoint selection: which checkpoint of a rung ships, decided on train-window numbers only.

The probe computes every checkpoint's train-window table first, calls `select_checkpoint` on it, and only
then scores the holdout year; this function refuses a table that carries any holdout column, so a
selection rule that peeks is an error rather than a silent leak (tests/test_probe.py checks both).
"""

from __future__ import annotations

import pandas as pd

from alphagym.books.ship import SELECTORS, choose
from alphagym.errors import ConfigError

SELECTOR = "train_cpcv"       # a selector's name (`books.ship.SELECTORS`), not a column


def select_checkpoint(train_table: pd.DataFrame, selector: str = SELECTOR) -> int:
    """The step with the highest value of the selector's train column; a tie goes to the earlier step (less
    training, same evidence)."""
    if selector not in SELECTORS:
        raise ConfigError(f"probe.selector: no selector {selector!r}; selectors: {sorted(SELECTORS)}")
    leaked = [c for c in train_table.columns if "holdout" in str(c).lower()]
    if leaked:
        raise ConfigError(f"checkpoint selection received holdout columns {leaked}: it must see train-window "
                          "numbers only")
    if train_table.empty:
        raise ConfigError("checkpoint selection received no checkpoints")
    ordered = train_table.sort_values(["step"])
    return int(ordered["step"].iloc[choose(ordered, selector)])
