"""The policy's scoring side: per-token log-probabilities (and entropies) of given answers, with or without
the adapter, each prompt's shared prefix and repeated prompts run once (`Scoring.answer_forward`, the one
API the SFT loss, the RL trainer and the probes use). A mixin of `Policy` (`policy/model.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from typing import Any, NamedTuple

import torch

from alphagym.policy.grammar import Trace


class Forward(NamedTuple):
    """The answer tokens' log-probabilities under the policy, each (batch, k), answers left-padded."""

    logp: torch.Tensor               # of the distribution each token was drawn from (`restrict`), 0 off `mask`
    entropy: torch.Tensor | None     # of the model's next-token distribution, 0 off `mask` (when asked)
    mask: torch.Tensor               # the drawn answer tokens (a forced token is not drawn)
    own: torch.Tensor                # the model's own log-probability of every answer token, 0 off the answer
    forced: torch.Tensor             # the tokens the decoder forced (its completion), which `mask` leaves out


def restrict(lp: torch.Tensor, logp: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
             traces: Sequence[Trace | None]) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of the distribution constrained decoding drew from, and the mask of drawn tokens.

    lp, mask: (batch, k), the model's log-probability of each answer token and where answer tokens are;
    logp: (batch, k, vocab) the model's log-softmax; target: (batch, k) the answer tokens. A drawn token t
    with refused tokens R (its trace) was drawn from the model's distribution restricted to the tokens not
    refused, renormalised: log pi_A(t) = log pi(t) - log(1 - sum_{r in R} pi(r)). A forced token (trace
    entry None) was not drawn (its probability under the sampler is 1): it leaves the mask, so it moves no
    ratio and no gradient. A row without a trace, or whose tokens are not its trace's (`answer_forward` scores
    a traced answer as the tokens it was sampled as, so only a guard), keeps the model's own
    log-probabilities. Differentiable through `logp`."""
    rows, cols, toks = [], [], []
    keep = mask.clone()
    for i, tr in enumerate(traces):
        if tr is None:
            continue
        at = mask[i].nonzero().flatten().tolist()          # the answer's columns, first token first
        n = len(tr.ids)
        if n > len(at) or target[i, at[:n]].tolist() != list(tr.ids):
            continue
        for j, refused in enumerate(tr.refused):
            if refused is None:
                keep[i, at[j]] = False
            else:
                rows += [i] * len(refused)
                cols += [at[j]] * len(refused)
                toks += list(refused)
    if rows:
        r, c, t = (torch.tensor(x, dtype=torch.long, device=lp.device) for x in (rows, cols, toks))
        gone = torch.zeros_like(lp).index_put((r, c), logp[r, c, t].exp(), accumulate=True)
        lp = lp - torch.log1p(-gone.clamp(max=1.0 - 1e-6))
    return lp.masked_fill(~keep, 0.0), keep


class Scoring:
    # --- scoring ---
    def encode_pairs(self, briefs: Sequence[str], answers: Sequence[str], traces: Sequence[Trace | None] | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
        """Left-padded prompt+answer ids, attention mask, answer mask (over the last `k` positions), k."""
        enc = self.encode_suffixes(briefs, answers, [], traces)
        assert enc is not None          # every prompt starts with the empty prefix
        return enc

    def token_logprobs(self, briefs: Sequence[str], answers: Sequence[str], adapter: bool = True,
                       grad: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probs, mask) of every answer token (and the closing end token), shape (batch, k): logits are
        computed for the last k positions only. `adapter=False` gives the base model's (the reference)."""
        f = self.answer_forward(briefs, answers, adapter=adapter, grad=grad)
        return f.logp, f.mask

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

    def encode_suffixes(self, briefs: Sequence[str], answers: Sequence[str], prefix: list[int],
                        traces: Sequence[Trace | None] | None = None
                        ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int] | None:
        """Left-padded ids, attention mask and answer mask (over the last `k` positions) of each sequence
        after the shared prefix, and k (None if a prompt does not start with exactly those ids)."""
        n = len(prefix)
        seqs, n_ans = [], []
        for i, (b, a) in enumerate(zip(briefs, answers, strict=True)):
            p = self.tokenizer(self.prompt(b), add_special_tokens=False)["input_ids"]
            if p[:n] != prefix:
                return None
            ans = self._answer_ids(a, traces[i] if traces is not None else None)
            seqs.append(p[n:] + ans)
            n_ans.append(len(ans))
        ids, att = self._pad(seqs, left=True)
        k = max(n_ans)
        ans_mask = torch.zeros((len(seqs), k), dtype=torch.bool)
        for i, m in enumerate(n_ans):
            ans_mask[i, k - m:] = True
        return ids, att, ans_mask, k

    def _answer_ids(self, answer: str, trace: Trace | None = None) -> list[int]:
        """An answer's tokens as the policy writes them: at most `max_new_tokens`, then the end token. With
        its `trace`, the tokens it was sampled as (its text tokenised again can split differently, e.g. where
        the forced completion began)."""
        eos = self.tokenizer.eos_token_id
        if trace is not None:
            return [*trace.ids] if trace.ids and trace.ids[-1] == eos else [*trace.ids, eos]
        return self.tokenizer(answer, add_special_tokens=False)["input_ids"][: self.max_new_tokens] + [eos]

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

    def _logits(self, briefs: Sequence[str], answers: Sequence[str], share_prefix: bool,
                traces: Sequence[Trace | None] | None = None
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
            out = self._grouped_logits(briefs, answers, prefix or [], traces)
            if out is not None:
                return out
        enc = self.encode_suffixes(briefs, answers, prefix, traces) if prefix else None
        if enc is None:
            ids, att, ans_mask, k = self.encode_pairs(briefs, answers, traces)
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

    def _grouped_logits(self, briefs: Sequence[str], answers: Sequence[str], prefix: list[int],
                        traces: Sequence[Trace | None] | None = None
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
        a_ids, a_att = (t.to(dev) for t in self._pad([self._answer_ids(a, traces[i] if traces is not None else None)
                                                           for i, a in enumerate(answers)], left=False))
        k, mask = a_ids.shape[1], a_att.bool()
        att = torch.cat([torch.ones((len(answers), n), dtype=p_att.dtype, device=dev), p_att[which], a_att], dim=1)
        pos = n + p_att.sum(-1)[which, None] + torch.arange(k, device=dev)[None]
        logits = self.model(input_ids=a_ids, attention_mask=att, position_ids=pos, cache=cache, use_cache=True,
                            logits_to_keep=k).logits
        pred = torch.cat([out.logits[which, -1:], logits[:, :-1]], dim=1)
        shift = k - mask.sum(-1)          # row i's answer moves right by shift[i] into the left-padded layout
        return pred, a_ids, mask, shift

    def answer_forward(self, briefs: Sequence[str], answers: Sequence[str], adapter: bool = True,
                       grad: bool = False, entropy: bool = False, share_prefix: bool = True,
                       traces: Sequence[Trace | None] | None = None
                       ) -> Forward:
        """Log-probs, entropies (or None), mask, the model's own log-probs and the forced tokens over the answer
        tokens, each (batch, k), answers left-padded (ending at the last position): `Forward`. The entropy of
        the next-token distribution at each answer position is what the RL trainer's controllers and token
        selection read; it comes from the same logits at no extra forward pass. `traces` (one per answer, from
        `generate(trace=True)`): the log-probabilities of the distribution each answer was drawn from
        (`restrict`); the tokens the decoder forced leave the mask and are marked `forced`, with their own
        log-probabilities kept in `own` (the RL trainer's distillation term, `losses.forced_nll`)."""
        ctx = nullcontext() if adapter or not self.has_adapter else self.model.disable_adapter()
        grad_ctx = nullcontext() if grad else torch.no_grad()
        with ctx, grad_ctx:
            pred, target, ans_mask, shift = self._logits(briefs, answers, share_prefix, traces)
            logp = torch.log_softmax(pred.float(), dim=-1)
            own = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1).masked_fill(~ans_mask, 0.0)
            answer = ans_mask
            lp = own
            if traces is not None:
                lp, ans_mask = restrict(own, logp, target, ans_mask, traces)
            forced = answer & ~ans_mask
            ent = None
            if entropy:
                with torch.no_grad():
                    ent = -(logp.exp() * logp).sum(-1).masked_fill(~ans_mask, 0.0)
            if shift is not None:
                k = ans_mask.shape[1]
                idx = (torch.arange(k, device=ans_mask.device)[None] - shift[:, None]) % k
                lp, ans_mask, own, forced = (x.gather(1, idx) for x in (lp, ans_mask, own, forced))
                ent = None if ent is None else ent.gather(1, idx)
        return Forward(lp, ent, ans_mask, own, forced)

    def logprobs(self, briefs: Sequence[str], answers: Sequence[str], adapter: bool = True) -> list[torch.Tensor]:
        """Per-token log-probabilities of each answer given its brief (a list of 1-D tensors)."""
        out: list[torch.Tensor] = []
        for i in range(0, len(briefs), self.micro_batch):
            lp, mask = self.token_logprobs(briefs[i:i + self.micro_batch], answers[i:i + self.micro_batch], adapter)
            out += [row[m] for row, m in zip(lp, mask)]
        return out
