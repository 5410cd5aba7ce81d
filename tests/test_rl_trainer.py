"""The trainer on the tiny policy: it learns a planted, easy reward ("use volume"); a killed run resumes
from its checkpoint with the same continuation; KL is 0 at the reference; bad input gets clear errors."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from alphagym.artifacts import write_manifest
from alphagym.config import load_params
from alphagym.errors import ArtifactError, ConfigError, PolicyError, ResumeError
from alphagym.params import Adapter, RlRecipe, SftRun
from alphagym.policy.backends import wrap_adapter
from alphagym.policy.model import Policy, build_policy
from alphagym.policy.sft import train_sft
from alphagym.rl.env import Scored
from alphagym.rl.trainer import Trainer, latest_checkpoint
from alphagym.rungs import change_vs_parent
from cfg_helpers import partial, policy_cfg

ROOT = Path(__file__).resolve().parents[1]
TINY = {"vocab_size": 400, "hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 4, "kv_heads": 2,
        "max_positions": 256, "adapter": "none"}
ADAPTER = {"r": 8, "alpha": 16, "dropout": 0.05, "target_modules": ["q_proj", "v_proj", "up_proj", "down_proj"]}
BRIEFS = [{"id": f"b{i}", "text": t} for i, t in enumerate([
    "Design an alpha on short-term reversal.", "Design an alpha on trading activity.",
    "Design an alpha on volatility.", "Design an alpha on price trends."])]
VOLUME = ["<alpha>rank(ts_std(volume, 21))</alpha>", "<alpha>rank(-ts_mean(volume, 5))</alpha>"]
PRICE = ["<alpha>rank(-ts_delta(close, 5))</alpha>", "<alpha>rank(ts_mean(close, 10))</alpha>",
         "<alpha>rank(ts_std(returns, 20))</alpha>", "<alpha>rank(high - low)</alpha>"]


class VolumeEnv:
    """A planted reward: +1 for an answer that uses volume; answers without the closing tag are invalid."""

    priorities: Mapping[str, float] = {"volume": 1.0, "format": 0.5}

    def score(self, answers: Sequence[str], brief: Mapping[str, Any]) -> list[Scored]:
        out = []
        for a in answers:
            valid = a.strip().startswith("<alpha>") and a.strip().endswith("</alpha>")
            vol = float(valid and "volume" in a)
            out.append(Scored(valid, {"volume": vol, "format": float(valid)}, vol, a.strip() if valid else None))
        return out

    def commit(self, scored: Sequence[Scored]) -> None:
        pass

    def save(self, folder: Path) -> None:
        (folder / "env.json").write_text("{}")

    def load(self, folder: Path) -> None:
        pass


def _sft_policy(seed: int = 0) -> Policy:
    cfg = {"threads": 1, "max_new_tokens": 24, "micro_batch": 32, "adapter": ADAPTER, "tiny": TINY}
    answers = VOLUME + PRICE * 2                       # one answer in five uses volume
    pairs_b = [b["text"] for b in BRIEFS for _ in answers]
    pairs_a = answers * len(BRIEFS)
    pol = build_policy("tiny", policy_cfg(cfg), pairs_b + pairs_a, seed=seed)
    train_sft(pol, pairs_b * 4, pairs_a * 4, partial(SftRun, {
        "eval_share": 0.05, "batch_size": 32, "epochs": 25, "lr": 1e-2, "weight_decay": 0.0, "warmup_share": 0.05,
        "max_grad_norm": 1.0, "eval_every": 1000}), seed)
    torch.manual_seed(seed)
    pol.model = wrap_adapter(pol.model, Adapter(**ADAPTER), "lora")
    return pol


@pytest.fixture(scope="module")
def sft_state() -> Policy:
    """The SFT'd tiny policy with a fresh LoRA adapter, built once; each test trains a deep copy."""
    return _sft_policy()


def _fresh(pol: Policy) -> Policy:
    return copy.deepcopy(pol)


def _recipe(**over: Any) -> RlRecipe:
    """The default recipe, small, with `over` on top: the trainer's typed config, as a rung resolves it."""
    r = load_params(ROOT / "params.yaml").rl.recipe.model_dump()
    r.update({"briefs_per_step": 4, "answers_per_brief": 8, "max_new_tokens": 24, "micro_batch": 32, "lr": 3e-3,
              "steps": 30, "checkpoint_every": 10, "advantage_floor": "off", "score_cache": 0})
    r.update(over)
    return RlRecipe.model_validate(r)


