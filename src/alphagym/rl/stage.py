"""The `train` stage: one rung of the ladder (`alphagym train --rung NAME`).

Starts from the SFT policy of `rl.policy`, wraps the rung's adapter, and trains with the rung's recipe
(`rl.recipe` with the rung's `set`) on the train-window verifier (R3 on when the world model kept worlds).
Checkpoints go to the rung's work folder as they are written, so a killed run resumes from its newest usable
one: a checkpoint cut short or garbled is skipped (and removed) for the one before it, with a message; one of
another recipe, seed, base model, params or inputs, or past the recipe's `steps`, stops the run with a
`ResumeError` that says how to start afresh, never silently reused or thrown away. The stage runner holds a
lock on the rung while it trains, so two trainings of one rung cannot share its work folder. At the end the
checkpoints move to the declared output folder.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from alphagym.artifacts import digest
from alphagym.briefs.catalogue import load_catalogue
from alphagym.briefs.generate import read_briefs
from alphagym.briefs.idea import IdeaCheck
from alphagym.config import to_builtin
from alphagym.panel import Panel
from alphagym.params import Params
from alphagym.policy.backends import disable_dropout, wrap_adapter
from alphagym.rl.checkpoints import set_threads, sft_base
from alphagym.rl.env import VerifierEnv
from alphagym.rl.plots import curves_figure
from alphagym.rl.trainer import Trainer
from alphagym.rungs import resolve_rung
from alphagym.tracking import StageRun
from alphagym.verifier.archive import NoveltyArchive
from alphagym.verifier.loading import load_kept_worlds
from alphagym.verifier.verifier import Verifier


def build_trainer(params: Params, deps: dict[str, Path], item: str, work: Path | None,
                  log: Any = lambda m, s: None, code: str = "") -> Trainer:
    """The trainer of one rung, or of a seed replica `RUNG-sK` (the same rung with seed + K); `code`: the
    digest of the code the stage runs (`StageRun.code`), part of what its checkpoints must match."""
    rung = resolve_rung(params, item)
    recipe = rung.recipe
    set_threads(recipe)
    seed, cat = rung.seed, load_catalogue()
    policy = sft_base(deps["policy"], params.policy, params.dsl.limits, params.briefs.horizon_tolerance,
                      recipe.decoding)
    torch.manual_seed(seed)
    if recipe.disable_dropout:        # adapter dropout 0 at build time: peft's identity path, no masks drawn
        disable_dropout(policy.model)     # and whatever dropout the base model has
    policy.model = wrap_adapter(policy.model, params.policy.adapter, recipe.adapter,
                                dropout=0.0 if recipe.disable_dropout else None)
    policy.max_new_tokens, policy.micro_batch = recipe.max_new_tokens, recipe.micro_batch
    worlds = (load_kept_worlds(deps["gates"], deps["worlds"])
              if params.verifier.jepa_stress.enabled else {})
    verifier = Verifier(Panel.read_parquet(deps["train"]), params, NoveltyArchive.load(deps["archive"]),
                        stress_worlds=worlds)
    env = VerifierEnv(verifier, cat, params.briefs.horizon_tolerance, cache=recipe.score_cache,
                      reward_weights=recipe.reward_weights, idea=IdeaCheck(verifier.panel, cat))
    briefs = read_briefs(deps["briefs_filtered" if recipe.briefs == "filtered" else "briefs_train"], cat)
    return Trainer(policy, env, briefs, recipe, seed, work, log, context=run_context(params, deps, code))


def run_context(params: Params, deps: dict[str, Path], code: str = "") -> dict[str, Any]:
    """What a checkpoint must have been trained on, besides its recipe and seed, to be continued: the stage's
    other params (the verifier's costs, CPCV, ...), the sha256 of every input (the panel, the archive, the
    worlds, the briefs, the SFT policy) and of the code the stage runs (`StageRun.code`; the decoder that
    wrote its answers, the losses). A rerun after any of them changed starts afresh or stops, never
    continues another run's work (`Trainer.read_checkpoint`)."""
    others = {k: v for k, v in to_builtin(params).items() if k not in ("seed", "rl")}
    others["rl"] = {k: v for k, v in to_builtin(params.rl).items() if k not in ("recipe", "rungs")}
    ctx: dict[str, Any] = {"params": others, "inputs": {role: digest(path) for role, path in sorted(deps.items())}}
    return {**ctx, "code": code} if code else ctx


def train(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun, item: str) -> dict[str, Any]:
    rung = resolve_rung(params, item)
    work = outs["work"]
    log_path = work / "log.jsonl"
    run.log_rung(rung)

    def log(metrics: dict[str, float], step: int) -> None:
        run.log_metrics(metrics, step=step)
        with log_path.open("a") as f:
            f.write(json.dumps({"step": step, **metrics}, sort_keys=True) + "\n")

    trainer = build_trainer(params, deps, item, work, log, run.code)
    last, skipped = trainer.resume()
    for folder, why in skipped:
        print(f"rung {item}: skipped and removed the unusable checkpoint {folder}: {why}")
    resumed_from = None if last is None else last.name
    if last is not None:
        print(f"rung {item}: resuming from {last}")
    # the log holds exactly the steps of the state we start from
    log_path.write_text("".join(json.dumps({k: v for k, v in h.items()}, sort_keys=True) + "\n"
                                for h in trainer.history))
    history = trainer.train(progress=lambda it: tqdm(it, desc=f"rl {item}", unit="step", mininterval=5))
    shutil.copy(log_path, outs["log"])
    outs["checkpoints"].rmdir()
    shutil.copytree(work, outs["checkpoints"], ignore=shutil.ignore_patterns("log.jsonl", "*.tmp"))
    curves_figure(history, item, outs["curves"])
    first = [h["core_score/mean"] for h in history[:50]]
    last50 = [h["core_score/mean"] for h in history[-50:]]
    summary = {"rung": item, "parent": rung.parent, "change": rung.change, "steps": len(history),
               "resumed_from": resumed_from,
               "core_score_first50": sum(first) / len(first), "core_score_last50": sum(last50) / len(last50),
               "reward_first50": sum(h["reward"] for h in history[:50]) / len(first),
               "reward_last50": sum(h["reward"] for h in history[-50:]) / len(last50),
               "frac_invalid_last50": sum(h["frac_invalid"] for h in history[-50:]) / len(last50),
               "step_time_median": sorted(h["step_time"] for h in history)[len(history) // 2],
               "checkpoints": sorted(p.name for p in outs["checkpoints"].glob("checkpoint-*"))}
    outs["summary"].write_text(json.dumps(summary, indent=1))
    run.log_artifact(outs["summary"])
    run.log_artifact(outs["curves"])
    shutil.rmtree(work)          # finished: nothing to resume
    return {k: summary[k] for k in ("rung", "steps", "core_score_first50", "core_score_last50", "resumed_from")}
