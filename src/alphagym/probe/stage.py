"""The `probe` stage: one per rung (`alphagym probe --rung NAME`), the first stage that reads the holdout.

Every checkpoint of the rung, and step 0 (the SFT policy), answers the holdout briefs greedily. The answers
are scored on the train window, the shipped checkpoint is selected from those numbers alone
(`alphagym.probe.select`), and only then is every answer scored on the holdout year.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from alphagym.artifacts import read_json, write_parquet
from alphagym.books import columns as C
from alphagym.briefs.catalogue import CHECKS, load_catalogue
from alphagym.briefs.generate import read_briefs
from alphagym.briefs.idea import IdeaCheck
from alphagym.briefs.reading import reading
from alphagym.dsl.parser import Limits
from alphagym.panel import Panel
from alphagym.params import Params
from alphagym.policy.model import Policy
from alphagym.probe.probe import (
    answer_rows,
    holdout_phase,
    holdout_table,
    pass_at_k,
    sampled_cards,
    sampled_families,
    sampled_holdout,
    sampled_rows,
    train_book_table,
    train_table,
)
from alphagym.probe.select import SELECTORS, select_checkpoint
from alphagym.rl.checkpoints import at_checkpoint, list_checkpoints, set_threads, sft_base
from alphagym.rungs import resolve_rung
from alphagym.tracking import StageRun
from alphagym.verifier.verifier import Verifier


def probe(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun, item: str) -> dict[str, Any]:
    resolved = resolve_rung(params, item)
    rung_name, recipe = resolved.name, resolved.recipe
    set_threads(recipe)
    run.log_rung(resolved)
    run.nest_under(f"train@{item}")
    cat, tol, seed = load_catalogue(), params.briefs.horizon_tolerance, params.seed
    briefs = read_briefs(deps["briefs_holdout"], cat)
    checkpoints = [(0, None), *list_checkpoints(deps["checkpoints"])]
    base = sft_base(deps["policy"], params.policy, params.dsl.limits, params.briefs.horizon_tolerance,
                    recipe.decoding)
    base.max_new_tokens, base.micro_batch = recipe.max_new_tokens, recipe.micro_batch

    # phase 1: greedy answers, scored on the train window only
    train_panel = Panel.read_parquet(deps["train"])
    train_v = Verifier(train_panel, params)
    idea = IdeaCheck(train_panel, cat)              # mechanism fidelity, on the train window
    rows: list[dict[str, Any]] = []
    train_pnls: list[Any] = []
    k, temp = params.probe.pass_k, params.probe.temperature
    passes: dict[int, float] = {}
    spread: dict[int, int] = {}
    lacking: dict[int, dict[str, float]] = {}
    samples: list[dict[str, Any]] = []
    reading: dict[int, dict[str, float]] = {}
    for step, folder in tqdm(checkpoints, desc=f"probe {item}", unit="ckpt"):
        policy = at_checkpoint(base, folder)
        policy.decode_stats.clear()
        answers = [a[0] for a in policy.generate(briefs, n=1, temperature=0.0, seed=seed)]
        # greedy answers whose brief requirement the decoder's forced completion wrote (0 under the grammar)
        lacking[step] = {name: policy.decode_stats.get(name, 0) / len(briefs) for name in LACKING_COLUMNS}
        new_rows, new_pnls = answer_rows(step, briefs, answers, train_v, cat, tol, idea)
        rows += new_rows
        train_pnls += new_pnls
        if params.probe.reading_samples:
            reading[step] = _reading(policy, briefs, params, seed + 100_000 + step)
        if k:
            sampled = policy.generate(briefs, n=k, temperature=temp, seed=seed + 1 + step)
            cards = sampled_cards(sampled, train_v)
            passes[step], spread[step] = pass_at_k(cards), sampled_families(cards)
            samples += sampled_rows(step, briefs, sampled, cards)
    answers = pd.DataFrame(rows)
    train = train_table(answers, train_pnls, cat.idea_tau)
    for col in LACKING_COLUMNS:
        train[col] = train["step"].map({s: v[col] for s, v in lacking.items()})
    for col in READING_COLUMNS if reading else ():
        train[f"reading_{col}"] = train["step"].map({s: r[col] for s, r in reading.items()})
    if k:
        train[C.PASS_AT_K] = train["step"].map(passes)
        train[C.SAMPLED_FAMILIES] = train["step"].map(spread)
    caps = params.books
    train = train.merge(train_book_table(answers, train_pnls, caps.min_turnover, caps.max_corr),
                        on="step")
    selector = params.probe.selector
    picks = {name: select_checkpoint(train, name) for name in SELECTORS}
    shipped = picks[selector]

    # phase 2: the holdout year, once, after the selection
    holdout_v = Verifier(Panel.read_parquet(deps["holdout"]), params, window="holdout")
    answers, books, holdout_pnls = holdout_phase(answers, holdout_v)
    market = holdout_v.market[holdout_v.rows]
    table = train.merge(holdout_table(answers, books, market, holdout_pnls, train_pnls,
                                      caps.min_turnover, caps.max_corr,
                                      _planted(deps["truth"], holdout_v)), on="step")
    if samples:              # several sampled answers a brief, scored by their mean, beside the greedy one
        table = table.merge(sampled_holdout(samples, holdout_v), on="step", how="left")
    table["shipped"] = table["step"] == shipped

    write_parquet(answers, outs["answers"])
    write_parquet(table, outs["table"])
    for r in table.to_dict("records"):
        run.log_metrics({f"probe/{k}": float(v) for k, v in r.items() if k not in ("step", "shipped")},
                        step=int(r["step"]))
    ship = table.loc[table["shipped"]].iloc[0]
    step0 = table.loc[table["step"] == 0].iloc[0]
    # the shipped checkpoint's row once more without a step, so that the MLflow UI's run comparison (which
    # shows a metric's last step) compares the rungs on what they ship: holdout score, families, bets, coverage
    run.log_metrics({f"shipped/{k}": float(v) for k, v in ship.items()
                     if k not in ("shipped",) and isinstance(v, int | float | np.number) and np.isfinite(v)})
    summary = {"rung": rung_name, "item": item, "parent": resolved.parent, "change": resolved.change,
               "checkpoints": [int(s) for s in table["step"]], "shipped_step": shipped,
               "selector": selector, "shipped": _plain(ship), "step0": _plain(step0),
               "picks": {name: _plain(table.loc[table["step"] == step].iloc[0]) for name, step in picks.items()},
               "holdout_briefs": len(briefs)}
    outs["summary"].write_text(json.dumps(summary, indent=1))
    run.log_artifact(outs["summary"])
    return {"rung": item, "shipped_step": shipped, "shipped_train_cpcv": summary["shipped"][C.TRAIN_CPCV],
            "shipped_holdout_score": summary["shipped"][C.HOLDOUT_SCORE]}


# the greedy answers whose brief requirement the decoder wrote, and of those, the ones lacking each check's
LACKING_COLUMNS = (C.FORCED_LACKING, *(f"forced_lacking_{k}" for k in CHECKS))
# the reading measure's columns in the checkpoint table, each as `reading_<name>`
READING_COLUMNS = ("parse", "own_checks", "own_all", *(f"{p}_{k}" for p in ("own", "gap") for k in CHECKS))


def _reading(policy: Policy, briefs: list[dict[str, Any]], params: Params, seed: int) -> dict[str, float]:
    """`briefs.reading` of `probe.reading_samples` answers a brief sampled without the decoder (the policy's own
    writing at `probe.temperature`); the policy's decoding is given back after."""
    held = policy.grammar, policy.contracts
    policy.grammar = policy.contracts = None
    try:
        answers = policy.generate(briefs, n=params.probe.reading_samples,
                                  temperature=params.probe.temperature, seed=seed)
    finally:
        policy.grammar, policy.contracts = held
    return reading(briefs, answers, load_catalogue(), params.briefs.horizon_tolerance,
                   Limits.from_params(params.dsl.limits))


def _plain(row: pd.Series) -> dict[str, Any]:
    """A table row as JSON values (NaN -> null)."""
    return {k: (None if pd.isna(v) else (v.item() if hasattr(v, "item") else v)) for k, v in row.items()}


def _planted(truth: Path, holdout: Verifier) -> dict[str, tuple[str, Any]] | None:
    """The simulator's effects, decoys and traps with their planted formulas' holdout P&L (None on real data,
    whose ground truth lists no effects: the coverage columns are then absent)."""
    effects = read_json(truth, what="ground truth").get("effects")
    if not effects:
        return None
    out = {}
    for name, e in effects.items():
        card = holdout.score_one(e["formula"])
        if card.valid:
            out[name] = (e.get("kind", "edge"), card.pnl)
    return out
