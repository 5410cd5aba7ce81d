"""The policy's sampling loop: run the prompts once, then one token a step for the rows still writing.

Hand-written rather than `transformers`' `generate` because a small model on the CPU costs less per token
than `generate`'s machinery around it (per-token processors, stopping checks, the cache bookkeeping of a
general forward; BENCHMARKS.md, "sampling one default RL batch"); `torch.compile` of the forward did not help
on the CPU (the dynamic cache breaks its graph). What the loop does:

- **Draws** by the Gumbel-max trick: one uniform per vocabulary entry and row from a seeded
  `torch.Generator`, keys `logits / T - log(-log u)`, the token with the largest key. That is an exact
  draw from `softmax(logits / T)`; greedy decoding (T = 0) takes the largest logit. Under
  `policy.decoding: grammar` the `GrammarSampler` walks the same keys in order and keeps the first viable
  token: an exact draw from the distribution restricted to viable tokens.
- **Finished rows leave the batch**: an answer that wrote the end token drops out of the forward (its
  cache rows are dropped too), so one long answer does not carry the finished ones to the token cap.
- **The forward** of each token: `LlamaDecoder` for a plain `LlamaForCausalLM` on unquantised weights on
  the CPU (the merged copy `Policy.sampling_model` gives an adapter there), else the model's own forward
  over its key/value cache (a quantised base, a GPU, another architecture).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F  # noqa: N812
from transformers import LlamaForCausalLM

from alphagym.policy.grammar import GrammarSampler


def gumbel_keys(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """Keys whose largest entry per row is an exact draw from `softmax(logits / temperature)` (the
    Gumbel-max trick); the logits themselves for temperature 0 (greedy)."""
    keys = logits.float()
    if temperature <= 0:
        return keys
    # drawn on the CPU generator wherever the logits live, so a seed gives the same noise on any device
    u = torch.rand(keys.shape, generator=generator).clamp_(min=1e-12).to(keys.device)
    return keys / temperature - torch.log(-torch.log(u))


class LlamaDecoder:
    """One token a step of a plain Llama (RMSNorm, rotary positions, grouped-query attention, SiLU MLP) over
    a preallocated key/value cache, in a few tensor ops a layer: the query/key/value and gate/up
    projections are fused into one matmul each. Same logits as the model's forward up to float rounding (a
    test checks them on the tiny model and on a SmolLM2-shaped one). `supports(model)` says whether a model
    is one it reproduces exactly; anything else takes the model's own forward."""

    @staticmethod
    def supports(model: Any) -> bool:
        if type(model) is not LlamaForCausalLM:
            return False
        c = model.config
        rope = c.rope_parameters or {"rope_type": "default"}
        plain = all(p.dtype in (torch.float32, torch.float64, torch.bfloat16) and p.device.type == "cpu"
                    for p in model.parameters())
        return (plain and rope.get("rope_type", "default") == "default" and c.hidden_act == "silu"
                and not c.attention_bias and not c.mlp_bias and c.pretraining_tp == 1)

    def __init__(self, model: LlamaForCausalLM) -> None:
        c = model.config
        self.heads, self.kv_heads = c.num_attention_heads, c.num_key_value_heads
        self.head_dim = c.head_dim
        self.eps = c.rms_norm_eps
        theta = float(c.rope_parameters["rope_theta"])
        self.inv_freq = 1.0 / (theta ** (torch.arange(0, self.head_dim, 2, dtype=torch.int64).float() / self.head_dim))
        self.scale = self.head_dim ** -0.5
        self.layers = []
        for layer in model.model.layers:
            a, m = layer.self_attn, layer.mlp
            self.layers.append((layer.input_layernorm.weight, torch.cat([a.q_proj.weight, a.k_proj.weight,
                                                                         a.v_proj.weight]).T.contiguous(),
                                a.o_proj.weight.T.contiguous(), layer.post_attention_layernorm.weight,
                                torch.cat([m.gate_proj.weight, m.up_proj.weight]).T.contiguous(),
                                m.down_proj.weight.T.contiguous()))
        self.embed, self.norm = model.model.embed_tokens.weight, model.model.norm.weight
        self.head = model.lm_head.weight.T.contiguous()
        self.keys: torch.Tensor | None = None
        self.values: torch.Tensor | None = None
        self.mask: torch.Tensor | None = None
        self.length = 0

    def _rms(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        x = x.float()
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)).to(dtype)

    def start(self, cache: Any, attention_mask: torch.Tensor, room: int) -> None:
        """Take over a prefilled `DynamicCache` (batch, kv_heads, prompt, head_dim per layer) with `room`
        more positions, and the prompts' attention mask."""
        b, p = attention_mask.shape
        first = cache.layers[0].keys
        shape = (len(self.layers), b, self.kv_heads, p + room, self.head_dim)
        self.keys = first.new_zeros(shape)
        self.values = first.new_zeros(shape)
        for i, layer in enumerate(cache.layers):
            self.keys[i, :, :, :p] = layer.keys
            self.values[i, :, :, :p] = layer.values
        self.mask = torch.zeros((b, 1, 1, p + room), dtype=torch.bool)
        self.mask[:, 0, 0, :p] = attention_mask.bool()
        self.length = p

    def keep(self, rows: torch.Tensor) -> None:
        """Only these batch rows from now on."""
        assert self.keys is not None and self.values is not None and self.mask is not None
        self.keys, self.values, self.mask = self.keys[:, rows], self.values[:, rows], self.mask[rows]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Logits (batch, vocab) of the next token after `tokens` (batch,) at rotary `positions` (batch,)."""
        assert self.keys is not None and self.values is not None and self.mask is not None
        b, at = tokens.shape[0], self.length
        self.mask[:, 0, 0, at] = True
        mask = self.mask[..., :at + 1]
        freqs = positions[:, None].float() * self.inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)[:, None, None, :]
        cos, sin = emb.cos(), emb.sin()
        half = self.head_dim // 2
        x = self.embed[tokens][:, None, :]
        nq, nkv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        for i, (n1, qkv_w, o_w, n2, gu_w, d_w) in enumerate(self.layers):
            q, k, v = (self._rms(x, n1) @ qkv_w).split([nq, nkv, nkv], dim=-1)
            q = q.view(b, 1, self.heads, self.head_dim).transpose(1, 2)
            k = k.view(b, 1, self.kv_heads, self.head_dim).transpose(1, 2)
            q = q * cos + torch.cat((-q[..., half:], q[..., :half]), dim=-1) * sin
            k = k * cos + torch.cat((-k[..., half:], k[..., :half]), dim=-1) * sin
            self.keys[i, :, :, at] = k[:, :, 0]
            self.values[i, :, :, at] = v.view(b, self.kv_heads, self.head_dim)
            o = F.scaled_dot_product_attention(q, self.keys[i, :, :, :at + 1], self.values[i, :, :, :at + 1],
                                               attn_mask=mask, scale=self.scale, enable_gqa=True)
            x = x + o.transpose(1, 2).reshape(b, 1, nq) @ o_w
            g, u = (self._rms(x, n2) @ gu_w).chunk(2, dim=-1)
            x = x + (F.silu(g) * u) @ d_w
        self.length += 1
        return (self._rms(x, self.norm) @ self.head)[:, 0].float()


class _ModelStepper:
    """The same interface over the model's own forward and its key/value cache."""

    def __init__(self, model: Any) -> None:
        self.model, self.cache, self.att = model, None, None

    def start(self, cache: Any, attention_mask: torch.Tensor, room: int) -> None:
        self.cache, self.att = cache, attention_mask

    def keep(self, rows: torch.Tensor) -> None:
        assert self.att is not None
        self.cache.batch_select_indices(rows)
        self.att = self.att[rows]

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        assert self.att is not None
        self.att = torch.cat([self.att, self.att.new_ones((self.att.shape[0], 1))], dim=1)
        out = self.model(input_ids=tokens[:, None], attention_mask=self.att, position_ids=positions[:, None],
                         cache=self.cache, use_cache=True, logits_to_keep=1)
        self.cache = out.cache
        return out.logits[:, -1].float()


