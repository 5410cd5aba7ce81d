"""Grammar-constrained decoding: the viable-prefix checker (worked examples; no prefix of a valid answer is
ever refused; the parser's late checks made early so no dead end is let in), the plain printer (round trip),
and the sampler (an exact draw from the renormalised viable distribution; an untrained model's answers stay
viable; seeded)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from alphagym.dsl.alpha101 import alpha101
from alphagym.dsl.parser import Limits, parse
from alphagym.dsl.prefix import PrefixChecker
from alphagym.dsl.printer import plain
from alphagym.policy.corpus import candidates
from alphagym.policy.decode import gumbel_keys
from alphagym.policy.grammar import GrammarSampler, Trace, steered_share
from alphagym.policy.model import build_policy
from alphagym.policy.scoring import restrict
from cfg_helpers import policy_cfg

CHECK = PrefixChecker()


@pytest.mark.parametrize("text,state", [
    ("", "open"), ("<al", "open"), ("<alpha>", "open"), ("hello", "dead"), ("<alpha>ra", "open"),
    ("<alpha>rank(clo", "open"), ("<alpha>rank(close)", "open"),
    ("<alpha>rank(close)<", "open"),                         # less-than, or the closing tag's start
    ("<alpha>rank(close)</al", "open"), ("<alpha>rank(close)</alpha>", "done"),
    ("<alpha>rank(close)</alpha>x", "dead"), ("<alpha>rank(close))", "dead"), ("<alpha>rank(</alpha>", "dead"),
    ("<alpha>ts_mean(close, 2", "open"), ("<alpha>adv", "open"),
    ("<alpha>indneutralize(close, IndClass.se", "open"), ("<alpha>ts_corr(close, volume, 10) ? 1 : ", "open"),
    # what the full parse finds only at ')' is refused at the token that breaks it
    ("<alpha>ts_mean(close, 2000", "dead"),                  # window out of range
    ("<alpha>ts_mean(close, 20, ", "dead"),                  # too many arguments
    ("<alpha>ts_mean(close, rank(", "dead"),                 # a window that is not a literal
    ("<alpha>ts_mean(close, 20 +", "dead"),
    ("<alpha>foo(", "dead"), ("<alpha>fo", "dead"), ("<alpha>close(", "dead"),
    ("<alpha>ts_sum(ts_mean(close, 200), 100", "dead"),     # lookback 298 > 252
    ("<alpha>ts_sum(ts_mean(close, 200), 10", "open"),
    ("<alpha>rank(cap", "dead"),                             # a field the panel lacks
    ("<alpha>ts_mean(close)", "dead"),                       # too few arguments (refused at ')')
    ("<alpha>indneutralize(close, 35", "dead"), ("<alpha>indneutralize(close, IndClass.sec", "open"),
    ("<alpha>scale(close, rank(", "dead"), ("<alpha>scale(close, -", "open"),
    # a group anywhere but indneutralize's second argument: refused at its name, as no ')' could accept it
    ("<alpha>ts_corr(vwap, IndClass.subindustry", "dead"), ("<alpha>rank(IndClass.sector", "dead"),
    ("<alpha>indneutralize(IndClass.sector", "dead"),
    # the depth limit counts the levels the open calls, operators and ternaries will still add
    ("<alpha>" + "rank(" * 15 + "close", "open"),          # 15 calls over a field: depth 16, the limit
    ("<alpha>" + "rank(" * 15 + "close -", "dead"),        # the '-' would make it 17
    ("<alpha>" + "rank(" * 14 + "close - volume", "open"),
    ("<alpha>" + "rank(" * 14 + "adv20", "dead"),          # adv20 is ts_mean(close * volume): 3 levels
    ("<alpha>" + "rank(" * 16, "dead"),                    # a 16th call leaves no room for its argument
    ("<alpha>" + "rank(" * 14 + "close ? ", "open"), ("<alpha>" + "rank(" * 15 + "close ? ", "dead"),
    # one literal operand makes ts_corr / ts_cov constant: refused at the ',' that seals it
    ("<alpha>ts_corr(252", "open"), ("<alpha>ts_corr(252, ", "dead"), ("<alpha>ts_cov(close, 5, ", "dead"),
])
def test_prefix_states(text, state):
    assert CHECK.state(text) == state


def _valid_texts() -> list[str]:
    texts = [a.text for a in alpha101(panel_fields=frozenset({"open", "high", "low", "close", "volume", "vwap",
                                                               "returns"})) if a.usable]
    texts += candidates(150, 5, (5, 21, 63, 126), 0.4)
    out = []
    for t in texts:
        try:
            parse(t)
        except Exception:
            continue
        out.append(t)
    return out


def test_no_prefix_of_a_valid_answer_is_refused():
    """Every character prefix of `<alpha>F</alpha>` for a formula that parses is viable, the whole is done:
    the decoder can always write what the parser accepts (Alpha101 spellings and the corpus sampler's)."""
    texts = _valid_texts()
    assert len(texts) > 150
    for f in texts:
        ans = f"<alpha>{f}</alpha>"
        states = [CHECK.state(ans[:k]) for k in range(len(ans))]
        assert "dead" not in states, (f, ans[:states.index("dead")])
        assert CHECK.state(ans) == "done", f


def test_completion_finishes_every_open_prefix():
    """`completion` finishes any viable prefix of a valid answer (the closing the sampler writes when an
    answer reaches the last quarter of its budget), with a suffix much shorter than the answer."""
    for f in _valid_texts()[::12]:
        ans = f"<alpha>{f}</alpha>"
        for k in range(len(ans)):
            suffix = CHECK.completion(ans[:k])
            assert suffix is not None, ans[:k]
            assert CHECK.state(ans[:k] + suffix) == "done", (ans[:k], suffix)
    # `ts_corr(close, 5, 5)` would be undefined everywhere, which the parser refuses: the operand varies
    assert CHECK.completion("<alpha>rank(ts_corr(close") == ", 5 - returns, 5))</alpha>"
    assert CHECK.completion("<alpha>close ?") == " returns : 0</alpha>"
    assert CHECK.completion("<alpha>rank(close)</alpha>") is None          # done: nothing to add
    assert CHECK.completion("<alpha>foo(") is None                         # dead: nothing finishes it


# answers the tiny SFT policy wrote under grammar decoding, cut at its 128-token budget without a closing
# tag: each walked into a prefix the checker called viable but nothing could finish (a group inside ts_corr;
# an operator chain past the depth limit, which the full parse found only at the end)
_RAN_INTO_DEAD_ENDS = [
    "<alpha>rank(indneutralize(ts_rank(high / low, 9) - ts_argmax(ts_decay_linear(ts_corr(rank(low), "
    "ts_delta(log(close), 1), 19), 18), 5), IndClass.subindustry)) * 40 < rank(ts_corr(vwap, IndClass.subindustry, 4",
    "<alpha>sign(indneutralize(ts_corr(close, open * 0.634196 + sign(ts_min(close, 4) / 8 + (1 * (high - "
    "ts_mean(close * volume, 40) * -1 - rank(ts_decay_linear(close, 1)) + open) / (high - low + 0.001)) < 0.05 ? "
    "-1 * (vwap + 0.524434 + low * (1 - 0.178404 + open) ",
    "<alpha>-sign(ts_corr(volume, returns, 6) / ts_cov(ts_delta(close / vwap, 20), high - low, 30) / (vwap - "
    "volume * (1 + ts_rank(indneutralize(delay(-1 - vwap * (volume - (high) / 2) + rank(returns - "
    "ts_max(abs(returns), 5)) * 0.967285 + low / 2 - close, 23), Ind",
    "<alpha>rank(indneutralize(rank(ts_rank(high / low, 236)) * rank(ts_rank(ts_rank((high + low) / 2 - close, "
    "252), 1))) * volume / ts_mean(close, 20) / vwap\n< high - low) / 2 - close<(returns - vwap) + 0.05 * "
    "(vwap -1 == ts_mean(close / vwap, 8)) - rank(ts_cov(cl",
]


@pytest.mark.parametrize("answer", _RAN_INTO_DEAD_ENDS)
def test_every_viable_prefix_of_a_policy_answer_has_a_completion(answer):
    """The decoder's promise, on what a policy really wrote: whatever prefix the checker lets through can be
    finished. A checker that left the depth and group rules to the closing ')' lets each of these answers
    into viable prefixes with no completion at all."""
    open_prefixes = 0
    for k in range(len("<alpha>"), len(answer) + 1):
        prefix = answer[:k]
        if CHECK.state(prefix) != "open":
            continue
        open_prefixes += 1
        suffix = CHECK.completion(prefix)
        assert suffix is not None, prefix
        assert CHECK.state(prefix + suffix) == "done", (prefix, suffix)
    assert open_prefixes > 100


def test_completion_backs_up_where_the_first_choice_runs_out():
    """`ts_corr(252` may not take a window (`ts_corr(252, ` is constant): the rescue is an operand after the
    literal, which a greedy pass never reaches."""
    assert CHECK.completion("<alpha>ts_corr(252") == " - returns, 5 - returns, 5)</alpha>"
    assert CHECK.completion("<alpha>" + "rank(" * 15 + "close") == ")" * 15 + "</alpha>"


def test_plain_printer_round_trips():
    texts = _valid_texts()
    for t in texts:
        ast = parse(t)
        assert parse(plain(ast)) == ast, (t, plain(ast))
    assert plain(parse("(-1 * correlation(open, volume, 10))")) == "-1 * ts_corr(open, volume, 10)"
    assert plain(parse("Ts_Rank(x_y, 3.7)".replace("x_y", "close"))) == "ts_rank(close, 3)"
    assert plain(parse("(a - (b - c))".replace("a", "open").replace("b", "high").replace("c", "low"))) \
        == "open - (high - low)"
    assert plain(parse("-(close ^ 2) ^ 3")) == "-(close ^ 2) ^ 3"


class _Tok:
    """A tokenizer of single characters, enough for the sampler: token i is CHARS[i], the last is the end."""
    CHARS = ["<alpha>", "</alpha>", "close", "rank(", ")", "x", "open", " + "]
    eos_token_id = len(CHARS)
    all_special_ids = [len(CHARS)]

    def decode(self, ids, skip_special_tokens=True):
        return "".join(self.CHARS[i] for i in ids if i != self.eos_token_id)


def test_sampler_draws_from_the_renormalised_viable_distribution():
    """After `<alpha>rank(`, 'x' and ')' and '<alpha>' are not viable; the draws follow the model's
    probabilities over the rest, renormalised (Gumbel top-k = sampling without replacement)."""
    tok = _Tok()
    s = GrammarSampler(tok, PrefixChecker())
    logits = torch.log(torch.tensor([0.05, 0.05, 0.3, 0.1, 0.2, 0.2, 0.1, 0.0, 0.0]) + 1e-12)
    gen = torch.Generator().manual_seed(0)
    n = 6000
    draws = np.bincount([s.choose([0, 3], gumbel_keys(logits, 1.0, gen)) for _ in range(n)], minlength=9) / n
    allowed = {2: 0.3, 3: 0.1, 6: 0.1}          # close, rank(, open
    total = sum(allowed.values())
    for t, p in allowed.items():
        assert abs(draws[t] - p / total) < 0.02, (t, draws[t], p / total)
    assert draws[[0, 1, 4, 5, 7, 8]].sum() == 0
    assert s.stats["rejections"] > 0
    # the first candidate is a draw from the model: refused with the model's mass on refused tokens (0.5)
    assert abs(steered_share(s.stats) - 0.5) < 0.03 and s.stats["steered"] <= s.stats["rejections"]
    # greedy: the most likely viable token
    g = GrammarSampler(tok, PrefixChecker())
    assert g.choose([0, 3], logits) == 2
    assert g.choose([0, 3, 2, 4], logits) == 1          # after a complete formula: close the tag ...
    assert g.choose([0, 3, 2, 4, 1], logits) == tok.eos_token_id   # ... then only the end token


def _untrained_tiny(max_new_tokens: int):
    """An untrained tiny policy whose tokenizer knows two formulas: it writes gibberish unless ruled."""
    cfg = {"threads": 1, "max_new_tokens": max_new_tokens, "micro_batch": 8, "adapter": {},
           "tiny": {"vocab_size": 400, "hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 4,
                    "kv_heads": 2, "max_positions": 256, "adapter": "none"}}
    texts = ["<alpha>rank(ts_std(volume, 21) / ts_mean(volume, 21))</alpha>",
             "<alpha>rank(-ts_delta(close, 5))</alpha>"]
    return build_policy("tiny", policy_cfg(cfg), ["Design an alpha."] * 20 + texts * 20, seed=0)


def test_untrained_policy_writes_only_viable_answers_under_the_grammar():
    pol = _untrained_tiny(48)
    free = [a for g in pol.generate(["Design an alpha."], n=8, temperature=1.0, seed=1) for a in g]
    pol.grammar = PrefixChecker(Limits())
    ruled = pol.generate(["Design an alpha."], n=8, temperature=1.0, seed=1)
    assert ruled == pol.generate(["Design an alpha."], n=8, temperature=1.0, seed=1)      # seeded
    ruled = [a for g in ruled for a in g]
    assert sum(CHECK.state(a) == "dead" for a in free) >= 6          # untrained: gibberish
    assert all(CHECK.state(a) != "dead" for a in ruled), ruled       # constrained: viable (or cut at the cap)
    assert pol.decode_stats["rejections"] > 0
    # an untrained model rambles: its answers are closed by the forced completion in their last 12 tokens
    assert pol.decode_stats["forced"] >= 4
    assert sum(CHECK.state(a) == "done" for a in ruled) >= 4, ruled


def test_every_open_prefix_has_a_completion_when_enclosing_calls_need_lookback():
    """A subtree's lookback plus the least the enclosing calls still add must fit the limit (252): an SFT
    answer wrote `delay(... ts_min(ts_kurt(x, 252), 2), ` and then had no completion (delay's window is at
    least 1), rambled to the token cap and scored as unclosed. Every open prefix must be completable."""
    answers = ["<alpha>ts_min(ts_max(delay(-1 * ts_delta(ts_mean(close * volume, 180), 33) / "
               "ts_min(ts_kurt(close / vwap, 252), 2), 1), 5), 5)</alpha>",
               "<alpha>delay(delay(ts_delta(close, 200), 51), 1)</alpha>",
               "<alpha>rank(delay(ts_mean(volume, 252), 1))</alpha>"]
    for answer in answers:
        for i in range(1, len(answer) + 1):
            prefix = answer[:i]
            if CHECK.state(prefix) == "open":
                tail = CHECK.completion(prefix)
                assert tail is not None and CHECK.state(prefix + tail) == "done", prefix
    assert CHECK.state(answers[0].split(", 2)")[0] + ", 2") == "dead"       # 251 + 1 + delay's 1 > 252
    assert CHECK.state(answers[1].split(", 51")[0] + ", 52") == "dead"      # 200 + 52 + the outer delay's 1
    assert CHECK.state(answers[2]) == "done"                               # 251 + 1 fits exactly


def test_a_dead_end_is_finished_with_the_shortest_completion():
    """When none of the `scan` likeliest tokens keeps the answer viable, the sampler writes the shortest
    completion (as in the closing phase) instead of ending an unclosed answer."""
    tok = _untrained_tiny(48).tokenizer
    ids = tok("<alpha>rank(ts_std(volume, 21", add_special_tokens=False)["input_ids"]
    text = tok.decode(ids, skip_special_tokens=True)
    bad = next(t for t in range(len(tok)) if t not in tok.all_special_ids
               and CHECK.state(text + tok.decode([t], skip_special_tokens=True)) == "dead")
    scores = torch.full((1, len(tok)), -1e9)
    scores[0, bad] = 0.0                        # the model's one candidate kills the answer: scan 1 dead-ends
    s = GrammarSampler(tok, CHECK, scan=1)
    for _ in range(40):
        nxt = s.pick(0, ids, scores[0])            # the answer so far is the whole row
        ids.append(nxt)
        if nxt == tok.eos_token_id:
            break
    assert s.stats["dead_ends"] == 1 and s.stats["forced"] == 1
    assert CHECK.state(tok.decode(ids, skip_special_tokens=True)) == "done", tok.decode(ids)


def test_appending_a_tokens_text_equals_decoding_the_row(monkeypatch):
    """The sampler appends a candidate's own text to the row's text instead of decoding the row again: the
    same text for every ASCII token of the tiny tokenizer after random ASCII rows, and the same answers and
    counts as decoding every candidate's row whole."""
    import random

    import alphagym.policy.grammar as grammar

    pol = _untrained_tiny(40)
    tok = pol.tokenizer
    assert grammar.concatenates(tok)
    sampler = GrammarSampler(tok, PrefixChecker())
    ascii_ids = [i for i in range(len(tok)) if sampler._piece(i) is not None]
    assert len(ascii_ids) > 150
    rng = random.Random(0)
    for _ in range(300):
        row = [rng.choice(ascii_ids) for _ in range(rng.randint(0, 12))]
        t = rng.choice(ascii_ids)
        assert tok.decode(row) + sampler._piece(t) == tok.decode([*row, t])
    # special tokens decode to nothing and are refused, whatever the shortcut
    assert all(sampler._piece(i) in ("", None) for i in tok.all_special_ids)

    pol.grammar = PrefixChecker(Limits())
    fast = pol.generate(["Design an alpha."], n=8, temperature=1.0, seed=3)
    fast_stats = dict(pol.decode_stats)
    monkeypatch.setattr(grammar, "concatenates", lambda tokenizer: False)
    slow = pol.generate(["Design an alpha."], n=8, temperature=1.0, seed=3)
    slow_stats = {k: v - fast_stats[k] for k, v in pol.decode_stats.items()}     # the policy's counts add up
    slow_stats["growth_max"] = pol.decode_stats["growth_max"]                     # and its `_max` is a max
    assert fast == slow and slow_stats == fast_stats and fast_stats["rejections"] > 1000


def test_the_watch_spacing_writes_what_a_search_at_every_token_writes(monkeypatch):
    """From half the budget on, the sampler searches an answer's completion only as often as its slack
    requires (`GROWTH`), and not at all while the completion it found last still finishes the answer and fits
    (`_still_completes`): an untrained policy, which rambles into the watch on most answers, writes the same
    answers with the same counts as with a search at every token, with fewer searches. The untrained
    policy's completions grow by up to 13 tokens per token (the trained one's by at most `GROWTH`): the
    spacing is checked with a bound that holds for it, and the dense run checks that it held."""
    import alphagym.policy.grammar as grammar

    monkeypatch.setattr(grammar, "GROWTH", 16)
    pol = _untrained_tiny(96)
    pol.grammar = PrefixChecker(Limits())
    spaced = [pol.generate(["Design an alpha."], n=8, temperature=1.0, seed=s) for s in range(4)]
    stats_spaced = dict(pol.decode_stats)
    pol.decode_stats.clear()
    monkeypatch.setattr(grammar, "DENSE_WATCH", True)        # a search at every token
    monkeypatch.setattr(grammar.GrammarSampler, "_still_completes", lambda self, b, text: None)
    every = [pol.generate(["Design an alpha."], n=8, temperature=1.0, seed=s) for s in range(4)]
    assert spaced == every
    searches = stats_spaced.pop("watch_searches"), pol.decode_stats.pop("watch_searches")
    growth = stats_spaced.pop("growth_max"), pol.decode_stats.pop("growth_max")
    assert stats_spaced == pol.decode_stats and stats_spaced["forced"] >= 8
    assert stats_spaced["forced_late"] == 0          # forced while it fits: none cut at the cap
    assert searches[1] > 1.5 * searches[0] > 0, searches        # 183 against 102 when written
    assert 0 < growth[1] <= grammar.GROWTH, growth            # the bound held at every token


def test_a_traced_draw_gives_the_log_probability_of_the_distribution_it_was_drawn_from():
    """After `<alpha>rank(`, ')' and 'x' are refused; the model's mass is 0.3, 0.1, 0.1 on the viable
    close, rank(, open and 0.5 on the refused. The trace names the refused tokens, and `restrict` turns
    the model's log-probabilities into those of the renormalised distribution: they sum to one over the
    viable tokens and match the sampler's draw frequencies. A forced token leaves the mask."""
    tok = _Tok()
    probs = torch.tensor([0.0, 0.0, 0.3, 0.1, 0.25, 0.25, 0.1, 0.0, 0.0])
    logits = torch.log(probs + 1e-30)
    s = GrammarSampler(tok, PrefixChecker(), trace=True)
    gen = torch.Generator().manual_seed(3)
    n = 4000
    draws = np.bincount([s.pick(b, [0, 3], gumbel_keys(logits, 1.0, gen), logits) for b in range(n)],
                        minlength=9) / n
    assert {s.traces[b][0] for b in range(n)} == {(4, 5)}           # ')' and 'x', judged by mass, in order
    viable = [2, 3, 6]
    logp = torch.log_softmax(logits, -1).expand(3, 1, 9)
    target = torch.tensor([[t] for t in viable])
    lp = logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    traces = [Trace((t,), ((4, 5),)) for t in viable]
    got, mask = restrict(lp, logp, target, torch.ones(3, 1, dtype=torch.bool), traces)
    torch.testing.assert_close(got.exp().sum(), torch.tensor(1.0))
    for k, t in enumerate(viable):
        assert abs(float(got[k, 0].exp()) - probs[t] / 0.5) < 1e-6
        assert abs(draws[t] - float(got[k, 0].exp())) < 0.025, (t, draws[t])
    assert mask.all()
    # a forced token (trace None) moves nothing; a row whose tokens are not its trace's keeps the model's
    got, mask = restrict(lp, logp, target, torch.ones(3, 1, dtype=torch.bool),
                         [Trace((2,), (None,)), Trace((6,), ((4, 5),)), None])
    assert mask.tolist() == [[False], [True], [True]] and float(got[0, 0]) == 0.0
    torch.testing.assert_close(got[1:], lp[1:])


def _scripted_minus_parens(monkeypatch: pytest.MonkeyPatch, node_watch: bool) -> tuple[str, str, dict]:
    """A model that, after a formula near a `compact` brief's node limit, writes `-(` over and over: each adds
    no node sure to be in the parse, yet whatever fills it brings a `neg` node."""
    import alphagym.policy.grammar as grammar
    from alphagym.briefs.catalogue import load_catalogue
    from alphagym.briefs.checker import BriefContracts
    from alphagym.briefs.generate import render

    if not node_watch:
        monkeypatch.setattr(grammar, "NODE_WATCH_FROM", 10**9)
    cat = load_catalogue()
    brief = {"mechanism": "reversal", "horizon": 5, "input_rule": "price_only", "structure": "ranked",
             "forbidden": "compact", "risk": cat.ids("risks")[0]}
    checker = BriefContracts(cat, 0.5).checker({**brief, "text": render(cat, brief)})
    assert checker.node_limited and not CHECK.node_limited
    tok = _untrained_tiny(120).tokenizer
    row = tok("<alpha>rank(ts_mean(close, 5) - delay(close, 5) - ts_mean(open, 5) - close",
              add_special_tokens=False)["input_ids"]
    minus, paren = (tok(p, add_special_tokens=False)["input_ids"][-1] for p in (" -", " ("))
    s = GrammarSampler(tok, checker, max_new_tokens=120)
    while len(row) < 120:
        scores = torch.full((len(tok),), -1e9)
        scores[minus], scores[paren] = (10.0, 5.0) if len(row) % 2 else (5.0, 10.0)
        row.append(s.pick(0, row, scores))
        if row[-1] == tok.eos_token_id:
            break
    text = tok.decode(row, skip_special_tokens=True)
    return checker.state(text), text, s.stats


def test_a_node_limited_answer_is_finished_while_a_completion_fits_its_nodes(monkeypatch):
    """Under a node limit the prefix rules count only sure nodes, so `-(-(-(` stays open past the last point
    where a completion fits in the nodes left. The node watch forces the completion before then; control:
    without it, the answer is still open at the cap (invalid), as every completion search finds nothing."""
    state, text, stats = _scripted_minus_parens(monkeypatch, node_watch=True)
    assert state == "done" and stats["forced_nodes"] == 1 and stats["node_searches"] >= 2, (text, stats)
    state, text, stats = _scripted_minus_parens(monkeypatch, node_watch=False)
    assert state == "open" and stats["forced"] == 0 and stats["node_searches"] == 0, (text, stats)
