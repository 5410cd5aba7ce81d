"""A brief compiled into the prefix checker (briefs/checker.py, over contract.py, facts.py and witnesses.py):
its witnesses meet the brief, it refuses exactly the briefs the generator calls contradictory, and the checker
it makes lets only compliant answers finish (the fuzz below: cut formulas completed under random briefs)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from alphagym.briefs.catalogue import CHECKS, FIELDS, load_catalogue
from alphagym.briefs.checker import ContractChecker, compile_brief
from alphagym.briefs.compliance import check
from alphagym.briefs.contract import brief_specs, fields_needed, merge_specs, nodes_needed
from alphagym.briefs.facts import scan
from alphagym.briefs.generate import contradicts, generate, read_text, render
from alphagym.briefs.witnesses import _TS1, _TS2, built, witnesses
from alphagym.config import load_params
from alphagym.dsl.ast import walk
from alphagym.dsl.canonical import fields_used
from alphagym.dsl.errors import DslError
from alphagym.dsl.lexer import tokenize
from alphagym.dsl.parser import Limits, parse
from alphagym.dsl.prefix import PrefixChecker
from alphagym.dsl.random_formula import random_formula
from alphagym.errors import BriefError
from alphagym.params import Briefs
from alphagym.policy.grammar import Trace
from alphagym.policy.model import build_policy, set_decoding
from cfg_helpers import policy_cfg

TOL = 0.5


@pytest.fixture(scope="module")
def cat():
    return load_catalogue()


def test_the_witness_templates_wrap_the_registrys_time_series_operators_in_name_order():
    assert _TS1 == ("ts_argmax", "ts_argmin", "ts_decay_linear", "ts_delta", "ts_ema", "ts_kurt", "ts_max", "ts_mean",
                    "ts_min", "ts_product", "ts_rank", "ts_skew", "ts_slope", "ts_std", "ts_sum", "ts_zscore")
    assert _TS2 == ("ts_corr", "ts_cov")


def _combos(cat) -> list[dict]:
    return [dict(mechanism=m, horizon=h, input_rule=i, structure=s, forbidden=f)
            for m, h, i, s, f in itertools.product(cat.ids("mechanisms"), (5, 21, 63, 252), cat.ids("input_rules"),
                                                    cat.ids("structures"), cat.ids("forbidden"))]


def test_a_brief_compiles_exactly_when_the_generator_draws_it_and_its_witnesses_comply(cat):
    rng = np.random.default_rng(0)
    combos = _combos(cat)
    sample = [combos[i] for i in rng.choice(len(combos), 1500, replace=False)]
    refused = 0
    for b in sample:
        witnesses = built(merge_specs(brief_specs(b, cat), b["horizon"], TOL), Limits())
        assert bool(witnesses) != contradicts(cat, b), b
        for w in witnesses:
            assert check(b, parse(w), cat, TOL).ok, (b, w)
        if contradicts(cat, b):
            refused += 1
            with pytest.raises(BriefError, match="cannot be kept together"):
                compile_brief(b, cat, TOL)
    assert 0 < refused < len(sample)          # both kinds are in the sample


def test_a_name_at_the_end_counts_as_each_way_it_can_end(cat):
    """A field cut off at the end of a prefix is judged as written: the witness appended after `-high` need
    bring only the second field, so the answer closes; a third field under "two fields" is refused while
    it is still being written (`vwa`), and `adv<d>` (close and volume) under "prices only". Left open, each
    ends an answer cut off at a dead end, invalid."""
    two = dict(id="t0", mechanism="liquidity_level", horizon=63, input_rule="two_fields", structure="two_ranks",
               forbidden="compact")
    ck = ContractChecker(compile_brief(two, cat, TOL), two, cat, TOL)
    for prefix in ("<alpha>-hi", "<alpha>-high"):
        suffix = ck.completion(prefix)
        assert suffix is not None, prefix
        assert ck.state(prefix + suffix) == "done" and check(two, parse((prefix + suffix)[7:-8]), cat, TOL).ok
    assert ck.state("<alpha>rank(high - low / vwa") == "dead"        # a third field, not yet whole
    assert ck.state("<alpha>rank(high - low / volume") == "dead"
    assert ck.state("<alpha>rank(high - lo") == "open"               # `low` is the second field
    prices = dict(id="t2", mechanism="tail_risk", horizon=5, input_rule="price_only", structure="against_extreme",
                  forbidden="no_argext")
    pk = ContractChecker(compile_brief(prices, cat, TOL), prices, cat, TOL)
    assert pk.state("<alpha>-adv9") == "dead" and pk.state("<alpha>-ad") == "dead"   # `ad` can only be adv
    assert pk.state("<alpha>-ab") == "open"                          # `abs(`


def test_the_checker_keeps_the_brief_and_completes_what_the_model_left_unmet(cat):
    b = dict(id="t1", mechanism="volume_surge", horizon=21, input_rule="use_vwap", structure="ranked",
             forbidden="no_argext")
    ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL)
    assert ck.state("<alpha>rank(") == "open"
    assert ck.state("<alpha>ts_argmax(") == "dead"                    # forbidden
    assert ck.state("<alpha>close") == "dead"                         # not under the required root
    assert ck.state("<alpha>rank(ts_mean(volume, 400") == "dead"      # longer than the horizon allows
    assert ck.state("<alpha>rank(volume)") == "dead"                  # the root closed, vwap still unmet
    assert ck.state("<alpha>rank(ts_mean(volume, 21))</alpha>") == "dead"
    assert ck.state("<alpha>rank(ts_mean(volume, 21) + vwap)</alpha>") == "done"
    for prefix in ("<alpha>", "<alpha>rank(close", "<alpha>rank(ts_corr(close, open, 30"):
        suffix = ck.completion(prefix)
        assert suffix is not None and ck.state(prefix + suffix) == "done", prefix
        formula = (prefix + suffix)[len("<alpha>"):-len("</alpha>")]
        assert check(b, parse(formula), cat, TOL).ok, formula


def test_a_requirement_is_completed_inside_a_call_that_uses_up_an_operator_count(cat):
    """Under "exactly one ts_corr", an answer inside its ts_corr still lacks the decayed average and the
    range's fields: the completion supplies an operand with what is missing and no second ts_corr
    (`contract.residual`); the brief's own witnesses, each with its ts_corr, cannot be that operand."""
    b = dict(id="t3", mechanism="range_expansion", horizon=21, input_rule="one_corr", structure="decayed",
             forbidden="compact")
    ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL)
    for prefix in ("<alpha>rank(ts_corr(", "<alpha>rank(ts_cor", "<alpha>ts_corr(volume /",
                   "<alpha>(rank(ts_corr(ts_sum((high + low) / 2, 1"):
        suffix = ck.completion(prefix)
        assert suffix is not None, prefix
        formula = (prefix + suffix)[len("<alpha>"):-len("</alpha>")]
        assert check(b, parse(formula), cat, TOL).ok and formula.count("ts_corr") == 1, formula


