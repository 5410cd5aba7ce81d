"""SFT warm-up: next-token loss on the answer tokens of verified brief -> formula pairs.

A plain loop (AdamW, linear warm-up then cosine decay, gradient clipping, seeded shuffles) rather than
`transformers.Trainer`: the loss is the policy's own `token_logprobs` (the same left-padded prompt path the
RL trainer and the probes use), and one loop of forty lines is easier to check than a Trainer subclass.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm
from transformers import get_cosine_schedule_with_warmup

from alphagym.briefs.catalogue import CHECKS, Catalogue
from alphagym.params import SftRun
from alphagym.policy.evaluate import verified_answers
from alphagym.policy.model import Policy
from alphagym.verifier.verifier import Verifier


def sft_loss(policy: Policy, briefs: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
    """Mean negative log-likelihood per answer token (the closing end token included)."""
    lp, mask = policy.token_logprobs(briefs, answers, grad=True)
    return -(lp * mask).sum() / mask.sum()


def train_sft(policy: Policy, briefs: Sequence[str], answers: Sequence[str], cfg: SftRun, seed: int,
              log: Callable[[dict[str, float], int], None] = lambda m, s: None,
              progress: Callable[[Any], Any] = lambda x: x) -> list[dict[str, float]]:
    """Train in place; returns the curve (one row per logged step). `cfg` is the backend's `sft` block."""
    rng = np.random.default_rng([seed, 21])
    order = rng.permutation(len(briefs))
    n_eval = max(1, int(round(cfg.eval_share * len(briefs))))
    ev, tr = order[:n_eval], order[n_eval:]
    bs, epochs = cfg.batch_size, cfg.epochs
    steps = epochs * math.ceil(len(tr) / bs)
    params = [p for p in policy.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    sched = get_cosine_schedule_with_warmup(opt, int(cfg.warmup_share * steps), steps)
    torch.manual_seed(seed)
    curve, step = [], 0

    def eval_loss() -> float:
        policy.model.eval()
        with torch.no_grad():
            losses = [float(sft_loss(policy, [briefs[i] for i in ev[k:k + bs]], [answers[i] for i in ev[k:k + bs]]))
                      for k in range(0, len(ev), bs)]
        return float(np.mean(losses))

    bar = progress(range(steps))
    it = iter(bar)
    for _ in range(epochs):
        perm = tr[rng.permutation(len(tr))]
        for k in range(0, len(perm), bs):
            idx = perm[k:k + bs]
            t0 = time.perf_counter()
            policy.model.train()
            loss = sft_loss(policy, [briefs[i] for i in idx], [answers[i] for i in idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, cfg.max_grad_norm))
            opt.step()
            sched.step()
            step += 1
            next(it, None)
            row = {"step": step, "loss": loss.item(), "grad_norm": grad_norm,
                   "learning_rate": float(sched.get_last_lr()[0]), "step_time": time.perf_counter() - t0}
            if step % cfg.eval_every == 0 or step == steps:
                row["eval_loss"] = eval_loss()
            curve.append(row)
            log({k: v for k, v in row.items() if k != "step"}, step)
    policy.model.eval()
    return curve


_ROUND_KEYS = {"eval_loss": "round_eval_loss"}


def self_distill(policy: Policy, pairs: pd.DataFrame, briefs: Sequence[Mapping[str, Any]], verifier: Verifier,
                 cat: Catalogue, tol: float, cfg: SftRun, temperature: float, seed: int, first_step: int,
                 desc: str = "self-distill", log: Callable[[dict[str, float], int], None] = lambda m, s: None
                 ) -> tuple[list[dict[str, float]], list[dict[str, float]]]:
    """Rejection-sampling rounds after SFT (`cfg` is the backend's `sft` block, its `self_distill` the
    rounds): draw answers to the training briefs at `temperature`, keep the valid ones that pass at least
    `min_compliance` of their brief's checks (train window only; never a holdout brief), and train on them
    mixed with `replay` corpus pairs per kept answer. The policy learns which of its own habits the verifier
    accepts, which the corpus alone, all valid, cannot show it.
    Trains the policy in place (with its decoding as set) and returns (the rounds' curve, its steps numbered
    from `first_step`, a round's held-out loss as `round_eval_loss`; one summary row per round). `log` gets
    each logged step's metrics under the curve's names."""
    sd = cfg.self_distill
    curve: list[dict[str, float]] = []
    rounds: list[dict[str, float]] = []
    for k in range(sd.rounds):
        got, stats = verified_answers(policy, briefs, verifier, cat, tol, sd.samples, temperature,
                                      seed + 100 + k, desc=f"{desc} {k + 1}", min_compliance=sd.min_compliance)
        # the share of the drawn answers whose brief requirement the decoder wrote: taught to the policy as its own
        lacking = {key: v / max(stats["answers"], 1) for key, v in policy.decode_stats.items()
                   if key.startswith("forced_lacking")}
        policy.decode_stats.clear()
        row = {"round": k + 1, "drawn": stats["answers"], "valid_share": stats["valid_share"], "kept": stats["kept"],
               "forced_lacking": 0.0, **{f"forced_lacking_{c}": 0.0 for c in CHECKS}, **lacking}
        if not got:                  # a policy too weak to write one valid answer: nothing to learn from
            rounds.append({**row, "replayed": 0.0, "steps": 0.0})
            continue
        replay = pairs.sample(n=min(len(pairs), int(round(sd.replay * len(got)))),
                              random_state=seed + k)
        briefs_k = [b for b, _ in got] + list(replay["brief"])
        answers_k = [a for _, a in got] + list(replay["answer"])
        step0, name = first_step + len(curve), f"{desc} {k + 1}"

        def log_step(m: dict[str, float], s: int, step0: int = step0) -> None:
            log({_ROUND_KEYS.get(key, key): v for key, v in m.items()}, step0 + s)

        round_cfg = cfg.model_copy(update={"epochs": sd.epochs, "lr": sd.lr})
        part = train_sft(policy, briefs_k, answers_k, round_cfg, seed + 7 + k, log=log_step,
                         progress=lambda it, name=name: tqdm(it, desc=name, unit="step", mininterval=2))
        # the round's held-out loss is on its own pairs' split, not the corpus's: kept apart
        curve += [{**{_ROUND_KEYS.get(key, key): v for key, v in r.items()}, "step": step0 + r["step"], "round": k + 1}
                  for r in part]
        rounds.append({**row, "replayed": float(len(replay)), "steps": float(len(part)),
                       "eval_loss": next((r["eval_loss"] for r in reversed(part) if "eval_loss" in r), float("nan"))})
    return curve, rounds
