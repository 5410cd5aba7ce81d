"""The policy losses, KL, REPO-R and the token selection on hand-computed tensors (values and gradients)."""

from __future__ import annotations

import math

import pytest
import torch

from alphagym.rl.losses import forced_nll, kl_k3, masked_mean, policy_loss, repo_r, top_entropy_mask


def _toy():
    # two answers, three token slots; answer 1 has two tokens (the first slot is padding)
    logp = torch.tensor([[-1.0, -2.0, -0.5], [0.0, -1.0, -3.0]], requires_grad=True)
    old = torch.tensor([[-1.0, -2.5, -0.5], [0.0, -1.0, -2.0]])
    mask = torch.tensor([[True, True, True], [False, True, True]])
    adv = torch.tensor([1.0, -2.0])
    return logp, old, mask, adv


def test_masked_means_token_vs_sequence():
    x = torch.tensor([[1.0, 2.0, 3.0], [9.0, 4.0, 6.0]])
    mask = torch.tensor([[True, True, True], [False, True, True]])
    assert float(masked_mean(x, mask, "token")) == pytest.approx((1 + 2 + 3 + 4 + 6) / 5)
    assert float(masked_mean(x, mask, "sequence")) == pytest.approx((2.0 + 5.0) / 2)


def test_grpo_value_and_gradient_by_hand():
    logp, old, mask, adv = _toy()
    out = policy_loss("grpo", logp, old, logp.detach(), adv, mask, beta=0.0, clip_low=0.2, clip_high=0.28,
                      cispo_max=1.2)
    # ratios: answer 0: [1, e^0.5=1.6487, 1]; answer 1: [-, 1, e^-1=0.3679]
    # A=+1: min(r, clip(r, .8, 1.2)) -> [1, 1.2 (clipped, no grad), 1]; answer 0 mean = -(3.2)/3
    # A=-2: -min(-2r, -2 clip(r)) = 2 max(r, clip(r)) -> [-, 2, 2*0.8=1.6 (clipped, no grad)]; mean 1.8
    expected = (-(1 + 1.2 + 1) / 3 + (2 * 1 + 2 * 0.8) / 2) / 2
    assert out.policy_loss == pytest.approx(expected, abs=1e-5)
    out.loss.backward()
    # d/dlogp of -r*A/n_i/2 with r = 1 at unclipped tokens: -A/(n_i*2)
    g = logp.grad
    assert float(g[0, 0]) == pytest.approx(-1 / 3 / 2) and float(g[0, 1]) == 0.0
    assert float(g[1, 1]) == pytest.approx(2 / 2 / 2) and float(g[1, 2]) == 0.0 and float(g[1, 0]) == 0.0
    assert out.clip_ratio["clip_ratio/high_mean"] == pytest.approx(1 / 5)
    assert out.clip_ratio["clip_ratio/low_mean"] == pytest.approx(1 / 5)


def test_dapo_asymmetric_clip_token_mean():
    logp, old, mask, adv = _toy()
    out = policy_loss("dapo", logp, old, logp.detach(), adv, mask, beta=0.0, clip_low=0.2, clip_high=0.28,
                      cispo_max=1.2)
    # upper clip 1.28 now: token (0,1) r=1.6487 -> 1.28; token-level mean over 5 tokens
    expected = (-(1 + 1.28 + 1) + 2 * 1 + 2 * 0.8) / 5
    assert out.policy_loss == pytest.approx(expected, abs=1e-5)
    out.loss.backward()
    assert float(logp.grad[0, 0]) == pytest.approx(-1 / 5) and float(logp.grad[1, 1]) == pytest.approx(2 / 5)


def test_cispo_truncates_the_weight_but_keeps_every_gradient():
    logp, old, mask, adv = _toy()
    out = policy_loss("cispo", logp, old, logp.detach(), adv, mask, beta=0.0, clip_low=0.2, clip_high=0.28,
                      cispo_max=1.2)
    w = torch.tensor([[1.0, 1.2, 1.0], [0.0, 1.0, math.exp(-1)]])   # min(r, 1.2), stop-gradient
    a = torch.tensor([[1.0] * 3, [-2.0] * 3])
    lp = logp.detach()
    expected = float(-(w * a * lp)[mask].sum() / 5)
    assert out.policy_loss == pytest.approx(expected, abs=1e-5)
    out.loss.backward()
    torch.testing.assert_close(logp.grad[mask], (-(w * a) / 5)[mask])     # the clipped token keeps its gradient
    assert out.clip_ratio == {"cispo_clip_ratio": pytest.approx(1 / 5)}