def test_a_cut_off_name_lives_while_one_of_its_completions_is_allowed(cat):
    """Under "no ts_argmax/ts_argmin" and "prices only", `ts_arg` and `vol` can only become forbidden names:
    dead at once, so the sampler steers away there instead of ending the answer at a dead end; `ts_` can
    still become an allowed call, and its completion takes one."""
    b = dict(id="t4", mechanism="range_expansion", horizon=21, input_rule="price_only", structure="ranked",
             forbidden="no_argext")
    ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL)
    assert PrefixChecker().state("<alpha>rank(ts_arg") == PrefixChecker().state("<alpha>rank(vol") == "open"
    for prefix in ("<alpha>rank(ts_arg", "<alpha>rank(ts_argmax", "<alpha>rank(vol"):
        assert ck.state(prefix) == "dead", prefix
    suffix = ck.completion("<alpha>rank(ts_")
    assert suffix is not None
    assert check(b, parse(("<alpha>rank(ts_" + suffix)[len("<alpha>"):-len("</alpha>")]), cat, TOL).ok


def test_an_operator_cut_in_half_is_judged_as_the_operator_it_can_only_become(cat):
    """Under "no conditionals or comparisons", `high |` can only become `high ||`, `high !` only `high !=`
    and `high <.` only a comparison with a number: dead at once under the brief, open under the grammar."""
    b = dict(id="t5", mechanism="range_expansion", horizon=21, input_rule="price_only", structure="ranked",
             forbidden="no_conditionals")
    ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL)
    for prefix in ("<alpha>rank(high |", "<alpha>rank(high &", "<alpha>rank(high !", "<alpha>rank(high <."):
        assert PrefixChecker().state(prefix) == "open" and ck.state(prefix) == "dead", prefix
    assert ck.state("<alpha>rank(high - 1.") == "open"


def test_a_whole_two_character_operator_is_not_read_as_a_half(cat):
    """`rank(x) <=` ends in a whole operator, not half of `<==`: under a `ranked` brief it makes the root a
    comparison and is dead, as `rank(x) -` is (read as `<==`, it did not lex, and the contract let it through
    to a dead end: no completion). Control: the grammar alone keeps both open; a half operator stays judged
    as the operator it can only become."""
    b = dict(id="t6", mechanism="vwap_deviation", horizon=5, input_rule="one_corr", structure="ranked",
             forbidden="shallow")
    ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL)
    for end in (" -", " <=", " >=", " ==", " !=", " ||", " &&"):
        prefix = "<alpha>rank(ts_corr(vwap, high - low, 6))" + end
        assert PrefixChecker().state(prefix) == "open" and ck.state(prefix) == "dead", prefix
    assert ck.state("<alpha>rank(ts_corr(vwap, high - low, 6) <=") == "open"     # inside the root: fine
    assert ck.state("<alpha>rank(ts_corr(vwap, high - low, 6))") == "open"


