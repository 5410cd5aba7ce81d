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
import torch
from transformers import get_cosine_schedule_with_warmup

from alphagym.policy.model import Policy


def sft_loss(policy: Policy, briefs: Sequence[str], answers: Sequence[str]) -> torch.Tensor:
    """Mean negative log-likelihood per answer token (the closing end token included)."""
    lp, mask = policy.token_logprobs(briefs, answers, grad=True)
    return -(lp * mask).sum() / mask.sum()


def train_sft(policy: Policy, briefs: Sequence[str], answers: Sequence[str], cfg: Mapping[str, Any], seed: int,
              log: Callable[[dict[str, float], int], None] = lambda m, s: None,
              progress: Callable[[Any], Any] = lambda x: x) -> list[dict[str, float]]:
    """Train in place; returns the curve (one row per logged step). `cfg` is the `sft` params block."""
    rng = np.random.default_rng([seed, 21])
    order = rng.permutation(len(briefs))
    n_eval = max(1, int(round(float(cfg["eval_share"]) * len(briefs))))
    ev, tr = order[:n_eval], order[n_eval:]
    bs, epochs = int(cfg["batch_size"]), int(cfg["epochs"])
    steps = epochs * math.ceil(len(tr) / bs)
    params = [p for p in policy.model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=float(cfg["lr"]), weight_decay=float(cfg["weight_decay"]))
    sched = get_cosine_schedule_with_warmup(opt, int(float(cfg["warmup_share"]) * steps), steps)
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
            grad_norm = float(torch.nn.utils.clip_grad_norm_(params, float(cfg["max_grad_norm"])))
            opt.step()
            sched.step()
            step += 1
            next(it, None)
            row = {"step": step, "loss": loss.item(), "grad_norm": grad_norm,
                   "learning_rate": float(sched.get_last_lr()[0]), "step_time": time.perf_counter() - t0}
            if step % int(cfg["eval_every"]) == 0 or step == steps:
                row["eval_loss"] = eval_loss()
            curve.append(row)
            log({k: v for k, v in row.items() if k != "step"}, step)
    policy.model.eval()
    return curve
