"""The policy's sampling side: chat prompts and seeded answers (`Sampling.generate`), through the own sampling
loop (`policy/decode.py`), the grammar sampler when set, each repeated prompt run once, and a merged copy of
the adapter to sample from. A mixin of `Policy` (`policy/model.py`), which holds the model and tokenizer."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from alphagym.errors import PolicyError
from alphagym.policy.decode import sample
from alphagym.policy.grammar import GrammarSampler, Trace


class Sampling:
    # --- prompts ---
    def prompt(self, brief: str) -> str:
        msgs = [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": brief}]
        if self.tokenizer.chat_template:
            return self.tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        return f"{self.system_prompt}\n\n{brief}\n\nAnswer: "

    # --- sampling ---
    @torch.no_grad()
    def generate(self, briefs: Sequence[str | Mapping[str, Any]], n: int = 1, temperature: float = 1.0, seed: int = 0,
                 progress: Callable[[Iterable[int]], Iterable[int]] | None = None,
                 trace: bool = False) -> list[list[str]]:
        """`n` answers per brief. temperature 0 is greedy. Same seed, same answers: each micro-batch draws
        its noise from a generator seeded from `seed` (`decode.sample`), whatever the machine's thread
        count, and the process's global random state is left alone. `progress` wraps the micro-batches
        (e.g. a tqdm bar). `trace` (constrained decoding): `last_traces` holds each answer's `Trace`, in
        the same nesting, for the log-probabilities of the restricted distribution (`answer_forward`). A brief
        is a brief record (its `text` is the prompt; under `decoding: brief` its fields are the contract, as
        drawn) or a bare text (the grammar alone)."""
        texts = [b if isinstance(b, str) else b.get("text") for b in briefs]
        for i, t in enumerate(texts):
            if not isinstance(t, str) or not t.strip():
                raise PolicyError(f"empty brief at position {i}")
        prompts = [self.prompt(t) for t in texts for _ in range(n)]
        # each prompt's own checker under `decoding: brief`, compiled before any sampling (an unsatisfiable
        # catalogue brief is refused up front)
        checkers = [self.contracts.checker(b) for b in briefs for _ in range(n)] if self.contracts is not None else None
        out: list[str] = []
        traces: list[Trace | None] = []
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
                sampler = GrammarSampler(self.tokenizer, self.grammar, self.max_new_tokens,
                                         rows=checkers[i:i + self.micro_batch] if checkers else None,
                                         trace=trace)
            rows = sample(model, lambda chunk=chunk, enc=enc: self._prefill(model, chunk, enc), enc["attention_mask"],
                          self.max_new_tokens, self.tokenizer.eos_token_id, temperature, noise, sampler,
                          stepper=self.stepper)
            if sampler is not None:
                for k, v in sampler.stats.items():     # counts add up; a `_max` is the most of any micro-batch
                    old = self.decode_stats.get(k, 0)
                    self.decode_stats[k] = max(old, v) if k.endswith("_max") else old + v
            out += self.tokenizer.batch_decode(rows, skip_special_tokens=True)
            traces += [sampler.trace(b, row) if sampler is not None and trace else None for b, row in enumerate(rows)]
        self.last_traces = [traces[k * n:(k + 1) * n] for k in range(len(briefs))]
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