def test_a_cut_off_time_series_name_counts_the_nesting_it_will_open(cat):
    """Under "at most 3 nested time-series operators", `ts` cut off inside three open time-series calls can
    only become a fourth: dead while it is written (it was kept, and the answer ran into a dead end with no
    completion). Control: the grammar keeps it open, and inside two it lives."""
    b = dict(id="t7", mechanism="return_asymmetry", horizon=126, input_rule="two_fields", structure="decayed",
             forbidden="shallow")
    ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL)
    deep = "<alpha>ts_ema(ts_zscore(ts_delta(close / ts"
    assert PrefixChecker().state(deep) == "open" and ck.state(deep) == "dead"
    assert ck.state("<alpha>ts_ema(ts_zscore(close / ts") == "open"
    assert ck.state("<alpha>ts_ema(ts_zscore(ts_delta(close, 5) / ts") == "open"      # ts_delta is closed


def test_a_cut_off_call_lives_while_any_call_it_can_become_is_allowed(cat):
    """Under "exactly one ts_corr", once ts_corr is used, `ts_co` may still become `ts_cov`: open, while
    `ts_cor` can only become a second ts_corr: dead. (Judged by the first call the parser is given alone,
    `ts_corr`, `ts_co` was dead, and a forced completion through `rank(ts_mean(...` stopped at `ts`.)"""
    b = dict(id="t8", mechanism="reversal", horizon=42, input_rule="one_corr", structure="two_ranks",
             forbidden="no_argext")
    ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL)
    head = "<alpha>rank(ts_corr(close, returns, 5)) - rank("
    for cut, state in (("ts", "open"), ("ts_co", "open"), ("ts_cov", "open"), ("ts_me", "open"),
                       ("ts_cor", "dead"), ("ts_ar", "dead")):        # ts_argmax, ts_argmin: forbidden
        assert ck.state(head + cut) == state, cut
    assert PrefixChecker().state(head + "ts_cor") == "open"               # control: the grammar keeps it


def test_the_completion_search_finishes_a_cut_off_name_with_any_call_the_brief_allows(cat, monkeypatch):
    """The closing search finishes `... + ts_` under "exactly one ts_corr", once used, through another call
    (the parser's own choice, `ts_corr`, is used up). Control: given the parser's choices alone, it finds none,
    and the answer would be cut at the cap."""
    b = dict(id="t9", mechanism="volume_variability", horizon=63, input_rule="one_corr", structure="ranked",
             forbidden="no_argext")
    text = "<alpha>rank(ts_corr(close, volume, 18) / ts_std(returns, 15) + ts_"
    ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL)
    done = ck.completion(text)
    assert done is not None and ck.state(text + done) == "done", done
    assert check(b, parse((text + done)[len("<alpha>"):-len("</alpha>")]), cat, TOL).ok
    monkeypatch.setattr(ContractChecker, "_search_names", PrefixChecker._search_names)
    assert ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL).completion(text) is None


def test_cut_formulas_completed_under_random_briefs_comply(cat):
    """Fuzz: 1,000 drawn briefs x a random formula cut at a random point: whenever the checker keeps the
    prefix and completes it, the answer passes every hard check of its brief (with the witness variants
    the default params draw among)."""
    rng = np.random.default_rng(1)
    combos = [b for b in _combos(cat) if not contradicts(cat, b)]
    completed = kept = 0
    variants = load_params().policy.witness_variants
    assert variants > 1
    for k in range(1000):
        b = {**combos[rng.integers(len(combos))], "id": f"f{k}"}
        ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL, variants=variants)
        formula = random_formula(int(rng.integers(1 << 30)), max_window=60)
        prefix = "<alpha>" + formula[: int(rng.integers(0, len(formula) + 1))]
        if ck.state(prefix) != "open":
            continue
        kept += 1
        suffix = ck.completion(prefix)
        if suffix is None:
            continue
        completed += 1
        answer = prefix + suffix
        assert ck.state(answer) == "done"
        try:
            ast = parse(answer[len("<alpha>"):-len("</alpha>")])
        except DslError as e:                   # pragma: no cover - a done answer parses
            pytest.fail(f"{answer}: {e}")
        assert check(b, ast, cat, TOL).ok, (b, answer)
    assert kept >= 200 and completed >= 0.9 * kept, (kept, completed)


