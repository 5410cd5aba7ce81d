"""The sampling loop (`policy.decode`): `LlamaDecoder` reproduces the model's forward, the loop's draws
follow the model's distribution, greedy answers equal `transformers`' `generate`, finished rows leave the
batch, and the same seed gives the same answers."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from alphagym.dsl.prefix import PrefixChecker
from alphagym.policy import decode
from alphagym.policy.decode import LlamaDecoder, gumbel_keys, sample
from alphagym.policy.model import Policy, build_policy
from cfg_helpers import policy_cfg

BRIEFS = ["Design an alpha.", "Write a reversal alpha on volume with a short window."]


def _policy(max_new_tokens: int = 32):
    cfg = {"threads": 1, "max_new_tokens": max_new_tokens, "micro_batch": 16, "adapter": {},
           "tiny": {"vocab_size": 400, "hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 4,
                    "kv_heads": 2, "max_positions": 256, "adapter": "none"}}
    texts = ["<alpha>rank(ts_std(volume, 21) / ts_mean(volume, 21))</alpha>",
             "<alpha>rank(-ts_delta(close, 5))</alpha>"]
    return build_policy("tiny", policy_cfg(cfg), [*BRIEFS * 10, *texts * 20], seed=0)


SHAPES = {  # the tiny policy's shape, and SmolLM2's ratios (3 query heads a key head, rope_theta 1e5), small
    "tiny": dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    "smollm2-like": dict(hidden_size=48, intermediate_size=128, num_hidden_layers=3, num_attention_heads=6,
                         num_key_value_heads=2, rope_theta=100000.0),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_llama_decoder_gives_the_models_logits(shape):
    """Left-padded prompts of different lengths, then 12 tokens, rows dropped on the way: the decoder's
    logits equal the model's forward over its own cache at every step."""
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=97, tie_word_embeddings=True, **SHAPES[shape])).eval()
    assert LlamaDecoder.supports(model)
    ids = torch.randint(1, 97, (5, 9))
    att = torch.ones_like(ids)
    att[1, :3] = 0
    att[3, :6] = 0
    pos = (att.cumsum(-1) - 1).masked_fill(att == 0, 0)
    with torch.no_grad():
        ref_out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=1)
        ours_out = model(input_ids=ids, attention_mask=att, position_ids=pos, use_cache=True, logits_to_keep=1)
        ref, ours = decode._ModelStepper(model), LlamaDecoder(model)
        ref.start(ref_out.cache, att, 12)
        ours.start(ours_out.cache, att, 12)
        positions = att.sum(-1)
        rows = torch.arange(5)
        for t in range(12):
            if t == 4:                                         # rows 0 and 3 finish
                keep = torch.tensor([1, 2, 4])
                ref.keep(keep)
                ours.keep(keep)
                rows, positions = rows[keep], positions[keep]
            tokens = torch.randint(1, 97, (len(rows),))
            a, b = ref.step(tokens, positions), ours.step(tokens, positions)
            torch.testing.assert_close(b, a, atol=2e-5, rtol=2e-5)
            positions = positions + 1
    # what it does not reproduce takes the model's forward
    assert not LlamaDecoder.supports(torch.nn.Linear(2, 2))


def test_greedy_answers_equal_transformers_generate():
    """Greedy decoding is deterministic, so the loop (with either forward) must write exactly what
    `generate` writes."""
    pol = _policy(24)
    enc = pol.tokenizer([pol.prompt(b) for b in BRIEFS], return_tensors="pt", padding=True,
                        add_special_tokens=False)
    with torch.no_grad():
        ids = pol.model.generate(**enc, max_new_tokens=24, do_sample=False, pad_token_id=pol.tokenizer.pad_token_id,
                                 eos_token_id=pol.tokenizer.eos_token_id)
    theirs = pol.tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
    for stepper in ("auto", "model"):
        Policy.stepper = stepper
        try:
            ours = [a[0] for a in pol.generate(BRIEFS, n=1, temperature=0.0)]
        finally:
            Policy.stepper = "auto"
        assert ours == theirs, stepper


def test_draws_follow_the_models_distribution():
    """The first token of 20,000 answers drawn in one batch by the loop, against softmax(logits / T) of 30
    logits: total variation under 0.04 (its sampling noise here is about 0.015), for T = 1 and T = 0.7, and
    far from the distribution at another temperature (the check can fail)."""
    logits = torch.randn(30, generator=torch.Generator().manual_seed(0)) * 1.5
    n = 20000
    att = torch.ones((n, 1), dtype=torch.long)
    tv = {}
    for temperature in (1.0, 0.7):
        rows = sample(None, lambda: (logits.repeat(n, 1), None), att, 1, eos=-1, temperature=temperature,
                      generator=torch.Generator().manual_seed(1), stepper="model")
        freq = np.bincount([r[0] for r in rows], minlength=30) / n
        for t in (1.0, 0.7):
            tv[temperature, t] = 0.5 * np.abs(freq - torch.softmax(logits / t, -1).numpy()).sum()
    assert tv[1.0, 1.0] < 0.04 and tv[0.7, 0.7] < 0.04, tv
    assert tv[1.0, 0.7] > 0.08 and tv[0.7, 1.0] > 0.08, tv
    g = torch.Generator().manual_seed(0)
    assert torch.equal(gumbel_keys(logits, 0.0, g), logits.float())      # greedy: the logits themselves


def test_gumbel_noise_is_drawn_on_the_cpu_and_follows_the_logits_device():
    """The noise comes from the seeded CPU generator whatever device holds the logits (a GPU's, here the
    `meta` device, which mixes with a CPU tensor no more than CUDA does), and is the same noise: keys minus
    logits / T equal -log(-log u) of the generator's uniforms."""
    logits = torch.randn(3, 7, generator=torch.Generator().manual_seed(0))
    keys = gumbel_keys(logits.to("meta"), 0.7, torch.Generator().manual_seed(5))
    assert keys.device.type == "meta" and keys.shape == logits.shape
    u = torch.rand(logits.shape, generator=torch.Generator().manual_seed(5)).clamp_(min=1e-12)
    torch.testing.assert_close(gumbel_keys(logits, 0.7, torch.Generator().manual_seed(5)) - logits / 0.7,
                               -torch.log(-torch.log(u)))


def test_finished_rows_leave_the_batch(monkeypatch):
    """Every step runs only the rows still writing, and the answers are the same seeded ones whichever
    forward runs them."""
    pol = _policy(40)
    pol.grammar = PrefixChecker()
    batches = []
    step = decode.LlamaDecoder.step

    def spy(self, tokens, positions):
        batches.append(len(tokens))
        return step(self, tokens, positions)

    monkeypatch.setattr(decode.LlamaDecoder, "step", spy)
    answers = pol.generate(BRIEFS, n=8, temperature=1.0, seed=2)
    assert batches[0] == 16 and batches == sorted(batches, reverse=True) and batches[-1] < 16
    assert answers == pol.generate(BRIEFS, n=8, temperature=1.0, seed=2)          # seeded
    Policy.stepper = "model"
    try:
        assert answers == pol.generate(BRIEFS, n=8, temperature=1.0, seed=2)
    finally:
        Policy.stepper = "auto"
    assert answers != pol.generate(BRIEFS, n=8, temperature=1.0, seed=3)
    state = torch.get_rng_state()
    pol.generate(BRIEFS, n=2, temperature=1.0, seed=4)
    assert torch.equal(state, torch.get_rng_state())          # the process's global random state is untouched