def test_learns_a_planted_reward(sft_state):
    pol = _fresh(sft_state)
    tr = Trainer(pol, VolumeEnv(), BRIEFS, _recipe(), seed=1)
    hist = tr.train()
    vol = np.array([h["rewards/volume/mean"] for h in hist])
    first, last = vol[:5].mean(), vol[-5:].mean()
    # measured on seeds 1-4: +0.13, +0.13, +0.25, +0.21 of answers use volume after 30 steps (one in five of
    # the SFT pairs did); the sampling noise of a 5-step mean difference is about 0.045
    assert last > first + 0.10, f"volume share {first:.2f} -> {last:.2f}: no learning"
    assert np.mean([h["reward"] for h in hist[-5:]]) > np.mean([h["reward"] for h in hist[:5]])
    assert hist[-1]["kl"] > 0
    for key in ("reward", "reward_std", "frac_reward_zero_std", "frac_nonzero_advantage", "frac_invalid",
                "core_score/mean", "kl", "entropy", "repo/zeta", "cispo_clip_ratio", "policy_loss", "grad_norm",
                "learning_rate", "completions/mean_length", "distinct_canonical_forms", "step_time",
                "time/generation", "time/scoring", "time/reference", "time/update", "rewards/volume/mean"):
        assert key in hist[0], key
    parts = sum(hist[-1][k] for k in ("time/generation", "time/scoring", "time/reference", "time/update"))
    assert parts <= hist[-1]["step_time"] and parts > 0.9 * hist[-1]["step_time"]


def test_kl_is_zero_at_the_reference(sft_state):
    """A fresh adapter (B = 0) is the reference policy: the first pass's KL is 0 exactly."""
    tr = Trainer(_fresh(sft_state), VolumeEnv(), BRIEFS, _recipe(steps=1, updates_per_batch=1), seed=2)
    assert tr.train()[0]["kl"] == pytest.approx(0.0, abs=1e-7)


def test_killed_run_resumes_with_the_same_continuation(sft_state, tmp_path):
    rec = _recipe(steps=6, checkpoint_every=3)
    straight = Trainer(_fresh(sft_state), VolumeEnv(), BRIEFS, rec, seed=4, work=tmp_path / "a")
    full = straight.train()
    weights = {k: v.clone() for k, v in straight.policy.model.state_dict().items() if "lora_" in k}

    first = Trainer(_fresh(sft_state), VolumeEnv(), BRIEFS, rec.model_copy(update={"steps": 3}), seed=4,
                    work=tmp_path / "b")
    first.train()                                      # "killed" after its step-3 checkpoint
    ckpt = latest_checkpoint(tmp_path / "b")
    assert ckpt is not None and ckpt.name == "checkpoint-000003"
    resumed = Trainer(_fresh(sft_state), VolumeEnv(), BRIEFS, rec, seed=4, work=tmp_path / "b")
    with pytest.raises(PolicyError, match="another recipe or seed"):
        Trainer(_fresh(sft_state), VolumeEnv(), BRIEFS, rec, seed=5).load_checkpoint(ckpt)
    resumed.load_checkpoint(ckpt)
    again = resumed.train()
    drop = ("step_time", "time/generation", "time/scoring", "time/reference", "time/update")
    assert [{k: v for k, v in h.items() if k not in drop} for h in again] == \
           [{k: v for k, v in h.items() if k not in drop} for h in full]
    for k, v in resumed.policy.model.state_dict().items():
        if "lora_" in k:
            torch.testing.assert_close(v, weights[k], rtol=0, atol=0)