def test_no_prefix_of_a_compliant_formula_is_refused(cat):
    """The rules that refuse a prefix (`violation`: counts that only grow, and the lower bounds of what a
    requirement still unmet needs, `nodes_needed` and `fields_needed`) never refuse one that a compliant formula
    begins with: 300 drawn briefs x compliant formulas (random formulas cut and completed under the brief,
    and the brief's witnesses), every character prefix of each is kept by a checker that has seen none of it."""
    rng = np.random.default_rng(5)
    combos = [b for b in _combos(cat) if not contradicts(cat, b)]
    judged, refused, answers = 0, [], 0
    for k in range(300):
        b = {**combos[rng.integers(len(combos))], "id": f"p{k}"}
        c = compile_brief(b, cat, TOL)
        ck = ContractChecker(c, b, cat, TOL)
        formula = random_formula(int(rng.integers(1 << 30)), max_window=60)
        prefix = "<alpha>" + formula[: int(rng.integers(0, len(formula) + 1))]
        suffix = ck.completion(prefix) if ck.state(prefix) == "open" else None
        done = [prefix + suffix] if suffix is not None else []
        done += [f"<alpha>{w}</alpha>" for w in witnesses(c, None, 2)]
        for answer in done:
            answers += 1
            fresh = ContractChecker(c, b, cat, TOL)
            whole = parse(answer[len("<alpha>"):-len("</alpha>")])
            nodes, fields = sum(1 for _ in walk(whole)), len(set(fields_used(whole)) - {"sector"})
            for i in range(len("<alpha>"), len(answer)):
                judged += 1
                if fresh.state(answer[:i]) == "dead":
                    refused.append((b, answer[:i], answer))
                    break
                if i > len(answer) - len("</alpha>"):
                    continue                     # the closing tag's '<' lexes as less-than
                try:
                    f = scan(tokenize(answer[len("<alpha>"):i]), i - len("<alpha>"))[0]
                except DslError:
                    continue
                # the lower bounds, checked against what the formula holds whatever the brief's limits
                if f.nodes + nodes_needed(c, f) > nodes or len(f.fields - {"sector"}) + fields_needed(c, f) > fields:
                    refused.append((b, answer[:i], answer, f))
                    break
    assert answers > 600 and judged > 20_000 and not refused, [r[1:] for r in refused[:2]]


def test_a_checker_that_shares_the_grammars_parses_judges_every_prefix_as_one_that_does_not(cat):
    """Brief checkers share the grammar checker's finished calls and lexed heads (a parse does not depend
    on the brief): 200 briefs x every prefix of a random formula, judged after the grammar and the other
    briefs have filled the shared caches, get the states a checker with caches of its own gives."""
    rng = np.random.default_rng(2)
    combos = [b for b in _combos(cat) if not contradicts(cat, b)]
    grammar = PrefixChecker()
    differ, judged = [], 0
    for k in range(200):
        b = {**combos[rng.integers(len(combos))], "id": f"s{k}"}
        c = compile_brief(b, cat, TOL)
        shared, own = ContractChecker(c, b, cat, TOL, share=grammar), ContractChecker(c, b, cat, TOL)
        assert shared.finished is grammar.finished and own.finished is not grammar.finished
        answer = f"<alpha>{random_formula(int(rng.integers(1 << 30)), max_window=60)}</alpha>"
        for i in range(len("<alpha>"), len(answer) + 1):
            grammar.state(answer[:i])
            judged += 1
            if shared.state(answer[:i]) != own.state(answer[:i]):
                differ.append((b["id"], answer[:i]))
    assert judged > 5000 and not differ, differ[:3]


def test_a_resumed_scan_reads_every_prefix_as_a_scan_from_scratch_does(cat):
    """`ContractChecker._scan` resumes a prefix's walk from the one kept for the longest text before one of its
    whitespace characters, and `PrefixChecker._head` lexes from the longest head lexed before. Every character
    prefix of 300 formulas (random ones, the same with a witness appended as the completion search appends
    it, and strings of DSL pieces), judged in a shuffled order by checkers sharing their caches, has the facts
    and tokens that `scan` and `tokenize` give it from scratch."""
    rng = np.random.default_rng(4)
    combos = [b for b in _combos(cat) if not contradicts(cat, b)]
    grammar, walks = PrefixChecker(), {}
    checkers = []
    for k in range(8):
        b = {**combos[rng.integers(len(combos))], "id": f"w{k}"}
        c = compile_brief(b, cat, TOL)
        checkers.append(ContractChecker(c, b, cat, TOL, share=grammar, walks=walks))
    pieces = ["rank(", "ts_mean(", "ts_corr(", "delay(", " close", "volume", ", 5", ", 252", ")", " - ", " * ",
              "adv20", " ? ", " : ", "-", "1", "(", " (", "ts_rank(", "open, ", "high", "rank", ",", " ", "  "]
    formulas = []
    for seed in range(100):
        f = random_formula(int(rng.integers(1 << 30)), max_window=60)
        cut = f[: int(rng.integers(0, len(f) + 1))]
        formulas += [f, f"{cut} + {witnesses(checkers[seed % 8].contract)[0]}",
                     "".join(pieces[int(i)] for i in rng.integers(len(pieces), size=int(rng.integers(3, 16))))]
    texts = [f[:i] for f in formulas for i in range(1, len(f) + 1)]
    rng.shuffle(texts)
    resumed = 0
    for i, text in enumerate(texts):
        ck = checkers[i % 8]
        try:
            expected = tokenize(text)
        except DslError:
            continue
        tokens = ck._tokens(text)
        assert tokens == expected, text
        resumed += any(text[:j] in walks for j in range(len(text)) if text[j].isspace())
        assert ck._scan(text, tokens) == scan(expected, len(text))[0], text
    assert len(texts) > 10_000 and resumed > len(texts) // 2 and len(walks) > 1000, (len(texts), resumed)


