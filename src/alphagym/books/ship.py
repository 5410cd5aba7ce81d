"""What ships: the rules that pick a checkpoint from train-window columns, within a rung (the probe,
`probe.select`) and across rungs (the report), so both apply the same rule. They see train numbers only;
`probe.select.select_checkpoint` refuses a table with a holdout column."""

from __future__ import annotations

import numpy as np
import pandas as pd

from alphagym.books import columns as C

# the train-window column each selector maximises (probe.selector names the one that ships; the probe
# reports every selector's pick):
SELECTORS = {
    # mean train-window CPCV of a checkpoint's greedy answers (invalid ones count at the verifier's invalid
    # score, so a checkpoint cannot win by abstaining)
    "train_cpcv": C.TRAIN_CPCV,
    # train Sharpe of the correlation-capped book of its valid answers: values answers that are good
    # together, not only good one by one (`probe.train_book_table`)
    "capped_book": C.TRAIN_CAPPED_SHARPE,
    # the capped book's train Sharpe, but never a collapse over a diverse book that does about as well: the
    # checkpoint with the highest `train_capped_sharpe` ships unless it has fewer than BETS_FLOOR train
    # effective bets and another within NEAR of its Sharpe has at least that many; then the best of those
    # ships (`book_with_bets`). A quant ships a book, and a one-formula collapse is one bet however well it
    # backtests
    "capped_book_bets": C.TRAIN_CAPPED_SHARPE,
}
BETS_FLOOR = 2.0
NEAR = 0.10


def choose(rows: pd.DataFrame, selector: str) -> int:
    """The position in `rows` (checkpoints of one rung, or the rungs' shipped checkpoints) that `selector`
    picks from its train-window columns; a tie goes to the earlier row."""
    col = rows[SELECTORS[selector]].to_numpy(dtype=float)
    best = int(col.argmax())
    if selector != "capped_book_bets":
        return best
    return book_with_bets(col, rows[C.TRAIN_EFFECTIVE_BETS].to_numpy(dtype=float))


def book_with_bets(sharpe: np.ndarray, bets: np.ndarray, floor: float = BETS_FLOOR, near: float = NEAR) -> int:
    """The highest `sharpe`, unless that row has fewer than `floor` `bets` and a row within `near` of its
    Sharpe (at least best - near * |best|) has `floor` or more: then the highest Sharpe among those. A tie goes
    to the earlier row."""
    best = int(sharpe.argmax())
    if bets[best] >= floor:
        return best
    close = sharpe >= sharpe[best] - near * abs(sharpe[best])
    diverse = np.flatnonzero(close & (bets >= floor))
    return best if not len(diverse) else int(diverse[sharpe[diverse].argmax()])
