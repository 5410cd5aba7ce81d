"""The `report` stage (`alphagym report`): the ladder's report from every rung's training log, probe and
books. A rung whose inputs are missing (it failed, or has not run) is marked in every table, never dropped;
run `alphagym report` by hand after a `snakemake --keep-going` in which a rung failed.

Writes `report.md` with its figures, `report.json` (everything the tables and figures show, and more),
`pairs.parquet` (verified brief -> formula pairs of all rungs) and the shipped adapter with a model card.
"""

from __future__ import annotations

import json
import math
import shutil
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from alphagym.artifacts import read_json, write_manifest, write_parquet
from alphagym.books import columns as C
from alphagym.briefs.catalogue import CHECKS
from alphagym.briefs.generate import read_briefs
from alphagym.errors import DataError
from alphagym.params import Params, Rl
from alphagym.report import plots
from alphagym.report.build import (
    BET_TABLE_COLUMNS,
    BOOK_KEYS,
    CHECK_COLUMNS,
    CONVERGENCE_COLUMNS,
    READING_COLUMNS,
    ROLES,
    SFT_READING_COLUMNS,
    RungResult,
    bet_rows,
    check_rows,
    convergence_rows,
    decoder_check_rows,
    decoder_rows,
    lacking_rows,
    ladder_rows,
    load_rung,
    mark_noise,
    paired_rows,
    pairs,
    reading_rows,
    seed_spread,
    selector_rows,
    sft_reading_rows,
    shipped_rung,
    spread_cells,
    variance_rows,
)
from alphagym.rungs import recipe_of, resolve_rung, split_replica
from alphagym.tracking import StageRun
from alphagym.verifier import channels as ch

LADDER_COLS = ("rung", "parent", "status", "steps", "shipped_step", C.TRAIN_CPCV, C.HOLDOUT_SCORE,
               "step0_holdout", "vs_parent", "beyond_noise", "valid", "book_return", "book_sharpe", "book_beta",
               C.FAMILIES, C.FAMILIES_POSITIVE, C.HOLDOUT_EFFECTIVE_BETS, "compliance", C.PLANTED_EDGES_EXPRESSED,
               C.DECOY_TRAP_ANSWERS)
SEED_COLS = ("rung", "seeds", "mean", "sd", "min", "max", "families_mean", "families_sd",
             "holdout_effective_bets_mean", "holdout_effective_bets_sd", "planted_edges_expressed_mean",
             "planted_edges_expressed_sd", "compliance_mean", "compliance_sd")
CONTRACT_SEED_COLS = (C.HOLDOUT_SCORE, C.FAMILIES, C.HOLDOUT_EFFECTIVE_BETS, "archive_effective_bets",
                      C.PLANTED_EDGES_EXPRESSED, "compliance", C.COMPLIANCE_IDEA, C.FORCED_LACKING,
                      "positive_book_sharpe", "positive_book_beta")
# the shipped checkpoint's books as a quant reads them: holdout Sharpe, beta and bets of each
BOOK_SEED_COLS = (C.HOLDOUT_MEAN_ABS_CORR, C.HOLDOUT_EFFECTIVE_BETS, "capped_book_sharpe", "capped_book_beta",
                  C.CAPPED_EFFECTIVE_BETS, "archive_book_sharpe", "archive_book_beta", "archive_effective_bets")
# planted-edge coverage exists on the simulator only: on real data these columns are left out, not shown empty
COVERAGE_COLUMNS = (C.PLANTED_EDGES_EXPRESSED, "planted_edges_expressed_mean", "planted_edges_expressed_sd",
                    C.DECOY_TRAP_ANSWERS)


def present(rows: Sequence[Mapping[str, Any]], cols: Sequence[str]) -> tuple[str, ...]:
    """`cols` without the coverage columns that no row has a value for (None and NaN count as none)."""
    def has(r: Mapping[str, Any], c: str) -> bool:
        v = r.get(c)
        return v is not None and not (isinstance(v, float) and math.isnan(v))
    return tuple(c for c in cols if c not in COVERAGE_COLUMNS or any(has(r, c) for r in rows))