def test_a_rendered_brief_reads_back_and_other_text_does_not(cat):
    train, holdout, _ = generate(cat, Briefs(train=300, holdout=40, holdout_family_share=0.15,
                                             horizon_tolerance=TOL), 3)
    for b in train + holdout:
        assert read_text(cat, b["text"]) == {k: b[k] for k in FIELDS}, b["id"]
    assert read_text(cat, "Prices only, a 63-day horizon, no ts_argmax.") is None
    assert read_text(cat, train[0]["text"].replace("Target horizon", "Horizon")) is None


def _tiny(max_new_tokens: int, texts: list[str]):
    """An untrained tiny policy whose tokenizer has seen the briefs and a few formulas: it writes gibberish
    unless ruled, so the decoder does all the work."""
    cfg = {"threads": 1, "max_new_tokens": max_new_tokens, "micro_batch": 8, "adapter": {},
           "tiny": {"vocab_size": 600, "hidden_size": 32, "intermediate_size": 64, "layers": 2, "heads": 4,
                    "kv_heads": 2, "max_positions": 512, "adapter": "none"}}
    formulas = [f"<alpha>{random_formula(s, max_window=60)}</alpha>" for s in range(200)]
    return build_policy("tiny", policy_cfg(cfg), [*texts, *formulas], seed=0)


def test_the_watch_spacing_under_briefs_writes_what_a_search_at_every_token_writes(cat, monkeypatch):
    """A row lacking a requirement of its brief is watched once `grammar.LACK_ROOM` tokens are left (here, at 96
    tokens, from half the budget), spaced by the completion's growth bound (`grammar.GROWTH`) like any other row:
    an untrained policy, which rambles into the watch on most answers, writes the same answers under briefs of
    different contracts as with a search at every token, with fewer searches."""
    import alphagym.policy.grammar as grammar

    train, _, _ = generate(cat, Briefs(train=24, holdout=8, holdout_family_share=0.15, horizon_tolerance=TOL), 5)
    texts = [b["text"] for b in train]
    pol = _tiny(96, texts)
    set_decoding(pol, "brief", load_params().dsl.limits, TOL)
    spaced = pol.generate(train, n=4, temperature=1.0, seed=1)
    stats_spaced, bound = dict(pol.decode_stats), grammar.GROWTH
    pol.decode_stats.clear()
    monkeypatch.setattr(grammar, "DENSE_WATCH", True)        # a search at every token
    monkeypatch.setattr(grammar.GrammarSampler, "_still_completes", lambda self, b, text: None)
    every = pol.generate(train, n=4, temperature=1.0, seed=1)
    assert spaced == every
    searches = stats_spaced.pop("watch_searches"), pol.decode_stats.pop("watch_searches")
    growth = stats_spaced.pop("growth_max"), pol.decode_stats.pop("growth_max")
    assert stats_spaced == pol.decode_stats and stats_spaced["forced"] >= 8
    assert stats_spaced["forced_late"] == 0          # forced while it fits: none cut at the cap
    assert searches[1] > 2 * searches[0] > 0, (searches, growth)
    assert 0 < growth[1] <= bound, growth                    # the bound held at every token


def test_a_row_lacking_a_requirement_is_first_watched_when_lack_room_tokens_are_left(cat, monkeypatch):
    """At a 64-token budget a row lacking a requirement is first searched with `LACK_ROOM` (40) tokens left, at
    its 24th token, not at a quarter of the budget (16), and every completion still fits (`forced_late` 0),
    the longest lacking row's within `LACK_ROOM`. Control: `LACK_ROOM` = 48, watched from the 16th token."""
    import alphagym.policy.grammar as grammar

    train, _, _ = generate(cat, Briefs(train=24, holdout=8, holdout_family_share=0.15, horizon_tolerance=TOL), 5)
    pol = _tiny(64, [b["text"] for b in train])
    set_decoding(pol, "brief", load_params().dsl.limits, TOL)
    first: list[int] = []
    watch = grammar.GrammarSampler._watch
    monkeypatch.setattr(grammar.GrammarSampler, "_watch",
                        lambda self, b, row, text: (first.append(len(row)), watch(self, b, row, text))[1])

    def earliest(room: int) -> int:
        monkeypatch.setattr(grammar, "LACK_ROOM", room)
        first.clear()
        pol.decode_stats.clear()
        pol.generate(train[:12], n=2, temperature=1.0, seed=1)
        return min(first)

    assert earliest(40) == 24
    assert pol.decode_stats["forced_late"] == 0 and pol.decode_stats["forced"] > 0
    assert 0 < pol.decode_stats["lacking_completion_max"] <= grammar.LACK_ROOM
    assert earliest(48) == 16                                   # control: a quarter of the budget