def test_every_logged_step_is_an_int_before_and_after_a_resume(tmp_path, monkeypatch):
    """The train stage rewrites a resumed rung's log.jsonl from the trainer's history: its steps are ints
    (`"step": 3`, as the lines logged live), for a history this trainer saved and for one saved as floats.
    The steps themselves are stubbed: what is checked is the bookkeeping around them."""
    from alphagym.artifacts import read_torch
    from alphagym.rl.trainer import STATE

    cfg = {"threads": 1, "max_new_tokens": 24, "micro_batch": 32, "adapter": ADAPTER, "tiny": TINY}
    pol = build_policy("tiny", policy_cfg(cfg), [b["text"] for b in BRIEFS] + VOLUME + PRICE, seed=0)
    pol.model = wrap_adapter(pol.model, Adapter(**ADAPTER), "lora")
    monkeypatch.setattr(Trainer, "train_step",
                        lambda self, step: {"reward": 0.5, "core_score/mean": 0.0, "frac_invalid": 0.0})
    work = tmp_path / "work"

    def lines(history):                            # as rl/stage.py writes log.jsonl on a resume
        return [json.loads(json.dumps(h, sort_keys=True)) for h in history]

    first = Trainer(_fresh(pol), VolumeEnv(), BRIEFS, _recipe(steps=2, checkpoint_every=2), seed=3, work=work)
    assert [type(r["step"]) for r in lines(first.train())] == [int, int]
    resumed = Trainer(_fresh(pol), VolumeEnv(), BRIEFS, _recipe(steps=4, checkpoint_every=2), seed=3, work=work)
    resumed.load_checkpoint(work / "checkpoint-000002")
    assert [(r["step"], type(r["step"])) for r in lines(resumed.history)] == [(1, int), (2, int)]
    assert [(r["step"], type(r["step"])) for r in lines(resumed.train())] == [(s, int) for s in (1, 2, 3, 4)]

    # a checkpoint whose history holds float steps (as saved before): read back as ints
    ckpt = work / "checkpoint-000002"
    state = read_torch(ckpt / STATE)
    state["history"] = [{**h, "step": float(h["step"])} for h in state["history"]]
    torch.save(state, ckpt / STATE)
    write_manifest(ckpt)
    again = Trainer(_fresh(pol), VolumeEnv(), BRIEFS, _recipe(steps=4, checkpoint_every=2), seed=3, work=work)
    again.load_checkpoint(ckpt)
    assert [(r["step"], type(r["step"])) for r in lines(again.history)] == [(1, int), (2, int)]


def test_checkpoint_of_another_base_model_is_refused(sft_state, tmp_path):
    tr = Trainer(_fresh(sft_state), VolumeEnv(), BRIEFS, _recipe(steps=1, checkpoint_every=1), seed=0,
                 work=tmp_path)
    tr.train()
    ckpt = latest_checkpoint(tmp_path)
    meta = json.loads((ckpt / "alphagym_policy.json").read_text())
    (ckpt / "alphagym_policy.json").write_text(json.dumps({**meta, "base": "0123456789abcdef"}))
    with pytest.raises(ArtifactError, match="differs from its manifest"):    # changed after it was written
        Trainer(_fresh(sft_state), VolumeEnv(), BRIEFS, _recipe(steps=1), seed=0).load_checkpoint(ckpt)
    write_manifest(ckpt)                                                    # as if written so
    with pytest.raises(ResumeError, match="another base model"):
        Trainer(_fresh(sft_state), VolumeEnv(), BRIEFS, _recipe(steps=1), seed=0).load_checkpoint(ckpt)
    (ckpt / "trainer_state.pt").unlink()
    with pytest.raises(ArtifactError, match="incomplete RL checkpoint: trainer_state.pt missing"):
        tr.load_checkpoint(ckpt)


def test_nf4_policy_trains_checkpoints_and_probes_on_cpu(sft_state, tmp_path):
    """The GPU profile's path (an `hf` checkpoint in NF4 + LoRA) run on the CPU: the trainer updates the
    adapter through the 4-bit layers, and a checkpoint goes back on the base as the probe loads it."""
    pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed (make setup installs it)")
    from alphagym.config import load_params
    from alphagym.policy.backends import load_hf, unwrapped_base
    from alphagym.policy.model import load_policy, set_decoding
    from alphagym.rl.checkpoints import at_checkpoint

    unwrapped_base(sft_state.model).save_pretrained(tmp_path / "hf")
    sft_state.tokenizer.save_pretrained(tmp_path / "hf")

    def base() -> Policy:
        model, tok = load_hf(tmp_path / "hf", True)
        return Policy(model.eval(), tok, "hf", 24, micro_batch=32, base_model=str(tmp_path / "hf"))

    pol = base()
    torch.manual_seed(0)
    pol.model = wrap_adapter(pol.model, Adapter(**ADAPTER), "lora")
    before = {k: v.clone() for k, v in pol.model.state_dict().items() if "lora_A" in k}
    tr = Trainer(pol, VolumeEnv(), BRIEFS, _recipe(steps=2, checkpoint_every=1), seed=0, work=tmp_path / "w")
    hist = tr.train()
    assert all(np.isfinite(h["policy_loss"]) and h["grad_norm"] > 0 for h in hist)
    moved = [k for k, v in pol.model.state_dict().items() if "lora_A" in k and not torch.equal(v, before[k])]
    assert any(".layers.0." in k for k in moved), "no update reached the first layer's adapters"
    ckpt = latest_checkpoint(tmp_path / "w")
    ruled = set_decoding(base(), "brief", load_params().dsl.limits, 0.5)
    probed = at_checkpoint(ruled, ckpt)
    assert probed.grammar is ruled.grammar and probed.contracts is ruled.contracts   # the probe decodes as set
    for a, b in zip(probed.logprobs([b["text"] for b in BRIEFS], VOLUME * 2),
                    pol.logprobs([b["text"] for b in BRIEFS], VOLUME * 2)):
        torch.testing.assert_close(a, b)
    with pytest.raises(PolicyError, match="an RL checkpoint"):
        load_policy(ckpt, nf4=True)