COUNT_COLUMNS = ("valid", C.FAMILIES, C.FAMILIES_POSITIVE, C.SAMPLED_FAMILIES, C.CAPPED_ANSWERS,
                 C.PLANTED_EDGES_EXPRESSED, C.DECOY_TRAP_ANSWERS, "archive_answers")
CKPT_COLS = ("step", "shipped", C.TRAIN_CPCV, "valid", C.FAMILIES, C.FAMILIES_POSITIVE, "compliance",
             "compliant_share", C.COMPLIANCE_IDEA, C.PASS_AT_K, C.SAMPLED_FAMILIES,
             C.HOLDOUT_SCORE, C.HOLDOUT_VALID, C.HOLDOUT_BOOK_RETURN, C.HOLDOUT_BOOK_SHARPE, C.HOLDOUT_BOOK_BETA,
             C.HOLDOUT_MEAN_ABS_CORR, C.HOLDOUT_EFFECTIVE_BETS, C.CAPPED_ANSWERS, C.CAPPED_HOLDOUT_SHARPE,
             C.CAPPED_EFFECTIVE_BETS, C.PLANTED_EDGES_EXPRESSED, C.PLANTED_EDGES, C.DECOY_TRAP_ANSWERS)


def report(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun) -> dict[str, Any]:
    rl = Rl.model_validate(params.rl)
    items = list(dict.fromkeys(k.split("@", 1)[1] for k in deps if "@" in k))
    results = [load_rung(i, {role: deps[f"{role}@{i}"] for role in ROLES}, rl) for i in items]
    if not any(r.ok for r in results):
        raise DataError("no_rungs", "no rung has finished its train, probe and books stages: nothing to report "
                        f"(missing: {results[0].missing if results else 'no rungs declared'})")
    rows = ladder_rows(results)
    spread = seed_spread(rows)
    floor = mark_noise(rows, spread)
    ship = shipped_rung(results, params.probe.selector)
    assert ship is not None
    briefs = {b["id"]: b["text"] for b in read_briefs(deps["briefs_holdout"])}
    fig = outs["figures"]
    ok = [r for r in results if r.ok]
    plots.training_curves({r.item: r.log for r in ok}, fig / "training_curves.png")
    plots.selector_vs_holdout({r.item: r.table for r in ok}, fig / "selector_vs_holdout.png")
    plots.answer_scores({r.item: r.answers for r in ok}, fig / "answer_scores.png")
    ew = ship.books.get("equal_weight") or {}
    plots.growth(ship.daily, f"{ship.item} @ step {ship.probe['shipped_step']}: growth of $1 on the holdout year",
                 fig / "growth.png")
    plots.book_vs_market(ship.daily, float(ew.get("beta", 0.0)), f"{ship.item}: daily book vs market",
                         fig / "book_vs_market.png")
    write_parquet(pairs(results, briefs), outs["pairs"])
    _ship_adapter(ship, rl, outs["adapter"])
    best_holdout = max(ok, key=lambda r: _f(r.probe["shipped"][C.HOLDOUT_SCORE]))
    targets = _targets(ship, best_holdout)
    sft_read = sft_reading_rows(read_json(deps["sft_report"], what="SFT report"), params.rl.policy)
    # the bootstraps run once: the markdown, the JSON export and the MLflow parent runs read the same rows
    paired, split = paired_rows(results), variance_rows(results)
    outs["report"].write_text(_markdown(params, results, rows, spread, floor, ship, best_holdout, targets,
                                        sft_read, paired, split))
    outs["json"].write_text(json.dumps(_clean(_export(params, deps, results, rows, spread, ship, paired, split)),
                                       indent=1,
                                       default=_json_default, allow_nan=False))
    summary = {"rungs": len(results), "failed": [r.item for r in results if not r.ok], "shipped_rung": ship.item,
               "shipped_step": ship.probe["shipped_step"],
               "shipped_holdout_score": ship.probe["shipped"][C.HOLDOUT_SCORE],
               "shipped_step0_holdout_score": ship.probe["step0"][C.HOLDOUT_SCORE],
               "shipped_book_beta": ew.get("beta"), "noise_floor_sd": floor, "targets": targets}
    outs["summary"].write_text(json.dumps(summary, indent=1, default=_json_default))
    run.log_artifact(outs["report"])
    run.log_artifact(outs["summary"])
    for p in sorted(fig.glob("*.png")):
        run.log_artifact(p)
    run.log_rung_parents(_rung_parents(params, results, rows, spread, paired))
    return {k: summary[k] for k in ("rungs", "failed", "shipped_rung", "shipped_step", "shipped_holdout_score")}


