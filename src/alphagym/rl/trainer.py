"""The RL trainer: one loop a reader can hold in their head.

Written by hand rather than on TRL's GRPOTrainer because the recipe's guards have no hooks there: per-group
GDPO over the verifier's channels with a validity projection and an advantage floor, REPO-R's per-token
advantage shaping with its entropy thermostat, ADAPO's moving clip, and DAPO refill on the combined reward.
Metric names follow TRL's where the concept exists (reward, reward_std, frac_reward_zero_std, kl, entropy,
clip_ratio/*, completions/mean_length, learning_rate, grad_norm).

One step:
  1. draw `briefs_per_step` briefs, sample `answers_per_brief` answers each (seeded by (seed, step));
  2. score each group in the environment (the verifier); refill constant-reward groups if asked;
     then add the valid answers to the novelty archive;
  3. advantages per group: GDPO, then the validity / floor projection (rl/advantages.py);
  4. reference log-probs (the adapter disabled: the SFT policy) once;
  5. `updates_per_batch` passes of AdamW over the batch: the first pass's log-probs are the rollout
     policy's ("old") log-probs; REPO-R shapes advantages per token; loss from rl/losses.py;
  6. controllers (zeta thermostat, ADAPO) read the step's mean token entropy; log; checkpoint.

Resuming: everything random in a step is seeded from (seed, step), and a checkpoint holds the adapter, the
optimizer, the controllers and the novelty archive, so a run resumed from step k continues exactly as the
uninterrupted run did (tests/test_rl_trainer.py checks it).
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from alphagym.config import to_builtin
from alphagym.errors import PolicyError
from alphagym.policy.grammar import rejected_share, steered_share
from alphagym.policy.model import META, Policy, base_fingerprint
from alphagym.rl.advantages import group_advantages
from alphagym.rl.controllers import AdaptiveClip, ZetaThermostat
from alphagym.rl.env import Environment, Scored
from alphagym.rl.losses import policy_loss, repo_r, top_entropy_mask
from alphagym.verifier.verifier import EVALUATOR_ERROR

STATE = "trainer_state.pt"


def step_seed(seed: int, step: int, stream: int) -> int:
    """A 31-bit seed for one random draw of one step (independent streams per purpose)."""
    return int(np.random.SeedSequence([seed, step, stream]).generate_state(1)[0] & 0x7FFFFFFF)


# recipe keys that do not change what a step computes: a run may resume under other values (train longer)
RESUMABLE_KEYS = ("steps", "checkpoint_every", "score_cache")


def config_hash(recipe: Mapping[str, Any], seed: int, base: str) -> str:
    """What a checkpoint must match to be resumed: the recipe (but RESUMABLE_KEYS), the seed, the base model."""
    kept = {k: v for k, v in to_builtin(recipe).items() if k not in RESUMABLE_KEYS}
    text = json.dumps({"recipe": kept, "seed": seed, "base": base}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Trainer:
    def __init__(self, policy: Policy, env: Environment, briefs: Sequence[Mapping[str, Any]],
                 recipe: Mapping[str, Any], seed: int, work: Path | None = None,
                 log: Callable[[dict[str, float], int], None] = lambda m, s: None,
                 sync: Callable[[int], None] = lambda step: None) -> None:
        if not policy.has_adapter:
            raise PolicyError("the RL trainer trains an adapter (LoRA/DoRA) on the SFT policy; this policy has none")
        if not briefs:
            raise PolicyError("no briefs to train on")
        self.policy, self.env, self.briefs, self.cfg, self.seed = policy, env, list(briefs), recipe, int(seed)
        self.work, self.log, self.sync = work, log, sync
        self.params = [p for p in policy.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=float(recipe["lr"]), weight_decay=float(recipe["weight_decay"]))
        repo, adapo = recipe["repo"], recipe["adapo"]
        self.zeta = ZetaThermostat(float(repo["zeta_init"]), float(repo["zeta_floor"]), float(repo["zeta_max"]),
                                   int(repo["warmup"]))
        self.clip_high = AdaptiveClip(float(recipe["epsilon_high"]), float(adapo["step"]), float(adapo["low"]),
                                      float(adapo["high"]), int(adapo["warmup"]))
        floor = recipe["advantage_floor"]
        self.floor = None if floor == "off" else float(floor)
        self.step = 0
        self.history: list[dict[str, float]] = []
        self.hash = config_hash(recipe, self.seed, base_fingerprint(policy.model))

    # --- 1-2. sample and score ----------------------------------------------------------------------------
    def _draw(self, step: int, n: int, stream: int) -> list[Mapping[str, Any]]:
        rng = np.random.default_rng(step_seed(self.seed, step, stream))
        idx = rng.choice(len(self.briefs), size=n, replace=n > len(self.briefs))
        return [self.briefs[i] for i in idx]

    def _sample(self, briefs: Sequence[Mapping[str, Any]], step: int, stream: int) -> list[list[str]]:
        return self.policy.generate([b["text"] for b in briefs], n=int(self.cfg["answers_per_brief"]),
                                    temperature=float(self.cfg["temperature"]), seed=step_seed(self.seed, step, stream))

    def rollout(self, step: int) -> tuple[list[Mapping[str, Any]], list[list[str]], list[list[Scored]],
                                          dict[str, float]]:
        t0 = time.perf_counter()
        briefs = self._draw(step, int(self.cfg["briefs_per_step"]), 0)
        answers = self._sample(briefs, step, 1)
        t1 = time.perf_counter()
        scored = [self.env.score(a, b) for a, b in zip(answers, briefs)]
        t2 = time.perf_counter()
        timing = {"time/generation": t1 - t0, "time/scoring": t2 - t1}
        if self.policy.grammar is not None:      # how hard the grammar sampler had to steer this step
            st = self.policy.decode_stats
            timing["decoding/rejected_share"] = rejected_share(st)
            timing["decoding/steered_share"] = steered_share(st)
            timing["decoding/dead_ends"] = float(st.get("dead_ends", 0))
            st.clear()
        rounds = replaced = 0
        if self.cfg["refill"]["enabled"]:
            for r in range(int(self.cfg["refill"]["max_rounds"])):
                flat = [i for i, g in enumerate(scored) if np.std([self._combined(s) for s in g]) < 1e-12]
                if not flat:
                    break
                rounds += 1
                replaced += len(flat)
                new_briefs = self._draw(step, len(flat), 10 + 2 * r)
                t1 = time.perf_counter()
                new_answers = self._sample(new_briefs, step, 11 + 2 * r)
                t2 = time.perf_counter()
                for i, b, a in zip(flat, new_briefs, new_answers):
                    briefs[i], answers[i], scored[i] = b, a, self.env.score(a, b)
                timing["time/generation"] += t2 - t1
                timing["time/scoring"] += time.perf_counter() - t2
        timing.update({"refill/rounds": float(rounds), "refill/groups_replaced": float(replaced)})
        t3 = time.perf_counter()
        self.env.commit([s for g in scored for s in g])
        timing["time/scoring"] += time.perf_counter() - t3
        return briefs, answers, scored, timing

    def _combined(self, s: Scored) -> float:
        """The priority-weighted sum of the raw channels: TRL's `reward` (what a single-reward run sees)."""
        return float(sum(self.env.priorities.get(k, 0.0) * v for k, v in s.channels.items()))

    # --- 3. advantages ------------------------------------------------------------------------------------------
    def advantages(self, scored: Sequence[Sequence[Scored]]) -> np.ndarray:
        out = []
        for g in scored:
            names = list(g[0].channels)
            chans = {c: [s.channels[c] for s in g] for c in names}
            out.append(group_advantages(chans, self.env.priorities, np.array([s.valid for s in g]),
                                        np.array([s.core for s in g]), self.floor, str(self.cfg["advantage"])))
        return np.concatenate(out)

    # --- 4-5. the update ----------------------------------------------------------------------------------------
    def _forward(self, briefs: list[str], answers: list[str], adapter: bool, grad: bool, entropy: bool
                 ) -> list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]]:
        mb = int(self.cfg["micro_batch"])
        return [self.policy.answer_forward(briefs[i:i + mb], answers[i:i + mb], adapter=adapter, grad=grad,
                                           entropy=entropy) for i in range(0, len(briefs), mb)]

    def update(self, briefs: list[str], answers: list[str], adv: np.ndarray, step: int) -> dict[str, float]:
        cfg = self.cfg
        mb = int(cfg["micro_batch"])
        t0 = time.perf_counter()
        ref = [lp for lp, _, _ in self._forward(briefs, answers, adapter=False, grad=False, entropy=False)]
        t1 = time.perf_counter()
        adv_t = torch.tensor(adv, dtype=torch.float32, device=self.policy.device)
        n_tokens = 0.0
        old: list[torch.Tensor] = []
        stats: dict[str, list[float]] = {}
        zeta = self.zeta.zeta if cfg["repo"]["enabled"] else 0.0
        clip_high = self.clip_high.value if cfg["adapo"]["enabled"] else float(cfg["epsilon_high"])
        entropies: list[float] = []
        for it in range(int(cfg["updates_per_batch"])):
            self.policy.model.train()
            self.opt.zero_grad(set_to_none=True)
            for k, i in enumerate(range(0, len(briefs), mb)):
                lp, ent, mask = self.policy.answer_forward(briefs[i:i + mb], answers[i:i + mb], grad=True,
                                                           entropy=True)
                assert ent is not None
                if it == 0:
                    old.append(lp.detach())
                    entropies.append(float((ent * mask).sum()))
                    n_tokens += float(mask.sum())
                a = adv_t[i:i + mb]
                a_tok = repo_r(a, lp, zeta) if zeta > 0 else a[:, None].expand_as(lp)
                keep = top_entropy_mask(ent, mask, float(cfg["top_entropy_share"])) \
                    if cfg["token_selection"] == "top_entropy" else mask
                out = policy_loss(cfg["loss"], lp, old[k], ref[k], a_tok, keep, float(cfg["beta"]),
                                  float(cfg["epsilon"]), clip_high, float(cfg["cispo_max"]))
                # micro-batches weigh by their share of the batch, so the sum is the batch loss
                (out.loss * (len(a) / len(briefs))).backward()
                for name, v in [("policy_loss", out.policy_loss), ("kl", out.kl), *out.clip_ratio.items()]:
                    stats.setdefault(name, []).append(v * len(a) / len(briefs))
                stats.setdefault("tokens_kept", []).append(float(keep.sum()))
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, float(cfg["max_grad_norm"])))
            self.opt.step()
            stats.setdefault("grad_norm", []).append(grad_norm)
        self.policy.model.eval()
        t2 = time.perf_counter()
        passes = int(cfg["updates_per_batch"])
        entropy = sum(entropies) / max(n_tokens, 1)
        metrics = {k: float(np.sum(v)) / passes for k, v in stats.items() if k != "grad_norm"}
        metrics.update({"grad_norm": float(np.mean(stats["grad_norm"])), "entropy": entropy,
                        "repo/zeta": zeta, "clip_high": clip_high,
                        "time/reference": t1 - t0, "time/update": t2 - t1,
                        "learning_rate": float(self.opt.param_groups[0]["lr"])})
        metrics["frac_tokens_kept"] = metrics.pop("tokens_kept") / max(n_tokens, 1)
        self.zeta.update(entropy)
        self.clip_high.update(entropy)
        return metrics

    # --- one step ---------------------------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, float]:
        torch.manual_seed(step_seed(self.seed, step, 2))          # adapter dropout
        t0 = time.perf_counter()
        briefs, answers, scored, timing = self.rollout(step)
        adv = self.advantages(scored)
        flat_b = [b["text"] for b, g in zip(briefs, answers) for _ in g]
        flat_a = [a for g in answers for a in g]
        flat_s = [s for g in scored for s in g]
        upd = self.update(flat_b, flat_a, adv, step)
        rewards = np.array([self._combined(s) for s in flat_s])
        group_std = [float(np.std([self._combined(s) for s in g])) for g in scored]
        lengths = [len(self.policy.tokenizer(a, add_special_tokens=False)["input_ids"]) for a in flat_a]
        m: dict[str, float] = {
            "reward": float(rewards.mean()), "reward_std": float(np.mean(group_std)),
            "frac_reward_zero_std": float(np.mean([s < 1e-12 for s in group_std])),
            "frac_nonzero_advantage": float(np.mean(np.abs(adv) > 1e-9)),
            "frac_invalid": float(np.mean([not s.valid for s in flat_s])),
            "verifier/evaluator_errors": float(sum(s.card is not None and s.card.error_type == EVALUATOR_ERROR
                                                   for s in flat_s)),
            "core_score/mean": float(np.mean([s.core for s in flat_s])),
            "completions/mean_length": float(np.mean(lengths)),
            "distinct_canonical_forms": float(len({s.canonical for s in flat_s if s.valid and s.canonical})),
            "compliant": float(np.mean([s.metrics.get("compliant", 0.0) for s in flat_s])),
            **{f"rewards/{c}/mean": float(np.mean([s.channels[c] for s in flat_s])) for c in flat_s[0].channels},
            **upd, **timing}
        m["step_time"] = time.perf_counter() - t0
        return m

    def train(self, progress: Callable[[Any], Any] = lambda x: x) -> list[dict[str, float]]:
        """Run from `self.step` to `steps`, checkpointing every `checkpoint_every` steps into `work`."""
        steps, every = int(self.cfg["steps"]), int(self.cfg["checkpoint_every"])
        bar = progress(range(self.step, steps))
        for step in bar:
            m = self.train_step(step)
            self.step = step + 1
            self.history.append({"step": float(self.step), **m})
            self.log(m, self.step)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(reward=f"{m['reward']:.2f}", core=f"{m['core_score/mean']:.2f}",
                                invalid=f"{m['frac_invalid']:.2f}")
            if self.work is not None and (self.step % every == 0 or self.step == steps):
                self.save_checkpoint(self.work / f"checkpoint-{self.step:06d}")
                self.sync(self.step)
        return self.history

    # --- checkpoints ----------------------------------------------------------------------------------------------
    def save_checkpoint(self, path: Path) -> Path:
        """Adapter (Hugging Face / peft folder), optimizer, controllers, archive and the log so far; written
        to a temporary folder and renamed, so a kill mid-write leaves no half checkpoint."""
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.policy.save(tmp, {"step": self.step, "config_hash": self.hash})
        torch.save({"step": self.step, "optimizer": self.opt.state_dict(), "zeta": self.zeta.state(),
                    "clip_high": self.clip_high.state(), "config_hash": self.hash, "history": self.history},
                   tmp / STATE)
        self.env.save(tmp)
        shutil.rmtree(path, ignore_errors=True)
        tmp.replace(path)
        return path

    def load_checkpoint(self, path: Path) -> None:
        """Continue from a checkpoint of the same recipe, seed and base model; anything else is an error
        naming the folder."""
        meta_path, state_path = path / META, path / STATE
        if not meta_path.is_file() or not state_path.is_file():
            raise PolicyError(f"{path} is not a complete RL checkpoint (needs {META} and {STATE})")
        meta = json.loads(meta_path.read_text())
        if meta.get("base") != base_fingerprint(self.policy.model):
            raise PolicyError(f"{path} holds an adapter for another base model (fingerprint {meta.get('base')}, "
                              f"this policy's base {base_fingerprint(self.policy.model)})")
        state = torch.load(state_path, weights_only=False)
        if state["config_hash"] != self.hash:
            raise PolicyError(f"{path} was written by another recipe or seed (config {state['config_hash']}, "
                              f"this run {self.hash})")
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        weights = path / "adapter_model.safetensors"
        set_peft_model_state_dict(self.policy.model, load_file(weights))
        self.opt.load_state_dict(state["optimizer"])
        self.zeta = ZetaThermostat.from_state(state["zeta"])
        self.clip_high = AdaptiveClip.from_state(state["clip_high"])
        self.step, self.history = int(state["step"]), list(state["history"])
        self.env.load(path)


def latest_checkpoint(work: Path) -> Path | None:
    done = sorted(p for p in work.glob("checkpoint-*") if p.is_dir() and not p.name.endswith(".tmp"))
    return done[-1] if done else None