def test_a_policy_without_adapter_is_refused():
    cfg = {"threads": 1, "max_new_tokens": 24, "micro_batch": 8, "adapter": ADAPTER, "tiny": TINY}
    pol = build_policy("tiny", policy_cfg(cfg), [b["text"] for b in BRIEFS] + VOLUME, seed=0)
    with pytest.raises(PolicyError, match="trains an adapter"):
        Trainer(pol, VolumeEnv(), BRIEFS, _recipe(), seed=0)


def test_bad_recipe_and_ladder_values_fail_at_load():
    base = ROOT / "params.yaml"
    with pytest.raises(ConfigError, match="rl.recipe.loss"):
        load_params(base, ["rl.recipe.loss=ppo"])
    with pytest.raises(ConfigError, match="names parent 'nowhere'"):
        load_params(base, ["rl.rungs.cispo_repo.parent=nowhere"])
    with pytest.raises(ConfigError, match="unknown recipe key 'lossy'"):
        load_params(base, ["rl.rungs.cispo_repo.set={lossy: dapo}"])
    with pytest.raises(ConfigError, match="rl.recipe.advantage_floor"):
        load_params(base, ["rl.recipe.advantage_floor=none"])
    with pytest.raises(ConfigError, match="ladder"):
        load_params(base, ["rl.ladder=[cispo_repo, nowhere]"])
    from pydantic import ValidationError

    from alphagym.params import Rl

    raw = load_params(base).rl.model_dump()
    raw["rungs"]["x-s2"] = {"parent": "sft", "set": {}}
    with pytest.raises(ValidationError, match="seed replica"):
        Rl.model_validate(raw)
    with pytest.raises(ConfigError, match="rl.seeds"):
        load_params(base, ["rl.seeds=0"])
    p = load_params(base, ["rl.rungs.cispo_repo_grammar.set={loss: dapo, repo.enabled: false}"])
    r = p.rl.recipe_of("cispo_repo_grammar")
    assert r.loss == "dapo" and r.repo.enabled is False and r.lr == p.rl.recipe.lr
    assert r.briefs == "filtered" and r.decoding is None        # the rest from its chain of parents
    # the ladder's change of each rung against its parent, derived from the recipes
    p = load_params(base)
    assert change_vs_parent(p.rl, "cispo_all") == {"loss": ("dapo", "cispo")}
    assert change_vs_parent(p.rl, "cispo_repo_dora") == {"adapter": ("lora", "dora")}
    assert change_vs_parent(p.rl, "dapo_repo_dora") == {"loss": ("cispo", "dapo")}


