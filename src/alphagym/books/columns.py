"""The probe's tables, one name per column: the answer table (`answers.parquet`, one greedy answer a row) and the
checkpoint table (`checkpoints.parquet`, one checkpoint a row), written by the probe and read by the books,
the report and `propose`. Every column is named here and imported where it is read or written, so renaming
one is one edit. Train-window columns are what checkpoint selection may read (`probe.select` refuses any
holdout column); the holdout-year ones are filled after it. The columns the verifier's score card names
(`valid`, `compliance`, `compliance_<check>`: `briefs.compliance.CHECK_COLUMNS`) keep its names."""

from __future__ import annotations

STEP = "step"

# --- the answer table: a checkpoint's greedy answer to one holdout brief
TRAIN_CPCV = "train_cpcv"                   # the verifier's CPCV of the answer on the train window
TRAIN_TURNOVER = "train_turnover"
HOLDOUT_VALID = "holdout_valid"             # valid on the holdout year as well
HOLDOUT_SCORE = "holdout_score"             # the verifier's holdout score (clipped, turnover charged)
HOLDOUT_SHARPE = "holdout_sharpe"
HOLDOUT_RETURN = "holdout_return"
HOLDOUT_TURNOVER = "holdout_turnover"

# --- the checkpoint table: train window
FAMILIES = "families"                       # formula families among the valid answers
FAMILIES_POSITIVE = "families_positive"     # ... among those with positive train CPCV
COMPLIANCE_IDEA = "compliance_idea"         # valid answers whose signal follows their brief's mechanism
TRAIN_CAPPED_SHARPE = "train_capped_sharpe"  # the correlation-capped book's train Sharpe
TRAIN_EFFECTIVE_BETS = "train_effective_bets"
FORCED_LACKING = "forced_lacking"           # greedy answers whose brief requirement the decoder wrote
PASS_AT_K = "pass_at_k"
SAMPLED_FAMILIES = "sampled_families"

# --- the checkpoint table: holdout year
HOLDOUT_SCORE_LOW = "holdout_score_low"     # the 95% interval of HOLDOUT_SCORE over the briefs
HOLDOUT_SCORE_HIGH = "holdout_score_high"
HOLDOUT_SCORE_SAMPLED = "holdout_score_sampled"   # sampled answers' mean score, and its interval
HOLDOUT_SCORE_SAMPLED_LOW = "holdout_score_sampled_low"
HOLDOUT_SCORE_SAMPLED_HIGH = "holdout_score_sampled_high"
HOLDOUT_ANSWER_SD = "holdout_answer_sd"     # the spread one sampled answer a brief puts on the score
HOLDOUT_BOOK_RETURN = "holdout_book_return"  # the equal-weight book of the valid answers
HOLDOUT_BOOK_SHARPE = "holdout_book_sharpe"
HOLDOUT_BOOK_BETA = "holdout_book_beta"
HOLDOUT_MEAN_ABS_CORR = "holdout_mean_abs_corr"
HOLDOUT_EFFECTIVE_BETS = "holdout_effective_bets"
CAPPED_ANSWERS = "capped_answers"           # the correlation-capped book, chosen on train numbers
CAPPED_HOLDOUT_SHARPE = "capped_holdout_sharpe"
CAPPED_EFFECTIVE_BETS = "capped_effective_bets"
PLANTED_EDGES = "planted_edges"             # simulator only: the planted edges,
PLANTED_EDGES_EXPRESSED = "planted_edges_expressed"   # those the answers' holdout P&L express,
DECOY_TRAP_ANSWERS = "decoy_trap_answers"   # and the answers on a decoy or a trap