def _chain_to_the_depth_limit(cat, monkeypatch, room: int) -> tuple[str, str, dict]:
    """A model that writes ` - close` over and over under a brief it has not met: each operator puts one
    more level over the whole formula, until no witness fits under the depth limit (16)."""
    import alphagym.policy.grammar as grammar
    from alphagym.briefs.checker import BriefContracts
    from alphagym.policy.grammar import GrammarSampler

    monkeypatch.setattr(grammar, "DEPTH_ROOM", room)
    brief = {"mechanism": "reversal", "horizon": 5, "input_rule": "price_only", "structure": "standardised",
             "forbidden": "no_conditionals", "risk": cat.ids("risks")[0]}
    checker = BriefContracts(cat, TOL).checker({**brief, "text": render(cat, brief)})
    train, _, _ = generate(cat, Briefs(train=24, holdout=8, holdout_family_share=0.15, horizon_tolerance=TOL), 5)
    tok = _tiny(128, [b["text"] for b in train]).tokenizer
    script = tok(" - close" * 64, add_special_tokens=False)["input_ids"]
    row = tok("<alpha>close", add_special_tokens=False)["input_ids"]
    s = GrammarSampler(tok, checker, max_new_tokens=128, rows=[checker])
    while len(row) < 128 and (not row or row[-1] != tok.eos_token_id):
        scores = torch.full((len(tok),), -1e9)
        scores[script[len(row) % len(script)]] = 10.0
        row.append(s.pick(0, row, scores))
    text = tok.decode(row, skip_special_tokens=True)
    return checker.state(text), text, s.stats


def test_a_row_lacking_a_requirement_is_finished_while_a_witness_fits_under_the_depth_limit(cat, monkeypatch):
    """An operator chain deepens its formula by a level an operator; once the formula is at the depth limit
    no witness can be added over it, and an answer still lacking a requirement has no completion (the fuzz met
    such answers writing blanks to the cap). The depth watch finishes it while its depth floor leaves
    `DEPTH_ROOM` levels. Control: without it, the answer is still open at the cap, no completion found."""
    state, text, stats = _chain_to_the_depth_limit(cat, monkeypatch, room=4)
    assert state == "done" and stats["forced_depth"] == 1, (text, stats)
    state, text, stats = _chain_to_the_depth_limit(cat, monkeypatch, room=-100)
    assert state == "open" and stats["forced"] == 0 and stats["forced_depth"] == 0, (text, stats)


def test_forced_late_counts_the_answers_cut_at_the_cap_and_forced_lacking_the_requirements_written(cat):
    """`forced_late` counts a forced completion whose text no longer fits the token budget, and such an answer
    is cut: with a budget too short for the briefs' witnesses (24 tokens), it is at most the answers cut, and
    at least those cut less the rows that were never forced (their search found nothing). A completion whose
    text fits but whose end token does not leaves a whole answer, and is not counted. `forced_lacking` counts
    the forced completions that supply a requirement of the brief the answer still lacked."""
    train, _, _ = generate(cat, Briefs(train=24, holdout=8, holdout_family_share=0.15, horizon_tolerance=TOL), 5)
    texts = [b["text"] for b in train]
    pol = _tiny(24, texts)
    set_decoding(pol, "brief", load_params().dsl.limits, TOL)
    out = pol.generate(train, n=2, temperature=1.0, seed=1)
    cut = sum(not a.rstrip().endswith("</alpha>") for row in out for a in row)
    late, unforced = pol.decode_stats["forced_late"], 2 * len(texts) - pol.decode_stats["forced"]
    assert 0 < late and cut - unforced <= late <= cut, (late, cut, unforced)
    # the untrained policy meets no requirement by itself: nearly every forced completion writes one; the
    # grammar alone has none to write
    st = pol.decode_stats
    assert 0.5 * st["forced"] < st["forced_lacking"] <= st["forced"]
    # by check: an answer counted once a check it lacked, so each check's count is at most the whole count and
    # the checks' together at least it; the horizon (every brief asks for a window) is lacked most often here
    by_check = {c: st.get(f"forced_lacking_{c}", 0) for c in CHECKS}
    assert all(v <= st["forced_lacking"] for v in by_check.values()), by_check
    assert sum(by_check.values()) >= st["forced_lacking"] and by_check["forbidden"] == 0, by_check
    assert by_check["horizon"] > 0
    set_decoding(pol, "grammar", load_params().dsl.limits, TOL)
    pol.decode_stats.clear()
    pol.generate(train, n=2, temperature=1.0, seed=1)
    assert pol.decode_stats["forced"] > 0 and pol.decode_stats["forced_lacking"] == 0
    assert not any(k.startswith("forced_lacking_") and v for k, v in pol.decode_stats.items())


