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

from alphagym.artifacts import MANIFEST, read_json, read_safetensors, read_torch, verify_manifest, write_manifest
from alphagym.briefs.catalogue import CHECKS
from alphagym.config import to_builtin
from alphagym.errors import ArtifactError, PolicyError, ResumeError
from alphagym.params import RlRecipe
from alphagym.policy.backends import base_fingerprint
from alphagym.policy.grammar import Trace, rejected_share, steered_share
from alphagym.policy.model import META, Policy
from alphagym.policy.scoring import Forward
from alphagym.rl.advantages import group_advantages
from alphagym.rl.controllers import AdaptiveClip, ZetaThermostat
from alphagym.rl.env import Environment, Scored
from alphagym.rl.losses import forced_nll, policy_loss, repo_r, top_entropy_mask
from alphagym.verifier.channels import combined
from alphagym.verifier.verifier import EVALUATOR_ERROR

STATE = "trainer_state.pt"
# what `Trainer.save_checkpoint` writes besides the manifest (the environment adds its own files)
CHECKPOINT_FILES = ("adapter_config.json", "adapter_model.safetensors", META, STATE)


def step_seed(seed: int, step: int, stream: int) -> int:
    """A 31-bit seed for one random draw of one step (independent streams per purpose)."""
    return int(np.random.SeedSequence([seed, step, stream]).generate_state(1)[0] & 0x7FFFFFFF)


# recipe keys that do not change what a step computes: a run may resume under other values (a longer run, other
# checkpoint spacing, another cache size); `steps` only upwards (`Trainer.read_checkpoint`)
RESUMABLE_KEYS = ("steps", "checkpoint_every", "score_cache")