def sample(model: Any, prefill: Callable[[], tuple[torch.Tensor, Any]], attention_mask: torch.Tensor,
           max_new_tokens: int, eos: int, temperature: float, generator: torch.Generator,
           sampler: GrammarSampler | None = None, stepper: str = "auto") -> list[list[int]]:
    """Each row's new tokens (the end token included when written), at most `max_new_tokens`.

    `prefill()` runs the prompts (left-padded, `attention_mask`) and returns the logits of their last
    position (batch, vocab) and the model's key/value cache. `stepper`: 'auto' (`LlamaDecoder` where it
    applies), 'llama' or 'model' (the model's own forward: the reference a test compares with)."""
    logits, cache = prefill()
    use_llama = stepper == "llama" or (stepper == "auto" and LlamaDecoder.supports(model))
    step: LlamaDecoder | _ModelStepper = LlamaDecoder(model) if use_llama else _ModelStepper(model)
    step.start(cache, attention_mask, max_new_tokens)
    positions = attention_mask.sum(-1).to(torch.long)       # the prompts' own positions are 0 .. len - 1
    rows: list[int] = list(range(attention_mask.shape[0]))   # the batch rows still writing
    out: list[list[int]] = [[] for _ in rows]
    for t in range(max_new_tokens):
        keys = gumbel_keys(logits, temperature, generator)
        chosen = []
        for j, r in enumerate(rows):
            tok = sampler.pick(r, out[r], keys[j], logits[j]) if sampler is not None else int(torch.argmax(keys[j]))
            out[r].append(tok)
            chosen.append(tok)
        if t == max_new_tokens - 1:
            break
        alive = [j for j, tok in enumerate(chosen) if tok != eos]
        if not alive:
            break
        if len(alive) < len(rows):
            keep = torch.tensor(alive, dtype=torch.long)
            step.keep(keep)
            rows, positions = [rows[j] for j in alive], positions[keep]
            chosen = [chosen[j] for j in alive]
        logits = step.step(torch.tensor(chosen, dtype=torch.long, device=attention_mask.device), positions)
        positions = positions + 1
    return out