def test_lacking_names_the_checks_whose_requirement_an_answer_has_not_met(cat):
    """`lacking` names each check whose own requirements (`check_contracts`) a prefix has not met, as a
    requirement is written it leaves the list, and it is empty exactly when `lacks` is false; the grammar's
    own checker lacks nothing."""
    b = dict(id="t1", mechanism="volume_surge", horizon=21, input_rule="use_vwap", structure="two_ranks",
             forbidden="no_argext")
    ck = ContractChecker(compile_brief(b, cat, TOL), b, cat, TOL)
    steps = {"<alpha>": ("mechanism", "horizon", "input_rule", "structure"),
             "<alpha>rank(ts_mean(volume, 5": ("horizon", "input_rule", "structure"),   # mechanism: op and field
             "<alpha>rank(ts_mean(volume, 21": ("input_rule", "structure"),             # the horizon's window
             "<alpha>rank(ts_mean(volume, 21)) - rank(vwap)": (),
             "<alpha>rank(((": ("mechanism", "horizon", "input_rule", "structure")}
    for text, want in steps.items():
        assert ck.lacking(text) == want, text
        assert ck.lacks(text) == bool(want), text
    assert PrefixChecker().lacking("<alpha>") == () and not PrefixChecker().lacks("<alpha>")


def test_the_witness_the_decoder_writes_for_a_lacking_requirement_differs_between_answers(cat):
    """Answers that lack the same requirements get witnesses drawn among `variants` (operator of the group,
    window in the horizon's range, field order), each still finishing the answer compliant; the same answer
    gets the same witness. Control: with one variant every such answer gets the same term."""
    b = dict(id="t1", mechanism="volume_surge", horizon=21, input_rule="use_vwap", structure="ranked",
             forbidden="no_argext")
    c = compile_brief(b, cat, TOL)
    starts = [f"<alpha>rank({x}" for x in ("close", "open", "high - low", "returns", "close / open", "high",
                                             "low", "close - open", "returns * returns", "open - close")]

    def completions(variants: int) -> list[str]:
        ck = ContractChecker(c, b, cat, TOL, variants=variants)
        out = []
        for s in starts:
            suffix = ck.completion(s)
            assert suffix is not None and ck.state(s + suffix) == "done", s
            assert check(b, parse((s + suffix)[7:-8]), cat, TOL).ok, s + suffix
            out.append(suffix)
        return out

    drawn = completions(8)
    assert len(set(drawn)) >= 4, drawn
    assert drawn == completions(8)                                 # a hash of the answer, not a clock
    assert len(set(completions(1))) == 1                           # control: one witness for every answer


