"""What the train and probe stages both need of a rung besides its recipe (`alphagym.rungs.resolve_rung`):
its thread budget applied, the SFT policy it starts from, and its checkpoints read back as policies.

A rung trains an adapter on top of its SFT policy (with an SFT adapter merged in, as `build_trainer` does),
so a checkpoint is that adapter alone: it is loaded onto the SFT policy rebuilt the same way. Step 0 is the
SFT policy itself: a fresh LoRA or DoRA adapter is the identity, so the untrained rung is the SFT policy.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numba
import torch
from safetensors import SafetensorError

from alphagym.artifacts import MANIFEST, read_json, verify_manifest
from alphagym.errors import ArtifactError, PolicyError
from alphagym.params import Decoding, RlRecipe
from alphagym.params import Limits as LimitsParams
from alphagym.params import Policy as PolicyParams
from alphagym.policy.backends import base_fingerprint
from alphagym.policy.model import META, Policy, load_policy, set_decoding

CHECKPOINT = re.compile(r"^checkpoint-(\d{6})$")
# what a checkpoint the probe reads must hold (`Trainer.save_checkpoint` writes these and more); a folder
# without one of them is incomplete
REQUIRED = ("adapter_config.json", "adapter_model.safetensors", META, MANIFEST)


def set_threads(recipe: RlRecipe) -> None:
    """The recipe's thread budget: torch for sampling and updates, numba for scoring."""
    torch.set_num_threads(recipe.torch_threads)
    numba.set_num_threads(min(recipe.numba_threads, numba.config.NUMBA_NUM_THREADS))


def sft_base(sft_policy: Path, cfg: PolicyParams, limits: LimitsParams, tolerance: float,
             decoding: Decoding | None = None) -> Policy:
    """The policy every rung starts from: the SFT policy with its adapter (if any) merged, so the merged SFT
    policy is the reference and a rung trains a fresh adapter on it; decoding as `decoding` (a rung's
    `recipe.decoding`) or else `policy.decoding` says, within the verifier's `dsl.limits` (`tolerance`:
    `briefs.horizon_tolerance`, for `decoding: brief`)."""
    policy = load_policy(sft_policy, cfg.hf.nf4)
    if policy.has_adapter:
        policy.model = policy.model.merge_and_unload()
    policy.model.eval()
    return set_decoding(policy, cfg.decoding if decoding is None else decoding, limits, tolerance, cfg.witness_variants)


def list_checkpoints(folder: Path) -> list[tuple[int, Path]]:
    """(step, folder) of every checkpoint in a rung's checkpoint folder, by step. A checkpoint folder that
    lacks a file the trainer writes, or a stray folder, is a PolicyError naming it."""
    folder = Path(folder)
    if not folder.is_dir():
        raise PolicyError(f"{folder} is not a checkpoint folder (run `alphagym train` first)")
    out = []
    for p in sorted(folder.iterdir()):
        if p.name.startswith("."):        # tools' markers (Snakemake's .snakemake_timestamp in a directory output)
            continue
        m = CHECKPOINT.match(p.name)
        if not m or not p.is_dir():
            raise PolicyError(f"{p}: not a checkpoint (expected folders named checkpoint-NNNNNN)")
        missing = [f for f in REQUIRED if not (p / f).is_file()]
        if missing:
            raise PolicyError(f"{p} is an incomplete checkpoint: {', '.join(missing)} missing")
        out.append((int(m.group(1)), p))
    if not out:
        raise PolicyError(f"{folder} holds no checkpoint")
    return out


def at_checkpoint(base: Policy, checkpoint: Path | None) -> Policy:
    """A copy of `base` with the checkpoint's adapter on it (`None`: the base itself, step 0)."""
    if checkpoint is None:
        return base
    try:
        verify_manifest(checkpoint, what=f"checkpoint {checkpoint.name}")
        meta = read_json(checkpoint / META, keys=("base",), what="checkpoint metadata")
    except ArtifactError as exc:
        raise PolicyError(f"checkpoint {checkpoint} cannot be used: {exc}") from None
    if meta.get("base") != base_fingerprint(base.model):
        raise PolicyError(f"{checkpoint} holds an adapter for another base model (fingerprint {meta.get('base')}, "
                          f"the SFT policy's {base_fingerprint(base.model)})")
    from peft import PeftModel

    try:
        model = PeftModel.from_pretrained(copy.deepcopy(base.model), checkpoint)
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
        raise PolicyError(f"cannot load the adapter in {checkpoint}: {type(exc).__name__}: {exc}") from None
    model.eval()
    return Policy(model, base.tokenizer, base.backend, base.max_new_tokens, base.system_prompt, base.micro_batch,
                  base.grammar, contracts=base.contracts, base_model=base.base_model)