# the headline numbers a rung's MLflow parent run carries (mean and sd over its replicas)
PARENT_COLUMNS = (C.FAMILIES, C.HOLDOUT_EFFECTIVE_BETS, C.CAPPED_EFFECTIVE_BETS, "archive_effective_bets",
                  C.PLANTED_EDGES_EXPRESSED, "compliance", C.COMPLIANCE_IDEA, "capped_book_sharpe",
                  "archive_book_sharpe", C.TRAIN_CPCV)


def _rung_parents(params: Params, results: list[RungResult], rows: list[dict[str, Any]],
                  spread: list[dict[str, Any]], paired_list: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each rung's MLflow parent run carries (`StageRun.log_rung_parents`): its resolved recipe, parent and
    change as params; the mean and sd over its replicas of the shipped holdout score and the headline columns,
    and its paired difference from its parent with the interval, as metrics; its replicas as children."""
    by_spread = {r["rung"]: r for r in spread}
    paired = {r["rung"]: r for r in paired_list}
    out = []
    for name in dict.fromkeys(r.rung for r in results):
        ok = [row for row in rows if row.get("status") == "ok" and split_replica(row["rung"])[0] == name]
        tracked = {k: v for k, v in resolve_rung(params, name).tracked()[0].items() if k != "rung.seed"}
        metrics: dict[str, Any] = {"replicas": float(len(ok))}
        sp = by_spread.get(name)
        if sp is not None:
            metrics.update(holdout_score_mean=sp["mean"], holdout_score_sd=sp["sd"])
            metrics.update({f"{c}_{m}": sp.get(f"{c}_{m}") for c in PARENT_COLUMNS for m in ("mean", "sd")})
        elif ok:
            metrics.update(holdout_score_mean=ok[0][C.HOLDOUT_SCORE],
                           **{f"{c}_mean": ok[0].get(c) for c in PARENT_COLUMNS})
        pr = paired.get(name)
        if pr is not None:
            metrics.update(vs_parent=pr["difference"], vs_parent_low=pr["low"], vs_parent_high=pr["high"],
                           vs_parent_beyond_noise=1.0 if pr["beyond_noise"] == "yes" else 0.0)
        out.append({"name": name, "params": tracked, "metrics": metrics,
                    "items": [r.item for r in results if r.rung == name]})
    return out


def _brief_answers(params: Params, results: list[RungResult]) -> dict[str, int]:
    """Item -> the answers a training step samples, for each rung that samples under brief decoding."""
    out = {}
    for r in results:
        recipe = recipe_of(params.rl, r.rung)
        if (recipe.decoding or params.policy.decoding) == "brief":
            out[r.item] = int(recipe.briefs_per_step) * int(recipe.answers_per_brief)
    return out


def _f(v: Any) -> float:
    return -math.inf if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def _clean(v: Any) -> Any:
    """NaN and infinities as null: the export is strict JSON."""
    if isinstance(v, dict):
        return {str(k): _clean(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_clean(x) for x in v]
    if hasattr(v, "item") and not isinstance(v, str | bytes):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def _json_default(v: Any) -> Any:
    if hasattr(v, "item"):
        return v.item()
    if hasattr(v, "isoformat"):
        return v.isoformat()
    return str(v)


def _targets(ship: RungResult, best: RungResult) -> dict[str, Any]:
    """The issue's targets on the shipped checkpoint of the rung with the best holdout score (read after the
    fact; the ladder ships the train-CPCV choice, reported beside it)."""
    s, z = best.probe["shipped"][C.HOLDOUT_SCORE], best.probe["step0"][C.HOLDOUT_SCORE]
    beta = (best.books.get("equal_weight") or {}).get("beta")
    return {"best_rung_by_holdout": best.item, C.HOLDOUT_SCORE: s, "step0_holdout_score": z,
            "above_step0": bool(s is not None and z is not None and s > z),
            "positive": bool(s is not None and s > 0), "book_beta": beta,
            "abs_beta_below_0.2": bool(beta is not None and abs(beta) < 0.2),
            "ladder_shipped_rung": ship.item}


def _ship_adapter(ship: RungResult, rl: Rl, folder: Path) -> None:
    step = int(ship.probe["shipped_step"])
    recipe = recipe_of(rl, ship.rung)
    card = [f"# alphagym: shipped adapter of rung `{ship.item}`", "",
            f"- Checkpoint: step {step} of rung `{ship.item}` ({ship.change}; parent `{ship.parent}`).",
            f"- Selected by `probe.selector` ({ship.probe.get('selector')}) on train-window numbers of its greedy "
            f"answers to the holdout briefs (mean train CPCV {ship.probe['shipped']['train_cpcv']:.3f}, capped book "
            f"train Sharpe {_f(ship.probe['shipped'].get('train_capped_sharpe')):.3f}); the holdout year was scored "
            f"afterwards "
            f"(holdout score {_f(ship.probe['shipped']['holdout_score']):.3f}).",
            f"- Recipe: loss {recipe.loss}, advantage {recipe.advantage}, adapter {recipe.adapter}, "
            f"REPO-R {'on' if recipe.repo.enabled else 'off'}, briefs {recipe.briefs}, {recipe.steps} steps.",
            "- Task: read a design brief, answer one formula in the 101-alphas vocabulary inside "
            "`<alpha>...</alpha>`; answers are parsed, never executed.", ""]
    folder.mkdir(parents=True, exist_ok=True)
    if step == 0:
        card += [f"`probe.selector` ({ship.probe.get('selector')}) picked step 0, the SFT policy itself: no RL "
                 "adapter ships; use the SFT policy (`results/sft/<policy>/policy`)."]
    else:
        src = ship.checkpoints / f"checkpoint-{step:06d}"
        shutil.copytree(src, folder, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("trainer_state.pt", "archive.npz", "recent_bets.npz",
                                                      "marginal_book.npz", "README.md"))
        card += ["## Loading", "", "A peft adapter (Hugging Face format) on the SFT policy (merged, when it has an "
                 "adapter itself). With the SFT policy folder at hand:", "", "```python",
                 "from alphagym.rl.checkpoints import sft_base, at_checkpoint",
                 "base = sft_base('results/sft/tiny/policy', params.policy, params.dsl.limits, "
                 "params.briefs.horizon_tolerance)",
                 "policy = at_checkpoint(base, Path(ADAPTER))",
                 "policy.generate([brief], n=1, temperature=0.0)   # a brief record: its fields and its text",
                 "```", "",
                 "or `peft.PeftModel.from_pretrained(base, ADAPTER)` on the same base (`base/` holds the tiny "
                 "base model)."]
    (folder / "README.md").write_text("\n".join(card) + "\n")
    if step:
        # the checkpoint's manifest lists the files left behind and peft's README.md: the shipped folder's
        # own manifest, written last, is the one `propose` and `at_checkpoint` verify
        write_manifest(folder)


def _markdown(params: Params, results: list[RungResult], rows: list[dict[str, Any]], spread: list[dict[str, Any]],
              floor: float | None, ship: RungResult, best: RungResult, targets: dict[str, Any],
              sft_read: list[dict[str, Any]], paired: list[dict[str, Any]], split: list[dict[str, Any]]) -> str:
    md = ["# alphagym ladder report", "",
          f"Policy `{params.rl.policy}`, seed {params.seed}, {len(results)} rung runs "
          f"({sum(not r.ok for r in results)} failed or not run). Every number below was computed by the "
          "`report` stage from the rungs' own outputs; holdout numbers come from the probe, after selection.", "",
          "## Ladder", "", "`vs_parent`: change of the shipped holdout score against the parent rung's shipped "
          "checkpoint (step 0 for a rung on the SFT policy).", "",
          plots.table_md(rows, present(rows, LADDER_COLS), {k: ".0f" for k in COUNT_COLUMNS}), ""]
    md += ["Each rung's change: the recipe keys it changes against its parent, computed from the recipes:", "",
           plots.table_md([{"rung": r.rung, "parent": r.parent, "change": r.change}
                           for r in {r.rung: r for r in results}.values()], ("rung", "parent", "change")), ""]
    if spread:
        contract = spread_cells(spread, CONTRACT_SEED_COLS)
        md += ["## Seeds", "", f"Shipped holdout score (mean, sd, min, max over the seeds) and the shipped "
               f"checkpoint's families, effective bets, planted edges expressed and compliance (mean and sd). "
               f"Noise floor: the largest seed sd of the holdout score, {floor:.3f}; a change vs parent beyond "
               "twice it is marked `beyond_noise`.", "",
               plots.table_md(spread, present(spread, SEED_COLS)), "",
               "### The brief contract's measures", "", "Mean ± sd over the seeds of the shipped checkpoint's "
               "holdout score, greedy families, effective bets of the equal-weight and archive books, planted "
               "edges expressed, brief compliance, `compliance_idea` (mechanism fidelity), `forced_lacking` (the "
               "share of answers whose requirement the brief decoder wrote), and the holdout Sharpe and beta of "
               "the book of its answers with positive train CPCV (`positive`, chosen on train numbers); "
               "docs/ladder.md defines each.", "",
               plots.table_md(contract, tuple(contract[0])), ""]
        if paired:
            md += ["### Each rung against its parent, paired", "", "Replica k of every rung shares its seeds (brief "
                   "order, adapter initialisation, sampling streams) and every rung answers the same holdout "
                   "briefs, so a rung is compared with its parent replica by replica and brief by brief: the mean "
                   "paired difference of the shipped holdout score and its 95% interval from a bootstrap over "
                   "replicas and briefs (a rung on the SFT policy against its replicas' step 0). `beyond_noise`: "
                   "the interval leaves out 0.", "",
                   plots.table_md(paired, ("rung", "parent", "pairs", "difference", "low", "high", "beyond_noise"),
                                  {"pairs": ".0f"}), ""]
        if split:
            md += ["### Where the spread comes from", "", "Standard deviations of the shipped holdout score: "
                   "`total` over the replicas; `briefs`, one replica's score under a bootstrap over its holdout "
                   "briefs (what more briefs shrink); `seed`, what the training seed adds beyond it; `checkpoint`, "
                   "the spread over a replica's trained checkpoints (what the choice of checkpoint moves); "
                   "`answers`, the spread the draw of one answer a brief puts on the score (from the probe's "
                   "sampled answers on the holdout year).", "",
                   plots.table_md(split, ("rung", "replicas", "total", "briefs", "seed", "checkpoint", "answers"),
                                  {"replicas": ".0f"}), ""]
        books = spread_cells(spread, BOOK_SEED_COLS)
        md += ["### The books as a quant reads them", "", "Mean ± sd over the seeds, at the shipped checkpoint: "
               "the mean |corr| and effective bets of the greedy answers' holdout P&L, and the holdout Sharpe, beta "
               "and effective bets of the correlation-capped book (its answers) and of the archive book (from "
               "everything the rung wrote), both chosen on train numbers.", "",
               plots.table_md(books, tuple(books[0])), ""]
    else:
        md += ["## Seeds", "", "Every rung ran one seed (`rl.seeds: 1`): rung differences cannot be told from "
               "noise. Run replicas with `rl.seeds: 3` in params.yaml (or a rung's `seeds`), or `dvc exp run -S "
               "rl.seeds=3`.", ""]
    bets = bet_rows(results)
    if bets:
        cols = ("rung", "checkpoint", C.HOLDOUT_SCORE, *(c for c in BET_TABLE_COLUMNS if any(c in b for b in bets)),
                "archive_answers", "archive_effective_bets")
        md += ["## Bets", "", "Each rung's SFT policy (step 0) and shipped checkpoint over the greedy holdout "
               "answers, one a holdout brief (docs/ladder.md defines the columns): formula families (canonical "
               "forms with windows bucketed, merged where train P&L |corr| >= 0.95; `families_positive`: of "
               "answers with positive train CPCV), mean pairwise |corr| and effective bets of the holdout P&L, "
               "the correlation-capped book, brief compliance, pass@k of sampled answers, planted edges expressed "
               "and answers on decoys or traps (simulator only), and the archive book chosen on train numbers from "
               "every formula the rung wrote.", "", plots.table_md(bets, cols, {k: ".0f" for k in COUNT_COLUMNS}), ""]
    checks = check_rows(results)
    if checks:
        md += ["## Brief compliance by check", "", "Share of the greedy holdout answers that pass each of their "
               "brief's checks (docs/briefs.md), at step 0 and the shipped checkpoint; `compliance` is the mean "
               "share of checks passed; `valid_compliant`, the share of the valid answers that pass them all; "
               "`forced_lacking`, the share of the answers whose brief requirement the brief decoder wrote because "
               "the policy had not.", "",
               plots.table_md(checks, ("rung", "checkpoint", "compliance", "valid_compliant", *CHECK_COLUMNS,
                                       C.COMPLIANCE_IDEA, C.FORCED_LACKING)), ""]
    conv = convergence_rows(results)
    if conv:
        md += ["## Bets over training", "", "Per rung and checkpoint (step 0 is the SFT policy), the mean over its "
               "replicas of the greedy answers' families, the mean |corr| and effective bets of their holdout P&L "
               "and their train effective bets: where the answers' bets merge.", "",
               plots.table_md(conv, ("rung", "step", "replicas", *(c for c in CONVERGENCE_COLUMNS if c in conv[0])),
                              {"step": ".0f", "replicas": ".0f", C.FAMILIES: ".1f"}), ""]
    if sft_read:
        md += ["## Does the SFT policy read its brief?", "", "The SFT policy's answers to the holdout briefs sampled "
               "without the decoder (docs/briefs.md, \"Reading\"): `parse`, the share whose formula parses; among "
               "those, `own_checks` (mean share of their brief's checks passed) and `own_all` (share passing all), "
               "beside random valid corpus formulas checked against the same briefs (`random_*`), and each "
               "check's gap against the same brief with that field swapped.", "",
               plots.table_md(sft_read, ("policy", "when", "answers", *SFT_READING_COLUMNS), {"answers": ".0f"}),
               "", *(["No free answer parsed, so no check could be measured on them (`-`).", ""]
                     if not any(r["parse"] > 0 for r in sft_read) else [])]
    read = reading_rows(results)
    if read and not any(r["parse"] > 0 for r in read):
        read_note = ["No answer sampled without the decoder parsed at any checkpoint, so no check could be "
                     "measured on them (`-`): the policy does not yet close a formula on its own.", ""]
    else:
        read_note = []
    if read:
        md += ["## Does the policy read its brief?", "", f"Answers sampled without the decoder "
               f"(`probe.reading_samples` = {params.probe.reading_samples} a holdout brief), at step 0, the shipped "
               "and the last checkpoint (docs/briefs.md, \"Reading\"): `parse`, the share whose formula parses; "
               "among those, `own_checks`, the mean share of their own brief's checks passed, and `own_all`, the "
               "share passing all; `gap_<check>`, that check's pass rate against the own brief less against the "
               "same brief with that field swapped (near 0: the field is not read).", "",
               plots.table_md(read, ("rung", "checkpoint", *(k.removeprefix("reading_") for k in READING_COLUMNS))),
               "", *read_note]
    decoded = decoder_rows(results, _brief_answers(params, results))
    if decoded:
        md += ["## Requirements the decoder wrote", "", "Rungs trained under brief decoding: the share of a "
               "training step's answers whose brief requirement (a field, an operator, the horizon's window) "
               "the decoder's completion wrote because the policy had not, over the first and the last 50 "
               "steps (the same steps in a run of 50 or fewer; falling: training taught the policy to meet its "
               "briefs itself), and the number of answers cut at the cap over the whole run (docs/rl.md).", "",
               plots.table_md(decoded, ("rung", "steps", "answers_per_step", "forced_lacking_first",
                                        "forced_lacking_last", "forced_late_answers"),
                              {"steps": ".0f", "answers_per_step": ".0f", "forced_late_answers": ".0f"}), ""]
    by_check = decoder_check_rows(results, _brief_answers(params, results))
    if by_check:
        md += ["By check: the share of a training step's answers whose requirement of that check the decoder "
               "wrote (an answer lacking two counts in both), over the first and the last 50 steps.", "",
               plots.table_md(by_check, ("rung", "check", "first", "last")), ""]
    lacking = [r for r in lacking_rows(results) if any(v for k, v in r.items() if k not in ("rung", "checkpoint"))]
    if lacking:
        md += ["## Requirements the decoder wrote on the holdout briefs", "", "The greedy holdout answers of step 0 "
               "(the SFT policy) and of the shipped checkpoint: the share whose brief requirement the decoder wrote, "
               "and by check the share that lacked that check's requirement.", "",
               plots.table_md(lacking, ("rung", "checkpoint", C.FORCED_LACKING, *CHECKS)), ""]
    picks = selector_rows(results)
    if picks:
        md += ["## Checkpoint selectors", "", "Each selector picks a rung's checkpoint on train-window numbers "
               "(`probe.selector` names the one that ships, `ships`); the holdout columns are read afterwards, "
               "to compare them.", "",
               plots.table_md(picks, ("rung", "selector", "ships", "step", C.TRAIN_CPCV, C.TRAIN_CAPPED_SHARPE,
                                      C.HOLDOUT_SCORE, C.HOLDOUT_BOOK_SHARPE, C.FAMILIES,
                                      C.HOLDOUT_EFFECTIVE_BETS), {k: ".0f" for k in COUNT_COLUMNS}), ""]
    md += ["## Shipped", "", f"The ladder ships rung `{ship.item}` at step {ship.probe['shipped_step']}: the pick of "
           f"`probe.selector` ({params.probe.selector}) among the rungs' shipped checkpoints, the rule that picked "
           "each within its rung (train numbers only; no holdout number takes part).", "",
           f"Targets (on the rung with the best holdout score, `{best.item}`, read after the fact): holdout score "
           f"{_f(targets['holdout_score']):.3f} vs step 0 {_f(targets['step0_holdout_score']):.3f} "
           f"({'above' if targets['above_step0'] else 'NOT above'} step 0, "
           f"{'positive' if targets['positive'] else 'NOT positive'}); equal-weight book beta "
           f"{_f(targets['book_beta']):+.3f} "
           f"({'|beta| < 0.2' if targets['abs_beta_below_0.2'] else '|beta| NOT < 0.2'}).",
           "", "### Shipped answers (holdout year, holdout costs)", ""]
    md += [plots.table_md(ship.books.get("answers", []), ("formula", "count", C.TRAIN_CPCV, C.TRAIN_TURNOVER,
                                                          C.HOLDOUT_SCORE,
                                                          C.HOLDOUT_SHARPE, C.HOLDOUT_RETURN)), ""]
    ew, cap = ship.books.get("equal_weight"), ship.books.get("capped")
    arch = ship.books.get("archive")
    book_rows = [{"book": "equal weight", **(ew or {})}, {"book": "correlation-capped", **(cap or {})},
                 {"book": "positive train CPCV", **(ship.books.get("positive") or {})},
                 {"book": f"archive ({ship.books.get('archive_pool', 0)} written formulas)", **(arch or {})}]
    if ew:
        book_rows.append({"book": "market", "answers": None, "return": ew["market_return"],
                          "sharpe": ew["market_sharpe"], "max_drawdown": ew["market_max_drawdown"],
                          "beta": 1.0, "market_corr": 1.0, "book_mean_on_down_days": ew["market_mean_on_down_days"]})
    md += ["### Books against the market (holdout year)", "",
           f"`book_mean_on_down_days`: mean daily return on the {int((ew or {}).get('down_days', 0))} days the "
           f"market fell more than {abs(params.books.down_day):.1%}.", "",
           plots.table_md(book_rows, ("book", *BOOK_KEYS), {"answers": ".0f"}), "",
           "![growth](figures/growth.png)", "", "![book vs market](figures/book_vs_market.png)", "",
           "## Training", "", "![curves](figures/training_curves.png)", "",
           "## Checkpoints", "", "![selector vs holdout](figures/selector_vs_holdout.png)", "",
           "![answer scores](figures/answer_scores.png)", ""]
    for r in results:
        md += [f"### {r.item}", ""]
        if not r.ok:
            md += ["FAILED or not run: missing " + "; ".join(r.missing), ""]
            continue
        md += [plots.table_md(r.table.to_dict("records"), CKPT_COLS), ""]
    return "\n".join(_wrap("\n".join(md).split("\n")))


def _wrap(lines: list[str], width: int = 110) -> list[str]:
    """Prose lines wrapped at `width` (a list item's continuation indented); tables, headings and images kept
    whole, as Markdown needs them on one line."""
    out: list[str] = []
    for line in lines:
        if len(line) <= width or line.startswith(("|", "#", "![", "```")):
            out.append(line)
        else:
            out += textwrap.wrap(line, width, subsequent_indent="  " if line.startswith("- ") else "",
                                 break_long_words=False, break_on_hyphens=False)
    return out


def _export(params: Params, deps: dict[str, Path], results: list[RungResult], rows: list[dict[str, Any]],
            spread: list[dict[str, Any]], ship: RungResult, paired: list[dict[str, Any]],
            split: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "rewards": {"channels": list(ch.CHANNELS), "priorities": dict(params.verifier.priorities),
                    "definitions": {c.id: f"{c.r} ({ch.SCOPES[c.scope]}): {c.doc}" for c in ch.REGISTRY}},
        "world_model": {"config": dict(params.worldmodel), "jepa_stress": dict(params.verifier.jepa_stress),
                        "gates": read_json(deps["gates"], what="world-model gate report")},
        "ladder": rows, "seeds": spread, "shipped": {"rung": ship.item, "step": ship.probe["shipped_step"]},
        "paired": paired, "variance": split,
        "rungs": {r.item: {"ok": r.ok, "missing": r.missing, "parent": r.parent, "change": r.change,
                           "train_summary": r.train, "log": r.log,
                           "checkpoints": r.table.to_dict("records") if r.table is not None else [],
                           "probe": r.probe, "books": r.books,
                           "daily": r.daily.to_dict("list") if r.daily is not None else {},
                           "answers": r.answers.to_dict("records") if r.answers is not None else []}
                  for r in results},
    }