def test_brief_decoding_keeps_each_rows_own_brief_and_leaves_free_text_to_the_grammar(cat):
    """Sampled answers (an untrained policy, so the contract does all the steering): every answer that ends
    valid passes every hard check of its own brief, with briefs of different contracts side by side in a
    micro-batch; a prompt that is no catalogue brief is answered under the grammar alone, exactly as
    `decoding: grammar` answers it; an unsatisfiable catalogue brief is refused before sampling."""
    train, _, _ = generate(cat, Briefs(train=24, holdout=8, holdout_family_share=0.15, horizon_tolerance=TOL), 5)
    pol = _tiny(96, [b["text"] for b in train])
    limits, variants = load_params().dsl.limits, load_params().policy.witness_variants
    set_decoding(pol, "brief", limits, TOL, variants)
    out = pol.generate(train, n=2, temperature=1.0, seed=1)
    assert out == pol.generate(train, n=2, temperature=1.0, seed=1)       # seeded
    grammar = PrefixChecker()
    valid = 0
    for b, answers in zip(train, out):
        for a in answers:
            if grammar.state(a) == "done":
                valid += 1
                ast = parse(a.strip()[len("<alpha>"):-len("</alpha>")])
                assert check(b, ast, cat, TOL).ok, (b["id"], a, check(b, ast, cat, TOL).failed)
    assert valid >= len(train), valid                  # most answers end valid (the forced completion)
    # control: the grammar alone lets the same policy end valid answers that break their brief
    set_decoding(pol, "grammar", limits, TOL)
    loose = pol.generate(train, n=2, temperature=1.0, seed=1)
    assert any(grammar.state(a) == "done" and not check(b, parse(a.strip()[7:-8]), cat, TOL).ok
               for b, answers in zip(train, loose) for a in answers)
    set_decoding(pol, "brief", limits, TOL)
    # traced (as the RL trainer samples): the same answers, and the update's log-probabilities are those of
    # the restricted distribution (tests/test_grammar_decoding.py checks the formula on a hand-made case)
    texts = [b["text"] for b in train[:6]]
    traced = pol.generate(train[:6], n=2, temperature=1.0, seed=4, trace=True)
    traces = [t for g in pol.last_traces for t in g]
    assert traced == pol.generate(train[:6], n=2, temperature=1.0, seed=4)
    flat_b, flat_a = [t for t in texts for _ in range(2)], [a for g in traced for a in g]
    plain = [Trace(t.ids, tuple(() for _ in t.refused)) for t in traces]     # the sampled tokens, unrestricted
    lp0, _, m0, _, _ = pol.answer_forward(flat_b, flat_a, traces=plain)
    lp1, _, m1, own, forced = pol.answer_forward(flat_b, flat_a, traces=traces)
    assert bool((forced == (m0 & ~m1)).all())            # the forced tokens, with their own log-probabilities
    torch.testing.assert_close(own[m0], lp0[m0])
    assert bool((m1 <= m0).all()) and bool((m1 < m0).any())                     # forced tokens leave the mask
    assert bool((lp1[m1] >= lp0[m1] - 1e-5).all()) and bool((lp1[m1] > lp0[m1] + 1e-3).any())
    free_text = "Design an alpha from prices only."
    assert not pol.contracts.reads(free_text) and pol.contracts.reads(train[0])
    # the record's fields are the contract, not its text read back: a catalogue brief's text alone is the
    # grammar's (the decoder does not parse prompts), and a record keeps its fields under any wording
    assert not pol.contracts.reads(train[1]["text"])
    assert pol.contracts.reads({**train[2], "text": "In my own words: " + free_text})
    ruled = pol.generate([free_text], n=4, temperature=1.0, seed=2)
    set_decoding(pol, "grammar", limits, TOL)
    assert ruled == pol.generate([free_text], n=4, temperature=1.0, seed=2)
    bad = next(b for b in _combos(cat) if contradicts(cat, b))
    set_decoding(pol, "brief", limits, TOL)
    with pytest.raises(BriefError, match="cannot be kept together"):
        pol.generate([{**bad, "risk": cat.ids("risks")[0], "text": render(cat, {**bad, "risk": cat.ids("risks")[0]})}],
                     n=1, seed=0)


def test_the_rules_declared_once_judge_as_the_hand_written_check_did(cat):
    """The compliance check is derived from the contract's one statement of the rules (`contract.failure` on
    each check's part); an independently written check (`tests/reference_compliance.py`) gives the
    same verdict, check by check, on formulas of both kinds: each brief's witnesses and their variants (built
    to comply) and random formulas (which mostly do not), under 300 drawn briefs; the merged contract holds
    exactly when every check passes; and `contradicts` (the contract's `contradiction`) refuses exactly the
    combinations the hand-written rule refused."""
    import reference_compliance as ref
    from alphagym.briefs.contract import holds

    rng = np.random.default_rng(3)
    combos = _combos(cat)
    limits = Limits()
    kinds = {True: 0, False: 0}
    for k in range(300):
        b = {**combos[rng.integers(len(combos))], "id": f"h{k}"}
        assert contradicts(cat, b) == ref.contradicts(cat, b), b
        if contradicts(cat, b):
            continue
        c = compile_brief(b, cat, TOL)
        texts = [*witnesses(c, limits), *built(c, limits, 1 + k % 7),
                 *(random_formula(int(rng.integers(1 << 30)), max_window=60) for _ in range(4))]
        for text in texts:
            ast = parse(text)
            got = check(b, ast, cat, TOL)
            assert got.checks == ref.check(b, ast, cat, TOL), (b, text, got.reasons)
            assert holds(c, ast) == got.ok, (b, text)
            kinds[got.ok] += 1
    assert kinds[True] >= 300 and kinds[False] >= 300, kinds


def test_a_horizon_beyond_the_longest_window_is_named_as_such(cat):
    """A brief whose horizon asks for a longer window than the formula language allows is refused naming the
    limit, not as fields that contradict each other; a horizon within it compiles (the control)."""
    b = dict(id="h0", mechanism="reversal", horizon=999, input_rule="price_only", structure="ranked",
             forbidden="no_argext")
    with pytest.raises(BriefError, match="horizon 999 needs a window of at least 666 sessions; a formula's windows "
                                         "are at most 252"):
        compile_brief(b, cat, TOL)
    compile_brief({**b, "horizon": 252}, cat, TOL)