def config_hash(recipe: RlRecipe, seed: int, base: str, context: Mapping[str, Any] | None = None) -> str:
    """What a checkpoint must match to be resumed: the recipe (but RESUMABLE_KEYS), the seed, the base model,
    and the run's context (the stage's other params and its inputs' digests, `rl/stage.py`)."""
    kept = {k: v for k, v in to_builtin(recipe).items() if k not in RESUMABLE_KEYS}
    extra = {"context": to_builtin(context)} if context else {}
    text = json.dumps({"recipe": kept, "seed": seed, "base": base, **extra}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Trainer:
    def __init__(self, policy: Policy, env: Environment, briefs: Sequence[Mapping[str, Any]],
                 recipe: RlRecipe, seed: int, work: Path | None = None,
                 log: Callable[[dict[str, float], int], None] = lambda m, s: None,
                 context: Mapping[str, Any] | None = None) -> None:
        if not policy.has_adapter:
            raise PolicyError("the RL trainer trains an adapter (LoRA/DoRA) on the SFT policy; this policy has none")
        if not briefs:
            raise PolicyError("no briefs to train on")
        self.policy, self.env, self.briefs, self.cfg, self.seed = policy, env, list(briefs), recipe, int(seed)
        self.work, self.log = work, log
        self.params = [p for p in policy.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(self.params, lr=recipe.lr, weight_decay=recipe.weight_decay)
        repo, adapo = recipe.repo, recipe.adapo
        self.zeta = ZetaThermostat(repo.zeta_init, repo.zeta_floor, repo.zeta_max, repo.warmup)
        self.clip_high = AdaptiveClip(recipe.epsilon_high, adapo.step, adapo.low, adapo.high, adapo.warmup)
        self.floor = None if recipe.advantage_floor == "off" else float(recipe.advantage_floor)
        self.step = 0
        self.history: list[dict[str, float]] = []      # one a step: its metrics and "step", an int
        self.context = to_builtin(context) if context else {}
        self.hash = config_hash(recipe, self.seed, base_fingerprint(policy.model), self.context)

    # --- 1-2. sample and score ----------------------------------------------------------------------------
    def _draw(self, step: int, n: int, stream: int) -> list[Mapping[str, Any]]:
        rng = np.random.default_rng(step_seed(self.seed, step, stream))
        idx = rng.choice(len(self.briefs), size=n, replace=n > len(self.briefs))
        return [self.briefs[i] for i in idx]

    def _sample(self, briefs: Sequence[Mapping[str, Any]], step: int, stream: int
                ) -> tuple[list[list[str]], list[list[Trace | None]]]:
        """Each brief's answers and, under constrained decoding, their traces (how each was drawn: the
        update's log-probabilities are those of the distribution the decoder drew from)."""
        answers = self.policy.generate(briefs, n=self.cfg.answers_per_brief,
                                       temperature=self.cfg.temperature, seed=step_seed(self.seed, step, stream),
                                       trace=self.policy.grammar is not None)
        return answers, self.policy.last_traces

    def rollout(self, step: int) -> tuple[list[Mapping[str, Any]], list[list[str]], list[list[Scored]],
                                          dict[str, float], list[list[Trace | None]]]:
        t0 = time.perf_counter()
        briefs = self._draw(step, self.cfg.briefs_per_step, 0)
        answers, traces = self._sample(briefs, step, 1)
        t1 = time.perf_counter()
        scored = [self.env.score(a, b) for a, b in zip(answers, briefs)]
        t2 = time.perf_counter()
        timing = {"time/generation": t1 - t0, "time/scoring": t2 - t1}
        if self.policy.grammar is not None:      # how hard the grammar sampler had to steer this step
            st = self.policy.decode_stats
            timing["decoding/rejected_share"] = rejected_share(st)
            timing["decoding/steered_share"] = steered_share(st)
            timing["decoding/dead_ends"] = float(st.get("dead_ends", 0))
            timing["decoding/forced_late"] = float(st.get("forced_late", 0))     # answers cut at the cap
            # answers under a node limit finished while a completion still fitted their nodes
            timing["decoding/forced_nodes"] = float(st.get("forced_nodes", 0))
            # answers lacking a requirement finished while a witness still fitted under the depth limit
            timing["decoding/forced_depth"] = float(st.get("forced_depth", 0))
            # answers whose brief requirement the decoder's completion wrote (the model had not)
            timing["decoding/forced_lacking"] = float(st.get("forced_lacking", 0))
            for check in CHECKS:         # ... and of those, the answers that lacked this check's requirement
                timing[f"decoding/forced_lacking_{check}"] = float(st.get(f"forced_lacking_{check}", 0))
            st.clear()
        rounds = replaced = 0
        if self.cfg.refill.enabled:
            for r in range(self.cfg.refill.max_rounds):
                flat = [i for i, g in enumerate(scored)
                        if np.std([combined(s.channels, self.env.priorities) for s in g]) < 1e-12]
                if not flat:
                    break
                rounds += 1
                replaced += len(flat)
                new_briefs = self._draw(step, len(flat), 10 + 2 * r)
                t1 = time.perf_counter()
                new_answers, new_traces = self._sample(new_briefs, step, 11 + 2 * r)
                t2 = time.perf_counter()
                for i, b, a, tr in zip(flat, new_briefs, new_answers, new_traces):
                    briefs[i], answers[i], scored[i], traces[i] = b, a, self.env.score(a, b), tr
                timing["time/generation"] += t2 - t1
                timing["time/scoring"] += time.perf_counter() - t2
        timing.update({"refill/rounds": float(rounds), "refill/groups_replaced": float(replaced)})
        if hasattr(self.env, "step_channels"):       # channels over the whole step (R13), before advantages
            t3 = time.perf_counter()
            self.env.step_channels(scored)
            timing["time/scoring"] += time.perf_counter() - t3
        if hasattr(self.env, "step_metrics"):        # the verifier's card cache: how much scoring it saved
            timing.update(self.env.step_metrics())
        t3 = time.perf_counter()
        self.env.commit([s for g in scored for s in g])
        timing["time/scoring"] += time.perf_counter() - t3
        return briefs, answers, scored, timing, traces

    # --- 3. advantages ------------------------------------------------------------------------------------------
    def advantages(self, scored: Sequence[Sequence[Scored]]) -> np.ndarray:
        out = []
        for g in scored:
            names = list(g[0].channels)
            chans = {c: [s.channels[c] for s in g] for c in names}
            out.append(group_advantages(chans, self.env.priorities, np.array([s.valid for s in g]),
                                        np.array([s.core for s in g]), self.floor, self.cfg.advantage,
                                        self.cfg.min_compliance, self.cfg.off_brief))
        return np.concatenate(out)

    # --- 4-5. the update ----------------------------------------------------------------------------------------
    def _forward(self, briefs: list[str], answers: list[str], adapter: bool, grad: bool, entropy: bool,
                 traces: Sequence[Trace | None] | None = None
                 ) -> list[Forward]:
        mb = self.cfg.micro_batch
        return [self.policy.answer_forward(briefs[i:i + mb], answers[i:i + mb], adapter=adapter, grad=grad,
                                           entropy=entropy, traces=None if traces is None else traces[i:i + mb])
                for i in range(0, len(briefs), mb)]

    def update(self, briefs: list[str], answers: list[str], adv: np.ndarray,
               traces: Sequence[Trace | None] | None = None) -> dict[str, float]:
        """The policy update on a step's answers; `traces` (constrained decoding): every log-probability,
        the reference's included, is that of the distribution the decoder drew from (`policy.scoring.restrict`)."""
        cfg = self.cfg
        mb = cfg.micro_batch
        t0 = time.perf_counter()
        ref = [f.logp for f in self._forward(briefs, answers, adapter=False, grad=False, entropy=False,
                                             traces=traces)]
        t1 = time.perf_counter()
        adv_t = torch.tensor(adv, dtype=torch.float32, device=self.policy.device)
        n_tokens = 0.0
        old: list[torch.Tensor] = []
        stats: dict[str, list[float]] = {}
        zeta = self.zeta.zeta if cfg.repo.enabled else 0.0
        clip_high = self.clip_high.value if cfg.adapo.enabled else cfg.epsilon_high
        entropies: list[float] = []
        for it in range(cfg.updates_per_batch):
            self.policy.model.train()
            self.opt.zero_grad(set_to_none=True)
            for k, i in enumerate(range(0, len(briefs), mb)):
                lp, ent, mask, own, forced = self.policy.answer_forward(
                    briefs[i:i + mb], answers[i:i + mb], grad=True, entropy=True,
                    traces=None if traces is None else traces[i:i + mb])
                assert ent is not None
                if it == 0:
                    old.append(lp.detach())
                    entropies.append(float((ent * mask).sum()))
                    n_tokens += float(mask.sum())
                a = adv_t[i:i + mb]
                a_tok = repo_r(a, lp, zeta) if zeta > 0 else a[:, None].expand_as(lp)
                keep = top_entropy_mask(ent, mask, cfg.top_entropy_share) \
                    if cfg.token_selection == "top_entropy" else mask
                out = policy_loss(cfg.loss, lp, old[k], ref[k], a_tok, keep, cfg.beta, cfg.epsilon, clip_high,
                                  cfg.cispo_max)
                # the decoder distilled into the policy: what it forced, as a supervised term
                distill = forced_nll(own, forced, cfg.forced_weight)
                # micro-batches weigh by their share of the batch, so the sum is the batch loss
                ((out.loss + distill) * (len(a) / len(briefs))).backward()
                for name, v in [("policy_loss", out.policy_loss), ("kl", out.kl), *out.clip_ratio.items(),
                                ("distill/forced_nll", float(distill.detach()))]:
                    stats.setdefault(name, []).append(v * len(a) / len(briefs))
                if it == 0:
                    stats.setdefault("forced_tokens", []).append(float(forced.sum()))
                stats.setdefault("tokens_kept", []).append(float(keep.sum()))
            grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm))
            self.opt.step()
            stats.setdefault("grad_norm", []).append(grad_norm)
        self.policy.model.eval()
        t2 = time.perf_counter()
        passes = cfg.updates_per_batch
        entropy = sum(entropies) / max(n_tokens, 1)
        metrics = {k: float(np.sum(v)) / passes for k, v in stats.items() if k != "grad_norm"}
        metrics.update({"grad_norm": float(np.mean(stats["grad_norm"])), "entropy": entropy,
                        "repo/zeta": zeta, "clip_high": clip_high,
                        "time/reference": t1 - t0, "time/update": t2 - t1,
                        "learning_rate": float(self.opt.param_groups[0]["lr"])})
        metrics["frac_tokens_kept"] = metrics.pop("tokens_kept") / max(n_tokens, 1)
        # the share of the answers' tokens the decoder forced (0 under the grammar's rare closings)
        forced_n = float(np.sum(stats.get("forced_tokens", [0.0])))
        metrics.pop("forced_tokens", None)
        metrics["distill/forced_share"] = forced_n / max(n_tokens + forced_n, 1)
        self.zeta.update(entropy)
        self.clip_high.update(entropy)
        return metrics

    # --- one step ---------------------------------------------------------------------------------------------
    def train_step(self, step: int) -> dict[str, float]:
        torch.manual_seed(step_seed(self.seed, step, 2))          # adapter dropout
        t0 = time.perf_counter()
        briefs, answers, scored, timing, traces = self.rollout(step)
        adv = self.advantages(scored)
        flat_b = [b["text"] for b, g in zip(briefs, answers) for _ in g]
        flat_a = [a for g in answers for a in g]
        flat_s = [s for g in scored for s in g]
        flat_t = [t for g in traces for t in g]
        upd = self.update(flat_b, flat_a, adv, flat_t if any(t is not None for t in flat_t) else None)
        rewards = np.array([combined(s.channels, self.env.priorities) for s in flat_s])
        group_std = [float(np.std([combined(s.channels, self.env.priorities) for s in g])) for g in scored]
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
        steps, every = self.cfg.steps, self.cfg.checkpoint_every
        bar = progress(range(self.step, steps))
        for step in bar:
            m = self.train_step(step)
            self.step = step + 1
            self.history.append({"step": self.step, **m})
            self.log(m, self.step)
            if hasattr(bar, "set_postfix"):
                bar.set_postfix(reward=f"{m['reward']:.2f}", core=f"{m['core_score/mean']:.2f}",
                                invalid=f"{m['frac_invalid']:.2f}")
            if self.work is not None and (self.step % every == 0 or self.step == steps):
                self.save_checkpoint(self.work / f"checkpoint-{self.step:06d}")
        return self.history

    # --- checkpoints ----------------------------------------------------------------------------------------------
    def save_checkpoint(self, path: Path) -> Path:
        """Adapter (Hugging Face / peft folder), optimizer, controllers, archive, the log so far and the recipe
        it was trained under, then a manifest of the files' sha256; written to a temporary folder and renamed,
        so a kill mid-write leaves no half checkpoint, and a file changed on disk later is caught on load."""
        tmp = path.with_name(path.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        self.policy.save(tmp, {"step": self.step, "config_hash": self.hash})
        torch.save({"step": self.step, "optimizer": self.opt.state_dict(), "zeta": self.zeta.state(),
                    "clip_high": self.clip_high.state(), "config_hash": self.hash, "history": self.history,
                    "recipe": to_builtin(self.cfg), "seed": self.seed, "context": self.context}, tmp / STATE)
        self.env.save(tmp)
        write_manifest(tmp)
        shutil.rmtree(path, ignore_errors=True)
        tmp.replace(path)
        return path

    def read_checkpoint(self, path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """(trainer state, adapter weights) of a checkpoint this run may continue, read without changing the
        trainer. A file missing, cut short or garbled is an ArtifactError naming it; a checkpoint of another
        base model, recipe or seed, or one past this recipe's `steps`, is a ResumeError naming both values."""
        path = Path(path)
        missing = [f for f in (*CHECKPOINT_FILES, MANIFEST) if not (path / f).is_file()]
        if missing:
            raise ArtifactError(path, f"incomplete RL checkpoint: {', '.join(missing)} missing", rule="missing_file")
        verify_manifest(path, what=f"RL checkpoint {path.name}")
        meta = read_json(path / META, keys=("base",), what="checkpoint metadata")
        state = read_torch(path / STATE, keys=("step", "optimizer", "zeta", "clip_high", "config_hash", "history"),
                           what="trainer state")
        afresh = (f"to start afresh, remove the work folder {path.parent}" if self.work is not None
                  else "start from another folder")
        base = base_fingerprint(self.policy.model)
        if meta["base"] != base:
            raise ResumeError(f"{path} holds an adapter for another base model (fingerprint {meta['base']}, "
                              f"this policy's base {base}); {afresh}")
        if state["config_hash"] != self.hash:
            raise ResumeError(f"{path} was written by another recipe or seed: {self._differences(state)}; "
                              f"{afresh}, or resume under the recipe it was written with")
        steps = self.cfg.steps
        if int(state["step"]) > steps:
            raise ResumeError(f"{path} has done {int(state['step'])} steps, more than this recipe's steps={steps}: "
                              f"a shorter run cannot continue a longer one; {afresh}, or set "
                              f"rl.recipe.steps >= {int(state['step'])}")
        weights = read_safetensors(path / "adapter_model.safetensors", what="adapter weights")
        return state, weights

    def _differences(self, state: Mapping[str, Any]) -> str:
        """The recipe keys (and seed) on which a checkpoint's run and this one differ, with both values."""
        theirs, ours = state.get("recipe"), to_builtin(self.cfg)
        if not isinstance(theirs, dict):
            return f"config {state['config_hash']} there, {self.hash} here"
        diffs = [f"{k}={theirs.get(k)!r} there, {ours.get(k)!r} here" for k in sorted(set(theirs) | set(ours))
                 if k not in RESUMABLE_KEYS and theirs.get(k) != ours.get(k)]
        if state.get("seed") != self.seed:
            diffs.append(f"seed={state.get('seed')!r} there, {self.seed!r} here")
        there, here = _flat(state.get("context") or {}), _flat(self.context)
        diffs += [f"{k}={there.get(k)!r} there, {here.get(k)!r} here" for k in sorted(set(there) | set(here))
                  if there.get(k) != here.get(k)]
        return "; ".join(diffs) or f"config {state['config_hash']} there, {self.hash} here"

    def load_checkpoint(self, path: Path) -> None:
        """Continue from a checkpoint (`read_checkpoint` says which it may be). Everything is read and checked
        before anything of the trainer changes, so a checkpoint that fails leaves the trainer as it was."""
        state, weights = self.read_checkpoint(path)
        self.env.load(path)                        # reads, then replaces the archive: fails before changing it
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.policy.model, weights)
        self.opt.load_state_dict(state["optimizer"])
        self.zeta = ZetaThermostat.from_state(state["zeta"])
        self.clip_high = AdaptiveClip.from_state(state["clip_high"])
        # steps as ints, also in a history saved when they were stored as floats (the log is rewritten from it)
        self.step = int(state["step"])
        self.history = [{**h, "step": int(h["step"])} for h in state["history"]]

    def resume(self) -> tuple[Path | None, list[tuple[Path, str]]]:
        """Continue from the newest usable checkpoint in `work`: (its folder or None, [(skipped folder,
        why)]). A checkpoint that is incomplete, cut short or garbled is skipped and removed, and the next
        older one tried; one that is complete but not this run's (`ResumeError`) stops the run, since
        continuing or discarding it would silently mix or lose another run's work."""
        if self.work is None or not self.work.is_dir():
            return None, []
        for tmp in self.work.glob("checkpoint-*.tmp"):       # a save killed mid-write
            shutil.rmtree(tmp, ignore_errors=True)
        skipped: list[tuple[Path, str]] = []
        for ckpt in reversed(checkpoint_folders(self.work)):
            try:
                self.load_checkpoint(ckpt)
                return ckpt, skipped
            except ArtifactError as exc:
                skipped.append((ckpt, str(exc)))
                shutil.rmtree(ckpt)
        return None, skipped


def _flat(tree: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, Mapping) and v:
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def checkpoint_folders(work: Path) -> list[Path]:
    """A work folder's finished checkpoint folders, oldest first."""
    return sorted(p for p in Path(work).glob("checkpoint-*") if p.is_dir() and not p.name.endswith(".tmp"))


def latest_checkpoint(work: Path) -> Path | None:
    done = checkpoint_folders(work)
    return done[-1] if done else None
