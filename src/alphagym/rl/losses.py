"""Per-token policy losses (GRPO, DAPO, CISPO), the k3 KL estimate, REPO-R advantage shaping, the high-entropy token
selection and the distillation term on the tokens the brief decoder forced. Pure tensor functions;
tests/test_rl_losses.py checks values and gradients on hand-computed tensors.

Shapes: `logp`, `old_logp`, `ref_logp`, `mask`, `own`, `forced` are (batch, tokens); `adv` is (batch,) or
(batch, tokens).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOSSES = ("grpo", "dapo", "cispo")


@dataclass
class LossOut:
    loss: torch.Tensor            # what backward() is called on: policy loss + beta * KL
    policy_loss: float
    kl: float
    clip_ratio: dict[str, float]  # TRL's names: clip_ratio/low_mean, clip_ratio/high_mean, clip_ratio/region_mean
                                  # (CISPO: cispo_clip_ratio, the share of tokens whose weight was truncated)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """`token`: sum over every kept token of the batch / their count (DAPO, CISPO). `sequence`: mean over
    each answer's kept tokens, then over answers that keep any (GRPO)."""
    m = mask.to(x.dtype)
    if level == "token":
        return (x * m).sum() / m.sum().clamp(min=1.0)
    per_seq = (x * m).sum(-1) / m.sum(-1).clamp(min=1.0)
    has = (m.sum(-1) > 0).to(x.dtype)
    return (per_seq * has).sum() / has.sum().clamp(min=1.0)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref) per token: exp(ref - logp) - (ref - logp) - 1 (>= 0, 0 at
    the reference, unbiased under samples from pi)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def repo_r(adv: torch.Tensor, logp: torch.Tensor, zeta: float) -> torch.Tensor:
    """REPO-R advantage shaping per token, p = the token's probability under the current policy (detached):
    A > 0: A * (1 - zeta * log p); A < 0: A * (1 + zeta * log p), the factor clamped at >= 0 so the sign of A
    never flips. zeta = 0.05, p = 1e-3: x1.345 in a good answer, x0.655 in a bad one."""
    lp = logp.detach()
    a = adv if adv.dim() == lp.dim() else adv[:, None].expand_as(lp)
    up = a * (1.0 - zeta * lp)
    down = a * torch.clamp(1.0 + zeta * lp, min=0.0)
    return torch.where(a > 0, up, torch.where(a < 0, down, torch.zeros_like(a)))


def top_entropy_mask(entropy: torch.Tensor, mask: torch.Tensor, share: float) -> torch.Tensor:
    """Keep only the `share` highest-entropy answer tokens of the batch (at least one)."""
    ent = entropy.detach()[mask]
    if ent.numel() == 0:
        return mask
    k = max(1, int(round(share * ent.numel())))
    threshold = torch.topk(ent, k).values.min()
    return mask & (entropy.detach() >= threshold)


def policy_loss(kind: str, logp: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor, adv: torch.Tensor,
                mask: torch.Tensor, beta: float, clip_low: float, clip_high: float, cispo_max: float) -> LossOut:
    """One of:
    - grpo:  -min(r A, clip(r, 1 - clip_low, 1 + clip_low) A), mean per answer then over answers;
    - dapo:  the same with an asymmetric clip (1 - clip_low, 1 + clip_high), token-level mean over the batch;
    - cispo: -stopgrad(min(r, cispo_max)) * A * log pi, token-level mean (every token keeps a gradient; only
             its importance weight is truncated);
    plus beta * k3 KL to the reference, averaged the same way. r = exp(logp - old_logp)."""
    if kind not in LOSSES:
        raise ValueError(f"unknown loss {kind!r} (known: {', '.join(LOSSES)})")
    a = adv if adv.dim() == logp.dim() else adv[:, None].expand_as(logp)
    ratio = torch.exp(logp - old_logp.detach())
    level = "sequence" if kind == "grpo" else "token"
    m = mask.to(logp.dtype)
    n = m.sum().clamp(min=1.0)
    if kind == "cispo":
        weight = torch.clamp(ratio, max=cispo_max).detach()
        per_token = -weight * a * logp
        clip = {"cispo_clip_ratio": float(((ratio > cispo_max).to(m.dtype) * m).sum() / n)}
    else:
        high = clip_low if kind == "grpo" else clip_high
        clipped = torch.clamp(ratio, 1.0 - clip_low, 1.0 + high)
        per_token = -torch.minimum(ratio * a, clipped * a)
        low_hit = ((ratio < 1.0 - clip_low) & (a < 0)).to(m.dtype) * m
        high_hit = ((ratio > 1.0 + high) & (a > 0)).to(m.dtype) * m
        clip = {"clip_ratio/low_mean": float(low_hit.sum() / n), "clip_ratio/high_mean": float(high_hit.sum() / n),
                "clip_ratio/region_mean": float((low_hit + high_hit).sum() / n)}
    pl = masked_mean(per_token, mask, level)
    kl = masked_mean(kl_k3(logp, ref_logp.detach()), mask, level)
    loss = pl + beta * kl if beta else pl
    return LossOut(loss, float(pl.detach()), float(kl.detach()), clip)


def forced_nll(own: torch.Tensor, forced: torch.Tensor, weight: float) -> torch.Tensor:
    """The decoder distilled into the policy: weight * mean over the batch's forced tokens of -log pi(t),
    pi the plain policy (`own`: the model's own log-probability of each answer token). Under the restricted
    distribution a forced token has probability 1 and leaves the policy loss, so nothing else raises the
    policy's own probability of writing what the decoder wrote for it. A constant 0 (no gradient) when
    `weight` is 0 or no token was forced."""
    n = forced.sum()
    if weight == 0 or int(n) == 0:
        return own.new_zeros(())
    return weight * -(own * forced.to(own.dtype)).sum() / n
