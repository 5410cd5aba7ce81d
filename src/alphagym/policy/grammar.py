"""Grammar-constrained decoding (`policy.decoding: grammar`): the policy samples only tokens that keep the
answer a viable prefix of `<alpha>FORMULA</alpha>` (`dsl.prefix`), and may end only after a formula that
parses.

A `transformers` LogitsProcessor that samples by rejection with the Gumbel-max trick: perturb the
temperature-scaled logits with Gumbel noise once per step and take the candidates in the order of the
perturbed logits, keeping the first whose answer stays viable. The first candidate is a draw from the
model's distribution; the first viable one is an exact draw from that distribution restricted to viable
tokens and renormalised (Gumbel top-k is sampling without replacement). It costs one parse per candidate
tried instead of one per vocabulary entry (a 49k-token vocabulary makes masking every token per step far
too slow on a CPU). Greedy decoding is the same walk without noise. After `scan` rejected candidates the
answer ends (it will score as invalid; `dead_ends` counts it). The processor returns logits with one finite
entry, so `generate`'s own sampler picks that token.

Used for RL rollouts too, the trainer's log-probabilities are the unconstrained model's: the behaviour
policy is the model restricted to viable tokens, and the loss raises the model's own probability of the
tokens that earned advantage (the same practice as guided decoding in served RL rollouts).
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, PreTrainedTokenizerBase

from alphagym.dsl.prefix import PrefixChecker


class GrammarSampler(LogitsProcessor):
    def __init__(self, tokenizer: PreTrainedTokenizerBase, checker: PrefixChecker, prompt_len: int,
                 temperature: float, scan: int = 256) -> None:
        self.checker, self.start, self.temperature = checker, prompt_len, temperature
        self.tokenizer, self.eos, self.scan = tokenizer, tokenizer.eos_token_id, scan
        self.stats = {"draws": 0, "rejections": 0, "dead_ends": 0}

    def _text(self, ids: list[int]) -> str:
        # decoded as `Policy.generate` decodes the answer: a token's text can depend on its neighbours
        # (sentencepiece's leading-space marker), so the row is decoded whole, never piece by piece
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _ok(self, row: list[int], tok: int) -> bool:
        if tok == self.eos:
            return self.checker.state(self._text(row)) == "done"
        return self.checker.state(self._text([*row, tok])) != "dead"

    def choose(self, row: list[int], logits: torch.Tensor) -> int:
        keys = logits.float()
        if self.temperature > 0:
            u = torch.rand(keys.shape).clamp_(min=1e-12)
            keys = keys / self.temperature - torch.log(-torch.log(u))
        first = int(torch.argmax(keys))
        self.stats["draws"] += 1
        if self._ok(row, first):
            return first
        self.stats["rejections"] += 1
        for tok in torch.topk(keys, min(self.scan, keys.numel())).indices[1:].tolist():
            if keys[tok] == float("-inf"):
                break
            if self._ok(row, tok):
                return tok
            self.stats["rejections"] += 1
        self.stats["dead_ends"] += 1
        return self.eos

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        out = torch.full_like(scores, float("-inf"))
        for b, row in enumerate(input_ids[:, self.start:].tolist()):
            if self.eos in row:                   # finished: generate pads it whatever is chosen
                out[b, self.eos] = 0.0
                continue
            out[b, self.choose(row, scores[b])] = 0.0
        return out