def test_kl_k3_zero_at_reference_positive_elsewhere_and_in_the_loss():
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    assert torch.all(kl_k3(lp, lp.detach()) == 0)
    d = torch.tensor([[0.5, -0.5]])
    val = kl_k3(lp, lp.detach() + d)
    torch.testing.assert_close(val, torch.exp(d) - d - 1)
    assert bool((val > 0).all())
    mask = torch.ones_like(lp, dtype=torch.bool)
    out = policy_loss("dapo", lp, lp.detach(), lp.detach() + d, torch.tensor([0.0]), mask, beta=0.08,
                      clip_low=0.2, clip_high=0.28, cispo_max=1.2)
    assert out.kl == pytest.approx(float(val.mean())) and float(out.loss) == pytest.approx(0.08 * out.kl)
    out.loss.backward()
    # d/dlogp k3 = -exp(ref - logp) + 1
    torch.testing.assert_close(lp.grad, 0.08 * (1 - torch.exp(d)) / 2)


def test_repo_r_multipliers_and_sign():
    lp = torch.full((2, 1), math.log(1e-3))
    out = repo_r(torch.tensor([1.0, -1.0]), lp, 0.05)
    assert float(out[0, 0]) == pytest.approx(1.3454, abs=1e-4)      # x1.35 in a good answer
    assert float(out[1, 0]) == pytest.approx(-0.6546, abs=1e-4)     # x0.65 in a bad one
    very_rare = repo_r(torch.tensor([-1.0]), torch.tensor([[-50.0]]), 0.05)
    assert float(very_rare[0, 0]) == 0.0                             # clamped: never flips to positive
    assert torch.all(repo_r(torch.tensor([0.0]), lp[:1], 0.05) == 0)
    torch.testing.assert_close(repo_r(torch.tensor([2.0]), lp[:1], 0.0), torch.tensor([[2.0]]))


def test_top_entropy_keeps_the_highest_share():
    ent = torch.tensor([[0.1, 0.9, 0.5, 0.0], [2.0, 0.3, 0.2, 0.7]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    keep = top_entropy_mask(ent, mask, 0.3)          # 7 tokens -> 2 kept: 2.0 and 0.9
    assert keep.sum() == 2 and bool(keep[1, 0]) and bool(keep[0, 1])
    assert not bool(keep[0, 3])                      # padding never kept


def test_unknown_loss_is_an_error():
    logp, old, mask, adv = _toy()
    with pytest.raises(ValueError, match="unknown loss 'ppo'"):
        policy_loss("ppo", logp, old, old, adv, mask, 0.0, 0.2, 0.28, 1.2)


def test_forced_tokens_receive_gradient_from_the_distillation_term_and_none_at_weight_0():
    """Two answers of three tokens; the decoder forced the second answer's last two tokens. The term is the
    weight times the mean of -log pi over those two, and only they receive gradient."""
    own = torch.log(torch.tensor([[0.5, 0.5, 0.5], [0.9, 0.2, 0.4]])).requires_grad_(True)
    forced = torch.tensor([[False, False, False], [False, True, True]])
    term = forced_nll(own, forced, 0.5)
    expected = 0.5 * -(math.log(0.2) + math.log(0.4)) / 2
    assert abs(float(term) - expected) < 1e-6
    term.backward()
    assert own.grad is not None
    torch.testing.assert_close(own.grad, torch.tensor([[0.0, 0.0, 0.0], [0.0, -0.25, -0.25]]))
    # weight 0, or nothing forced: a constant 0 that moves nothing
    for w, f in ((0.0, forced), (0.5, torch.zeros_like(forced))):
        zero = forced_nll(own, f, w)
        assert float(zero) == 0.0 and not zero.requires_grad
