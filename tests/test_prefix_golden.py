"""The grammar checker's answers are pinned: every character prefix of 480 answers (well-formed formulas,
the same with characters dropped, doubled or replaced, and strings of DSL pieces) has the state the
recursive-descent checker gave when the file was written (`tests/data/prefix_golden.jsonl`), and each
formula the same full-parse outcome (its canonical text, or its error's rule and position). A change that
makes the checker or the parser faster must leave every one of them as it was; a change to the grammar
itself rewrites the file on purpose:

    PYTHONPATH=src python tests/test_prefix_golden.py
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from alphagym.dsl.canonical import fields_used
from alphagym.dsl.errors import DslError
from alphagym.dsl.parser import parse
from alphagym.dsl.prefix import _CLOSING_PIECES, CLOSE, OPEN, PrefixChecker, hopeless
from alphagym.dsl.printer import plain
from alphagym.dsl.random_formula import random_formula

GOLDEN = Path(__file__).parent / "data" / "prefix_golden.jsonl"
_STATE = {"dead": "x", "open": "o", "done": "d"}
_CHARS = list("abcdelmnorstuvwy_0123456789.,()+-*/^<>=!|&?: ")
_PIECES = ["rank(", "ts_mean(", "ts_corr(", "delay(", "sign(", "scale(", "indneutralize(", "IndClass.sector",
           "close", "volume", "returns", "vwap", "adv20", "cap", ", 5", ", 252", ", 300", ")", " - ", " * ", " / ",
           " ? ", " : ", " < ", " || ", "-", "1", "0.5", "1e-3", "(", "abs(", "log(", "min(", "max(", "ts_rank("]


def corpus() -> list[str]:
    """The formulas whose prefixes are checked: 160 random formulas of the registry (depth up to 6), each
    also mutated once, and 160 strings of DSL pieces (mostly not formulas)."""
    rng = np.random.default_rng(20261203)
    out: list[str] = []
    for seed in range(160):
        try:               # long windows now and then: some breach the lookback limit, and are drawn again
            f = random_formula(seed, max_depth=2 + seed % 5, max_window=120 if seed % 7 == 0 else 30)
        except DslError:
            f = random_formula(seed, max_depth=2 + seed % 5)
        out.append(f)
        chars = list(f)
        for _ in range(1 + seed % 3):
            at = int(rng.integers(len(chars)))
            kind = seed % 3
            if kind == 0:
                del chars[at]
            elif kind == 1:
                chars.insert(at, chars[at])
            else:
                chars[at] = _CHARS[int(rng.integers(len(_CHARS)))]
        out.append("".join(chars))
    for _ in range(160):
        out.append("".join(_PIECES[int(i)] for i in rng.integers(len(_PIECES), size=int(rng.integers(2, 14)))))
    return out


def outcome(formula: str) -> str:
    try:
        return "ok " + plain(parse(formula))
    except DslError as exc:
        return f"{exc.rule} {exc.pos} {exc}"


def states(checker: PrefixChecker, formula: str) -> str:
    answer = f"{OPEN}{formula}{CLOSE}"
    return "".join(_STATE[checker.state(answer[:k])] for k in range(1, len(answer) + 1))


def test_every_prefix_state_and_parse_outcome_is_as_pinned():
    rows = [json.loads(line) for line in GOLDEN.read_text().splitlines()]
    formulas = corpus()
    assert [r["formula"] for r in rows] == formulas
    checker = PrefixChecker()
    changed = [(r["formula"], k) for r in rows
               for k, (a, b) in enumerate(zip(states(checker, r["formula"]), r["states"], strict=True)) if a != b]
    assert not changed, f"{len(changed)} prefixes changed state, e.g. {changed[:3]}"
    # the same prefixes in a shuffled order, so that what the checker keeps from one text (the calls it
    # finished, the tokens before a text's last space) meets every other text before its own prefixes
    order = [(r["formula"], k) for r in rows for k in range(1, len(r["states"]) + 1)]
    np.random.default_rng(0).shuffle(order)
    fresh, pinned = PrefixChecker(), {r["formula"]: r["states"] for r in rows}
    changed = [(f, k) for f, k in order if _STATE[fresh.state(f"{OPEN}{f}{CLOSE}"[:k])] != pinned[f][k - 1]]
    assert not changed, f"{len(changed)} prefixes changed state in a shuffled order, e.g. {changed[:3]}"
    parsed = [(r["formula"], outcome(r["formula"]), r["parse"]) for r in rows if outcome(r["formula"]) != r["parse"]]
    assert not parsed, parsed[:3]
    # the pinned set reaches every state and both outcomes, so it can catch a change in either
    joined = "".join(r["states"] for r in rows)
    assert {"x", "o", "d"} <= set(joined) and sum(r["parse"].startswith("ok") for r in rows) > 100
    assert sum(not r["parse"].startswith("ok") for r in rows) > 100


def test_the_checkers_tree_is_the_full_parses_on_every_prefix():
    """`PrefixChecker.parsed` takes the prefix-mode parse's tree (with the whole formula's depth and lookback
    checked) instead of parsing again: on every character prefix of the corpus, in a shuffled order (its
    finished calls reused across texts), it is the tree `parse` gives, or None exactly where `parse` raises
    or the formula reads a field the panel lacks."""
    texts = [f[:k] for f in corpus() for k in range(1, len(f) + 1)]
    np.random.default_rng(1).shuffle(texts)
    checker, wrong, trees = PrefixChecker(), [], 0
    for text in texts:
        try:
            want = parse(text)
            if any(f in checker.unavailable for f in fields_used(want)):
                want = None
        except DslError:
            want = None
        trees += want is not None
        if checker.parsed(text) != want:
            wrong.append(text)
    assert trees > 200 and not wrong, (len(wrong), wrong[:3])


def test_hopeless_pieces_are_dead():
    """The completion search skips a piece `hopeless` calls dead without parsing it: on every open character
    prefix of every second corpus formula, each piece it skips is dead to the checker. Negative control: a rule
    that also skips `)` after an operand inside a call (`rank(close` + `)` is open, not dead) is caught."""
    checker = PrefixChecker()
    skipped, wrong, caught = 0, [], 0
    for formula in corpus()[::2]:
        for k in range(len(formula) + 1):
            body = formula[:k]
            if checker.state(OPEN + body) != "open":
                continue
            for piece in _CLOSING_PIECES:
                dead = checker.state(OPEN + body + piece) == "dead"
                if hopeless(body, piece):
                    skipped += 1
                    if not dead:
                        wrong.append((body, piece))
                elif piece == ")" and not dead and body.rstrip()[-1:].isalnum():
                    caught += 1          # what the wrong rule would have skipped
    assert not wrong, f"{len(wrong)} skipped pieces are not dead, e.g. {wrong[:3]}"
    assert skipped > 5000 and caught > 100, (skipped, caught)


def test_a_constant_call_cut_short_at_the_depth_limit_is_dead():
    """`ts_delta( 2` can only vary once an operator goes over the literal (`ts_delta( 2 - close, 5)`): at the
    depth limit (16) there is no level left for it, so the prefix is dead, and no completion exists (the fuzz
    met answers stuck there, writing blanks to the cap). One level higher it is open and completes. Controls: a
    field in the same slot is open at the limit; a literal in a call it does not make constant (`rank(ts_delta(
    close, 5) * 2`) is open."""
    checker = PrefixChecker()
    deep, room = OPEN + "rank(" * 14, OPEN + "rank(" * 13
    assert checker.state(deep + "ts_delta(close, 5)" + ")" * 14 + CLOSE) == "done"     # the limit, met
    for cut in ("ts_delta( 2", "ts_delta(( 2)", "ts_corr(close, 2"):
        assert checker.state(deep + cut) == "dead", cut
        assert checker.completion(deep + cut) is None
        assert checker.state(room + cut) == "open", cut
        done = checker.completion(room + cut)
        assert done is not None and checker.state(room + cut + done) == "done", cut
    assert checker.state(deep + "ts_delta( close") == "open"
    assert checker.state(OPEN + "rank(" * 12 + "ts_delta(close, 5) * 2") == "open"


if __name__ == "__main__":
    checker = PrefixChecker()
    GOLDEN.write_text("".join(json.dumps({"formula": f, "states": states(checker, f), "parse": outcome(f)}) + "\n"
                              for f in corpus()))
    print(f"wrote {GOLDEN}")


def _walked(monkeypatch: pytest.MonkeyPatch, terms: int) -> int:
    """Operands the prefix parse reads to judge one more token after an open chain of `terms` calls, once
    the chain one token shorter was judged."""
    from alphagym.dsl import parser

    calls = [0]
    unary = parser._Parser.unary

    def counted(self: parser._Parser) -> object:
        calls[0] += 1
        return unary(self)

    checker = PrefixChecker()
    base = OPEN + "rank(" + " + ".join(["ts_mean(volume, 21)"] * terms)
    assert checker.state(base) == "open" and checker.state(base + " +") == "open"
    monkeypatch.setattr(parser._Parser, "unary", counted)
    assert checker.state(base + " + v") == "open"
    monkeypatch.setattr(parser._Parser, "unary", unary)
    return calls[0]


def test_judging_a_token_after_an_open_chain_does_not_read_the_chain_again(monkeypatch):
    """The parse of a text one token longer resumes its open operator chain at the last operator kept
    (`FinishedCalls.resume`): the operands it reads do not grow with the chain. Control: without the chain's
    checkpoints (`CHAIN_MARKS = 0`) it reads every term again."""
    from alphagym.dsl import parser

    assert _walked(monkeypatch, 3) == _walked(monkeypatch, 12) <= 3      # 12 terms: near the depth limit
    monkeypatch.setattr(parser, "CHAIN_MARKS", 0)
    short, long = _walked(monkeypatch, 3), _walked(monkeypatch, 12)
    assert long >= short + 9, (short, long)