def test_a_rung_is_a_diff_from_its_parent():
    """A rung's `set` folds onto its parent's recipe (the whole chain, oldest first; a mapping merges into the
    inherited one), a key that repeats what a parent rung set is an error naming the rung, the key and the
    parent, and the rung's change is computed from the recipes."""
    from alphagym.rungs import describe, resolve_rung

    base = ROOT / "params.yaml"
    p = load_params(base)
    both = p.rl.recipe_of("cispo_repo_both")                # comply's R14 weight and its own R13 weight
    assert both.reward_weights == {"compliance": 1.0, "crowding": 1.0}
    punish = p.rl.recipe_of("dapo_repo_dora_onbrief_punish")     # seven rungs up: DoRA, DAPO, eligibility
    assert (punish.adapter, punish.loss, punish.min_compliance, punish.off_brief) == ("dora", "dapo", 0.6, "punish")
    assert resolve_rung(p, "cispo_repo_both").change == "reward_weights.crowding: - -> 1.0"
    assert describe({}) == "no recipe change"
    with pytest.raises(ConfigError, match=r"rung 'dapo_repo_dora'.*adapter = 'dora' repeats the value it inherits "
                                          r"from rung 'cispo_repo_dora'"):
        load_params(base, ["rl.rungs.dapo_repo_dora.set={loss: dapo, adapter: dora}"])
    with pytest.raises(ConfigError, match=r"rung 'cispo_repo_both'.*reward_weights.compliance = 1.0 repeats"):
        load_params(base, ["rl.rungs.cispo_repo_both.set={reward_weights: {compliance: 1.0, crowding: 1.0}}"])
    with pytest.raises(ConfigError, match=r"unknown recipe key 'lrr' \(did you mean 'lr'\?\)"):
        load_params(base, ["rl.rungs.cispo_repo_grammar={parent: cispo_repo, set: {lrr: 1.0}}"])
    assert describe({"lr": (2e-4, 2e-5)}) == "lr: 0.0002 -> 0.00002"      # one format for one key
    # a misspelt channel: the one sentence, not the whole recipe it sits in
    with pytest.raises(ConfigError, match=r"rung 'cispo_repo_grammar': its recipe does not validate: Value error, "
                                          r"reward_weights: no channel named \['complianc'\]") as bad:
        load_params(base, ["rl.rungs.cispo_repo_grammar={parent: cispo_repo, set: {reward_weights: {complianc: 1.0}}}"])
    assert "briefs_per_step" not in str(bad.value)
    # a rung may restate rl.recipe's own value: it pins the key against a profile's or --set's base recipe
    pinned = load_params(base, ["rl.recipe.loss=dapo"])
    assert pinned.rl.recipe_of("bench_cispo").loss == "cispo" and pinned.rl.recipe_of("dapo_all").loss == "dapo"


def test_every_benchmark_trainer_is_a_rung_in_params():
    """The companion benchmark's eight trainers are rungs of `rl.rungs` (`bench_*`), each a distinct recipe."""
    p = load_params(ROOT / "params.yaml")
    recipes = {name[len("bench_"):]: p.rl.recipe_of(name) for name in p.rl.rungs if name.startswith("bench_")}
    assert set(recipes) == {"grpo", "dapo", "dapo_refill", "gdpo", "cispo", "dapo_adapo", "dapo_repo",
                            "cispo_repo_w5"}
    assert len({json.dumps(r.model_dump(), sort_keys=True) for r in recipes.values()}) == len(recipes)
    assert recipes["dapo_refill"].refill.enabled and recipes["dapo_adapo"].adapo.enabled
    assert recipes["cispo_repo_w5"].repo.enabled and recipes["cispo_repo_w5"].repo.warmup == 5
    assert recipes["grpo"].advantage == "combined" and recipes["gdpo"].advantage == "gdpo"


def test_refill_replaces_constant_groups_and_says_so(sft_state):
    """A reward that is constant for every answer: each step refills every group, twice, and logs it."""

    class Flat(VolumeEnv):
        def score(self, answers, brief):
            return [Scored(True, {"volume": 1.0, "format": 1.0}, 1.0, a) for a in answers]

    tr = Trainer(_fresh(sft_state), Flat(), BRIEFS, _recipe(steps=1, **{"refill": {"enabled": True, "max_rounds": 2}}),
                 seed=0)
    m = tr.train()[0]
    assert m["refill/rounds"] == 2 and m["refill/groups_replaced"] == 8
    assert m["frac_reward_zero_std"] == 1.0 and m["frac_nonzero_advantage"] == 0.0
    off = Trainer(_fresh(sft_state), Flat(), BRIEFS, _recipe(steps=1), seed=0).train()[0]
    assert off["refill/rounds"] == 0


def test_floor_trap_in_the_loop(sft_state):
    """Every core score below 0 (Environment B in miniature): with the floor at 0 no answer carries signal
    in any step; with the floor off nearly all do."""

    class Losing(VolumeEnv):
        def score(self, answers, brief):
            out = super().score(answers, brief)
            for s, a in zip(out, answers):
                s.core = -2.0 + 0.1 * (len(a) % 7)            # varied, always below 0
                s.channels["cpcv"] = s.core
            return out

    Losing.priorities = {"volume": 1.0, "format": 0.5, "cpcv": 3.0}
    at_zero = Trainer(_fresh(sft_state), Losing(), BRIEFS, _recipe(steps=2, advantage_floor=0.0), seed=0).train()
    off = Trainer(_fresh(sft_state), Losing(), BRIEFS, _recipe(steps=2, advantage_floor="off"), seed=0).train()
    assert all(h["frac_nonzero_advantage"] == 0.0 for h in at_zero)
    assert all(h["frac_nonzero_advantage"] > 0.9 for h in off)
