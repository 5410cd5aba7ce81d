"""The policy stages: `corpus` (verified brief -> formula pairs), `sft` (one per backend in `sft.policies`)
and `filter` (the training briefs worth RL: solved in some but not all tries)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from alphagym.artifacts import read_json, read_parquet, write_parquet
from alphagym.briefs.catalogue import CHECKS, Catalogue, load_catalogue
from alphagym.briefs.generate import families, read_briefs
from alphagym.briefs.idea import IdeaCheck
from alphagym.dsl.parser import Limits
from alphagym.panel import Panel
from alphagym.params import Params, SftEval
from alphagym.policy.corpus import build_corpus
from alphagym.policy.evaluate import (
    answer_stats,
    evaluate_policy,
    reading_of,
    scored_answers,
)
from alphagym.policy.grammar import rejected_share, steered_share
from alphagym.policy.model import Policy, build_policy, load_policy, set_decoding
from alphagym.policy.sft import self_distill, train_sft
from alphagym.tracking import StageRun
from alphagym.verifier.verifier import Verifier


def _verifier(params: Params, train_path: Path) -> Verifier:
    """The train-window verifier without stress worlds: SFT and filtering do not depend on the world model
    (R3 is the RL trainer's), so these stages do not wait for it."""
    return Verifier(Panel.read_parquet(train_path), params)


# what `sft` reads of the corpus
CORPUS_COLUMNS = ("brief", "answer", "formula")


def corpus(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun) -> dict[str, Any]:
    cat = load_catalogue()
    held = set(read_json(deps["briefs_summary"], keys=("holdout_families",), what="briefs summary")["holdout_families"])
    verifier = _verifier(params, deps["train"])
    limits = Limits.from_params(params.dsl.limits)
    df, counts = build_corpus(lambda f: verifier.score(f), cat, set(families(cat)) - held, params.sft.corpus,
                              params.briefs.horizon_tolerance, limits,
                              tuple(params.dsl.window_buckets), params.seed,
                              progress=lambda it: tqdm(it, desc="corpus", unit="formula", mininterval=2),
                              idea=IdeaCheck(verifier.panel, cat) if params.sft.corpus.mechanism_by != "form" else None)
    leak = sorted(set(df["family"]) & held)
    assert not leak, f"corpus pairs from held-out families {leak}"
    write_parquet(df, outs["corpus"])
    summary = {**counts, "distinct_canonical": int(df["canonical"].nunique()), "families": int(df["family"].nunique()),
               "cpcv_positive_share": float((df["cpcv"] > 0).mean()) if len(df) else 0.0}
    outs["summary"].write_text(json.dumps(summary, indent=1))
    run.log_metrics({k: float(v) for k, v in summary.items()})
    run.log_artifact(outs["summary"])
    return summary


def _evaluate_on_holdout(policy: Policy, holdout: list[dict[str, Any]], verifier: Verifier, cat: Catalogue,
                         tol: float, ev: SftEval, seed: int, params: Params, desc: str
                         ) -> tuple[dict[str, Any], dict[str, Any] | None, list[dict[str, Any]], list[dict[str, Any]]]:
    """The policy on the holdout briefs with the configured decoding, and (when that is constrained) without it:
    what the model itself writes, and what the constrained sampler makes of it. Returns (the decoding's stats
    with its decoder counts, the free decoding's stats or None, the decoding's answer rows, the free answer
    rows: the decoding's own when it is free); the policy is left with the configured decoding."""
    set_decoding(policy, params.policy.decoding, params.dsl.limits, params.briefs.horizon_tolerance,
                 params.policy.witness_variants)
    idea = IdeaCheck(verifier.panel, cat)        # mechanism fidelity on the train panel the verifier scores on
    stats, rows = evaluate_policy(policy, holdout, verifier, cat, tol, ev.samples, ev.temperature, seed, desc=desc,
                                  idea=idea)
    stats["decode_rejected_share"] = rejected_share(policy.decode_stats)
    stats["decode_steered_share"] = steered_share(policy.decode_stats)
    stats["decode_dead_ends"] = policy.decode_stats.get("dead_ends", 0)
    stats["decode_forced_late"] = policy.decode_stats.get("forced_late", 0)
    stats["decode_forced_lacking"] = policy.decode_stats.get("forced_lacking", 0)
    for check in CHECKS:
        stats[f"decode_forced_lacking_{check}"] = policy.decode_stats.get(f"forced_lacking_{check}", 0)
    policy.decode_stats.clear()
    free, free_rows = None, rows
    if params.policy.decoding != "free":
        set_decoding(policy, "free", params.dsl.limits, params.briefs.horizon_tolerance,
                 params.policy.witness_variants)
        free, free_rows = evaluate_policy(policy, holdout, verifier, cat, tol, ev.samples, ev.temperature, seed,
                                          desc=f"{desc} free", idea=idea)
        set_decoding(policy, params.policy.decoding, params.dsl.limits, params.briefs.horizon_tolerance,
                 params.policy.witness_variants)
    return stats, free, rows, free_rows



def sft(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun, item: str) -> dict[str, Any]:
    seed, cat = params.seed, load_catalogue()
    pcfg, scfg = params.policy, params.sft[item]
    torch.set_num_threads(pcfg.threads)
    pairs = read_parquet(deps["corpus"], columns=CORPUS_COLUMNS, what="SFT corpus")
    corpus_pairs = len(pairs)
    if scfg.max_formula_chars:
        pairs = pairs[pairs["formula"].str.len() <= scfg.max_formula_chars].reset_index(drop=True)
    if scfg.max_pairs:
        pairs = pairs.sample(n=min(len(pairs), scfg.max_pairs), random_state=seed)
    holdout = read_briefs(deps["briefs_holdout"], cat)
    policy = build_policy(item, pcfg, [*pairs["brief"], *pairs["answer"]], seed)
    # answers longer than the cap would be cut mid-formula: train only on what the policy may write
    fits = [len(policy.tokenizer(a, add_special_tokens=False)["input_ids"]) < policy.max_new_tokens
            for a in pairs["answer"]]
    pairs = pairs[np.array(fits, bool)].reset_index(drop=True)
    verifier = _verifier(params, deps["train"])
    tol, ev = params.briefs.horizon_tolerance, params.sft.eval
    n_params = sum(p.numel() for p in policy.model.parameters())
    n_train = sum(p.numel() for p in policy.model.parameters() if p.requires_grad)
    report: dict[str, Any] = {"backend": item, "corpus_pairs": corpus_pairs, "pairs": len(pairs),
                              "parameters": n_params, "trainable_parameters": n_train, "holdout_briefs": len(holdout)}
    grammar = params.policy.decoding != "free"

    limits = Limits.from_params(params.dsl.limits)

    def evaluate(key: str, seed: int) -> list:
        stats, free, rows, free_rows = _evaluate_on_holdout(policy, holdout, verifier, cat, tol, ev, seed, params,
                                                            desc=f"{item} {key}")
        report[key] = stats
        if free is not None:
            report[f"{key}_free"] = free
        # does the model read its brief: its own answers against its brief, a swapped one and random formulas
        report[f"{key}_reading"] = reading_of(free_rows, holdout, cat, tol, limits, list(pairs["formula"]),
                                              ev.samples, seed)
        return rows

    if item != "tiny":       # a pretrained model before SFT: the zero-shot baseline
        evaluate("before", seed)
    curve = train_sft(policy, list(pairs["brief"]), list(pairs["answer"]), scfg, seed,
                      log=lambda m, s: run.log_metrics({f"sft/{k}": v for k, v in m.items()}, step=s),
                      progress=lambda it: tqdm(it, desc=f"sft {item}", unit="step", mininterval=2))
    set_decoding(policy, params.policy.decoding, params.dsl.limits, params.briefs.horizon_tolerance,
                 params.policy.witness_variants)
    part, report["self_distill"] = self_distill(
        policy, pairs, read_briefs(deps["briefs_train"], cat), verifier, cat, tol, scfg,
        params.sft.eval.temperature, seed, first_step=len(curve), desc=f"{item} self-distill",
        log=lambda m, s: run.log_metrics({f"sft/{k}": v for k, v in m.items()}, step=s))
    curve += part
    for r in report["self_distill"]:
        run.log_metrics({f"self_distill/{k}": v for k, v in r.items()})
    rows = evaluate("after", seed + 1)
    report["final_loss"] = curve[-1]["loss"]
    report["final_eval_loss"] = next((r["eval_loss"] for r in reversed(curve) if "eval_loss" in r), None)
    report["sft_seconds"] = float(sum(r["step_time"] for r in curve))
    policy.save(outs["policy"])                 # an `hf` policy writes its base folder into the save
    write_parquet(pd.DataFrame(rows), outs["answers"])
    outs["report"].write_text(json.dumps(report, indent=1, default=float))
    from alphagym.policy.plots import sft_figure

    sft_figure(curve, report, outs["curve"])
    run.log_metrics({f"holdout/{k}": v for k, v in report["after"].items()})
    if grammar:
        run.log_metrics({f"holdout_free/{k}": v for k, v in report["after_free"].items()})
    run.log_metrics({f"reading/{k}": v for k, v in report["after_reading"].items()})
    run.log_artifact(outs["report"])
    run.log_artifact(outs["curve"])
    return {"pairs": len(pairs), **{f"after_{k}": v for k, v in report["after"].items()}}


def select_briefs(table: pd.DataFrame, samples: int, min_kept: int) -> tuple[pd.Series, str]:
    """Which briefs to keep (a boolean mask over `table`'s rows: columns `solved`, `best_cpcv`) and why:
    those solved in some but not all of `samples` tries; when fewer than `min_kept` are, the `min_kept`
    whose best valid answer's CPCV is closest to 0 (briefs without a valid answer last)."""
    partial = (table["solved"] > 0) & (table["solved"] < samples)
    if partial.sum() >= min_kept:
        return partial, "solved in some but not all tries"
    dist = table["best_cpcv"].abs().fillna(np.inf)
    keep = dist.sort_values(kind="stable").index[:min_kept]
    return table.index.isin(keep), f"fewer than {min_kept} solved sometimes: the {min_kept} closest to break-even"


def filter_briefs(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun) -> dict[str, Any]:
    """Sample `filter.samples` answers per training brief; a brief is solved by a valid answer with train
    CPCV > 0. Keep the briefs solved sometimes but not always; when fewer than `filter.min_kept` qualify,
    keep that many closest to break-even (best answer's CPCV nearest 0)."""
    cfg, cat, seed = params.filter, load_catalogue(), params.seed
    torch.set_num_threads(params.policy.threads)
    briefs = read_briefs(deps["briefs_train"], cat)
    policy = set_decoding(load_policy(deps["policy"], params.policy.hf.nf4), params.policy.decoding,
                          params.dsl.limits, params.briefs.horizon_tolerance, params.policy.witness_variants)
    verifier = _verifier(params, deps["train"])
    tol = params.briefs.horizon_tolerance
    groups = scored_answers(policy, briefs, verifier, cat, tol, cfg.samples, cfg.temperature, seed,
                            desc="filter: sample")
    rows = []
    for b, cards in zip(briefs, groups):
        solved = [c.valid and c.channels["cpcv"] > 0 for c in cards]
        best = max((c.channels["cpcv"] for c in cards if c.valid), default=float("nan"))
        rows.append({"id": b["id"], "solved": int(sum(solved)), "best_cpcv": best,
                     "valid": int(sum(c.valid for c in cards)),
                     "compliant": int(sum(c.metrics.get("compliant", 0.0) for c in cards))})
    table = pd.DataFrame(rows)
    n = cfg.samples
    partial, rule = select_briefs(table, n, cfg.min_kept)
    kept = [b for b, k in zip(briefs, partial) if k]
    from alphagym.briefs.generate import write_briefs

    write_briefs(outs["kept"], kept)
    write_parquet(table, outs["table"])
    hist = {int(k): int(v) for k, v in table["solved"].value_counts().sort_index().items()}
    report = {"briefs": len(briefs), "kept": len(kept), "rule": rule, "solve_histogram": hist,
              "samples": n, **answer_stats(groups)}
    outs["report"].write_text(json.dumps(report, indent=1))
    from alphagym.policy.plots import solve_rate_figure

    solve_rate_figure(table, n, len(kept), outs["plot"])
    run.log_metrics({"kept": len(kept), "valid_share": report["valid_share"],
                     "compliant_share": report["compliant_share"]})
    run.log_artifact(outs["report"])
    run.log_artifact(outs["plot"])
    return {k: report[k] for k in ("briefs", "kept", "rule", "solve_histogram")}
