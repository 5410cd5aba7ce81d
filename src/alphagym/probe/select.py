"""Checkpoint selection: which checkpoint of a rung ships, decided on train-window numbers only.

The probe computes every checkpoint's train-window table first, calls `select_checkpoint` on it, and only
then scores the holdout year; this function refuses a table that carries any holdout column, so a
selection rule that peeks is an error rather than a silent leak (tests/test_probe.py checks both).
"""

from __future__ import annotations

import pandas as pd

from alphagym.errors import ConfigError

# the train-window column each selector maximises (probe.selector names the one that ships; the probe
# reports every selector's pick):
SELECTORS = {
    # mean train-window CPCV of a checkpoint's greedy answers (invalid ones count at the verifier's invalid
    # score, so a checkpoint cannot win by abstaining)
    "train_cpcv": "train_cpcv",
    # train Sharpe of the correlation-capped book of its valid answers: values answers that are good
    # together, not only good one by one (`probe.train_book_table`)
    "capped_book": "train_capped_sharpe",
}
SELECTOR = "train_cpcv"


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
    best = ordered[SELECTORS[selector]].to_numpy().argmax()
    return int(ordered["step"].iloc[int(best)])
