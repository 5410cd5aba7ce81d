"""Viable prefixes of an answer: can this text still become `<alpha>FORMULA</alpha>` with a formula that
parses? The grammar-constrained decoder (`policy.decoding: grammar`) asks it of every token it samples.

A prefix is viable when the parser, in prefix mode, either accepts it as a complete formula or fails only
because the text ended (the error is at the end position). Prefix mode checks at the breaking token what
the full parse checks at a call's closing ')' or at the end (unknown function, too many arguments, a window
that is not a literal in [1, max_window], an IndClass group outside indneutralize, the depth and lookback
limits counted with what the open calls and operators will still add), so a viable prefix has a
completion and the decoder does not walk into a dead end it cannot leave. Measured on 2,000 answers of
the tiny SFT policy: every one of 23,582 viable prefixes has one. Not proven in general: random walks
over DSL pieces still find rare deep prefixes without one (about 1% of their viable states), where two
rules meet (a `sign` of a positive quantity whose rescue needs one more level than the depth limit
leaves; `-(...)`, whose level is known only once the parenthesis is read). A name cut off at the end ("ts_co") is viable
when some field or function starts with it; it is tried completed as a field and as a call. The parser
also refuses calls that are constant by construction (`dsl.degenerate`: `sign` of a quantity positive on
almost every day, an operator over literals, `ts_corr(x, x)`), each where no continuation could rescue it.
What the parser cannot see is left to the verifier: a formula may still parse and carry no signal (a
static book, a quantity positive for every stock by the data rather than by construction).
"""

from __future__ import annotations

import re
from functools import lru_cache

from alphagym.dsl.ast import Node
from alphagym.dsl.errors import DslError
from alphagym.dsl.lexer import Token, tokenize
from alphagym.dsl.parser import FinishedCalls, Limits, _Parser, limited
from alphagym.dsl.registry import ALIASES, FIELDS, GROUPS, OPS
from alphagym.panel import DSL_FIELDS

OPEN, CLOSE = "<alpha>", "</alpha>"
_LEADING_SPACE = 4            # a chat model may start with a space or a newline; not with a page of them
_PARTIAL_NAME = re.compile(r"(?<![A-Za-z0-9_.])[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]*)?\Z")
FUNCTIONS = tuple(sorted({*(n for n, s in OPS.items() if s.infix is None and n not in ("neg", "where")),
                           *ALIASES}))
# tried in this order when finishing an answer: close what is open, then supply what is missing
# (a missing operand is ` returns` before ` 1`: a literal would leave `rank( 1` a call the parser refuses as
# constant; " - returns" rescues one that is, e.g. `sign(volume`, by making its argument vary)
_CLOSING_PIECES = (CLOSE, ")", ", 5", ", 1", " : 0", " returns", " 1", "1", ", IndClass.sector", "IndClass.sector",
                   " close", " - returns", "|", "&", "=")
_NO_REPEAT = frozenset({" returns", " 1", " close", " - returns"})
_HALVES = frozenset({"1", "|", "&", "="})
_HALF_NUMBER = re.compile(r"((?<![0-9A-Za-z_.])\.|[0-9.][eE][+-]?)\Z")     # \Z: `$` also matches before a final newline
_HALF_OPERATOR = {"|": "|", "&": "&", "!": "=", "=": "="}
_WHOLE_OPERATORS = frozenset({"<=", ">=", "==", "!=", "||", "&&"})
_INDCLASS = tuple(f"indclass.{g}" for g in GROUPS)
# the last character of a formula after which an operand is due (an operator, an open call, a comma, '?', ':')
OPERAND_DUE = frozenset("(,+-*/^<>=!&|?:")
# closing pieces that continue a written operand, and those that are an operand
_AFTER_OPERAND = frozenset({CLOSE, ")", ", 5", ", 1", " : 0", ", IndClass.sector"})
_OPERANDS = frozenset({" returns", " 1", "IndClass.sector", " close"})


def hopeless(body: str, piece: str) -> bool:
    """Whether appending the closing piece `piece` to the formula `body` surely breaks it, read off the text
    alone: a piece that continues an operand where one is due (`rank(` + `)`), an operand after an operand
    (`close` + ` 1`), `</alpha>` with a call still open, `)` or `,` with none open, `:` without `?`. Each such
    text fails to parse at the piece, before its end, so the checker would call it dead; the completion search
    skips them without a parse (`test_hopeless_pieces_are_dead` checks the claim on every prefix of a sample)."""
    if piece not in _AFTER_OPERAND and piece not in _OPERANDS:
        return False
    end = body.rstrip()[-1:]
    due = end == "" or end in OPERAND_DUE
    if piece in _OPERANDS:
        return not due
    if due:
        return True
    depth = body.count("(") - body.count(")")
    if piece == CLOSE:
        return depth != 0
    if piece == " : 0":
        return "?" not in body
    return depth <= 0


def last_blank(text: str, end: int) -> int:
    """The position of the last whitespace character of `text[:end]`, or -1: no token spans one, so lexing
    (and what is read off the tokens) can resume there."""
    return max(text.rfind(" ", 0, end), text.rfind("\t", 0, end), text.rfind("\n", 0, end), text.rfind("\r", 0, end))


def _at_end(pattern: re.Pattern[str], text: str) -> re.Match[str] | None:
    """`pattern.search(text)` for a pattern anchored at the end (`\\Z`) whose match holds no whitespace: the
    search starts at the text's last whitespace, so its cost does not grow with the text (its lookbehind
    still sees the character before)."""
    return pattern.search(text, max(0, last_blank(text, len(text))))


def partial_name(text: str) -> re.Match[str] | None:
    """The name cut off at the end of `text` (`ts_co`, `IndClass.`), if any."""
    return _at_end(_PARTIAL_NAME, text)


def half_token(text: str) -> str | None:
    """What completes a token cut in half at the end of `text` ('1' after '1.' or '1e-', '|' after '|', '='
    after '!'), or None."""
    if _at_end(_HALF_NUMBER, text):
        return "1"
    # the last character of a whole two-character operator is no half: `x <=` is complete, not `x <==`
    return None if text[-2:] in _WHOLE_OPERATORS else _HALF_OPERATOR.get(text[-1:])


def halves_completed(formula: str) -> str:
    """The formula with a token cut in half at its end completed ('x |' -> 'x ||', 'x <.' -> 'x <.1'), or
    unchanged when there is none."""
    half = half_token(formula)
    return formula + half if half is not None else formula


class PrefixChecker:
    """`state(text)` of an answer being written: 'dead', 'open' (viable, not finished) or 'done'
    (`<alpha>FORMULA</alpha>` with a formula that parses; only the end token may follow). Fields the panel
    lacks (`cap` unless it carries it) are unknown names here, as they are to the verifier."""

    def __init__(self, limits: Limits | None = None, fields: tuple[str, ...] = DSL_FIELDS,
                 reuse: bool = True, share: PrefixChecker | None = None) -> None:
        self.limits = limits or Limits()
        self.fields = tuple(f for f in FIELDS if f in fields)
        self.unavailable = frozenset(FIELDS) - frozenset(self.fields)
        self.state = lru_cache(maxsize=200_000)(self._state)
        # a text is checked again with one more token (and with each candidate token): its calls finished
        # before are reused, and only the text after its last whitespace is lexed again
        # (`reuse=False`: every text parsed from scratch, the reference `benchmarks/bench_grammar.py` times)
        # (`share`: a checker with the same limits and fields whose parses these are too; a brief's checker
        # shares the grammar's, since a parse does not depend on the brief)
        self.finished = (share.finished if share is not None else FinishedCalls()) if reuse else None
        self.heads: dict[str, list[Token]] | None = (share.heads if share is not None else {}) if reuse else None
        # a brief's checker lexes a text twice in one state check (its contract's facts, then the parse)
        self._lexed: tuple[str, list[Token]] | None = None
        self._parsed: tuple[str, Node | None] | None = None
        # the sampler asks again for texts it has met (every row past half its budget, at every token;
        # answers that repeat across a rung's steps): a search costs 2-7 ms, a repeat nothing
        self.completion = lru_cache(maxsize=50_000)(self.completion)  # type: ignore[method-assign]

    def _state(self, text: str) -> str:
        s = text.lstrip(" \t\n")
        if len(text) - len(s) > _LEADING_SPACE:
            return "dead"
        if len(s) < len(OPEN):
            return "open" if OPEN.startswith(s) else "dead"
        if not s.startswith(OPEN):
            return "dead"
        body = s[len(OPEN):]
        end = body.find(CLOSE)
        if end >= 0:
            return "done" if body[end + len(CLOSE):] == "" and self.finishes(body[:end]) else "dead"
        if self.continues(body):
            return "open"
        lt = body.rfind("<")           # '<' is also the DSL's less-than: try it as the closing tag's start
        if lt >= 0 and CLOSE.startswith(body[lt:]) and self.finishes(body[:lt]):
            return "open"
        return "dead"

    def continues(self, formula: str) -> bool:
        """An unfinished formula may go on: here, it is `viable`; a brief's checker adds its contract."""
        return self.viable(formula)

    def finishes(self, formula: str) -> bool:
        """A formula may end the answer: here, it is `complete`; a brief's checker adds its contract."""
        return self.complete(formula)

    def completion(self, text: str, max_pieces: int = 64, budget: int = 1000) -> str | None:
        """A short suffix that finishes an open answer (`text + suffix` is done), or None. Depth-first over
        pieces, first choice first: finish a cut-off name or token, then append the first of a few closing
        pieces (`</alpha>`, `)`, a window, an operand, the rest of a ternary, a group) that keeps the answer
        viable, backing up when a branch runs out (`ts_corr(252` must not take `, 5`: a literal pair is
        constant, so only ` - returns` after the literal rescues it). The first branch is the greedy
        completion, so backing up costs only where greedy fails; `budget` caps the prefixes tried (a search
        that runs out takes about 0.2 s on this machine). What the
        grammar sampler writes when an answer reaches the last part of its token budget still open."""
        if self.state(text) != "open":
            return None
        start = text
        if len(start.lstrip(" \t\n")) < len(OPEN):
            start += OPEN[len(start.lstrip(" \t\n")):]
        seen: set[str] = set()
        left = [budget]

        def search(out: str, depth: int, last: str) -> str | None:
            if self.state(out) == "done":
                return out
            if depth >= max_pieces or left[0] <= 0:
                return None
            for k in range(len(CLOSE) - 1, 0, -1):               # a cut-off closing tag
                if out.endswith(CLOSE[:k]) and self.state(out + CLOSE[k:]) == "done":
                    return out + CLOSE[k:]
            m = partial_name(out)
            names = [(out[: m.start()] + c, "") for c in self._search_names(m.group(0).lower())] if m else []
            # a bare digit or operator character only finishes a token cut in half ('1.', '1e-', '|'), and
            # an operand after the same operand is a loop
            half = half_token(out)
            rescues = self.rescues(out)
            closing = (CLOSE, *(r for r in self.repairs(out) if r not in out), *_CLOSING_PIECES[1:], *rescues)
            body = out[out.find(OPEN) + len(OPEN):]
            pieces = [(out + p, p) for p in closing if (p not in _HALVES or p == half)
                      and not (p == last and (p in _NO_REPEAT or p in rescues)) and not hopeless(body, p)]
            for nxt, piece in [*names, *pieces]:
                if nxt == out or nxt in seen:
                    continue
                seen.add(nxt)
                left[0] -= 1
                if left[0] < 0:
                    return None
                if self.state(nxt) != "dead":
                    done = search(nxt, depth + 1, piece)
                    if done is not None:
                        return done
            return None

        done = search(start, 0, "")
        return None if done is None else done[len(text):]

    def allows(self, name: str) -> bool:
        """Whether a field (`close`, `adv20`) or a call (`ts_mean(`) may appear at all: always, here; a brief's checker
        refuses its forbidden ones, so a cut-off name whose every completion is forbidden is not viable."""
        return True

    node_limited = False            # a brief's checker with a node limit: the sampler watches its rows' nodes

    def node_room(self, answer: str) -> int | None:
        """For a done answer (`<alpha>FORMULA</alpha>`): how many nodes its formula leaves under a node limit;
        None where there is no limit (here: never one; a brief's checker may have one, `max_nodes`)."""
        return None

    def lacks(self, text: str) -> bool:
        """Whether an open answer still lacks something only a `repairs` piece supplies (never, here; a
        brief's checker: a requirement unmet). Once false it stays false as text is appended."""
        return bool(self.lacking(text))

    def lacking(self, text: str) -> tuple[str, ...]:
        """The brief's checks (`briefs.catalogue.CHECKS`) whose requirement an open answer has not met yet:
        none here; a brief's checker names them."""
        return ()

    def repairs(self, text: str) -> tuple[str, ...]:
        """Pieces the completion search tries right after the closing tag, before the grammar's own: none
        here; a brief's checker (`briefs.checker.ContractChecker`) offers formulas that meet its brief."""
        return ()

    def rescues(self, text: str) -> tuple[str, ...]:
        """Pieces the completion search tries after the grammar's own, where those run out: none here; a brief's
        checker offers ` - F` for each field F the answer already uses, which makes a constant call vary where
        ` - returns` would bring a field the brief does not allow (`abs(0.001` under "exactly two fields")."""
        return ()

    def complete(self, formula: str) -> bool:
        """The formula parses in full (limits included) and reads only fields the panel has."""
        return self.parsed(formula) is not None

    def parsed(self, formula: str) -> Node | None:
        """The formula's tree when it is `complete`, else None. The last answer is kept: a brief's checker
        reads the tree of the formula it has just found complete."""
        if self._parsed is not None and self._parsed[0] == formula:
            return self._parsed[1]
        ast = None
        if formula.strip():
            try:
                # the prefix-mode parse to the end is the full parse's tree (it checks each rule sooner, not
                # other rules), with the whole formula's depth and lookback limits checked as `parse` does
                ast = limited(self._prefix_parse(formula), self.limits, formula)
            except DslError:
                ast = None
        self._parsed = (formula, ast)
        return ast

    def viable(self, formula: str) -> bool:
        """Some continuation of `formula` parses."""
        m = partial_name(formula)
        if m is None:
            if self._parses_to_end(formula):
                return True
            # a token cut in half ('|' of '||', '!' of '!=', '.' of '.5', '1e-' of '1e-5'): try it completed
            whole = halves_completed(formula)
            return whole != formula and self._parses_to_end(whole)
        head, name = formula[: m.start()], m.group(0).lower()
        return any(self._parses_to_end(head + c) for c in self._completions(name))

    def _search_names(self, name: str) -> list[str]:
        """The ways the completion search finishes a cut-off name: `_completions` here (to the parser, which
        call a name becomes does not matter); a brief's checker adds every other call it allows."""
        return self._completions(name)

    def _completions(self, name: str) -> list[str]:
        """One field-like and one call-like completion of a cut-off name (which one does not matter to the
        parser), plus the adv and IndClass forms: the first of each that `allows`."""
        out = []
        field = next((f for f in self.fields if f.startswith(name) and self.allows(f)), None)
        if field:
            out.append(field)
        fn = next((f for f in FUNCTIONS if f.startswith(name) and self.allows(ALIASES.get(f, f) + "(")), None)
        if fn:
            out.append(fn + "(")
        adv = "adv20" if "adv20".startswith(name) else name if re.fullmatch(r"adv\d+", name) else None
        if adv is not None and self.allows(adv):
            out.append(adv)
        out += [c for c in _INDCLASS if c.startswith(name)][:1]
        return out

    def _prefix_parse(self, formula: str) -> Node:
        """Parse in prefix mode (raises the DslError where the text breaks), reusing what was parsed before."""
        return self._parser(formula).parse()

    def _parser(self, formula: str) -> _Parser:
        """A prefix-mode parser of the formula, on its tokens and the calls finished before (a DslError where
        it does not lex)."""
        return _Parser(formula, self.limits, prefix=True, unavailable=self.unavailable,
                       tokens=self._tokens(formula), finished=self.finished)

    def _tokens(self, formula: str) -> list[Token]:
        """`tokenize(formula)`, resumed after the formula's last whitespace from the tokens before it."""
        if self._lexed is not None and self._lexed[0] == formula:
            return self._lexed[1]
        cut = last_blank(formula, len(formula))
        limits = self.limits
        if self.heads is None or cut <= 0 or len(formula) > limits.max_chars:
            return tokenize(formula, limits.max_tokens, limits.max_chars)
        tokens = tokenize(formula, limits.max_tokens, limits.max_chars, head=self._head(formula[:cut]), start=cut)
        self._lexed = (formula, tokens)
        return tokens

    def _head(self, text: str) -> list[Token]:
        """The tokens of `text` (no 'end'), which a whitespace follows in the text being lexed: lexed before,
        or resumed from the longest text before one of its own whitespace characters that was (the completion
        search appends a witness, ` + rank(ts_corr(close, volume, 10))`, whose every space starts a new head)."""
        assert self.heads is not None
        head = self.heads.get(text)
        if head is not None:
            return head
        limits, cut, missed = self.limits, len(text), [len(text)]
        while True:                    # back to the last whitespace before which the text was lexed
            cut = last_blank(text, cut)
            head = self.heads.get(text[:cut]) if cut > 0 else []
            if head is not None:
                break
            missed.append(cut)
        if len(self.heads) + len(missed) >= 100_000:
            self.heads.clear()
        for end in reversed(missed):   # then forward, keeping each head on the way
            head = tokenize(text[:end], limits.max_tokens, limits.max_chars, head=head, start=max(cut, 0))[:-1]
            self.heads[text[:end]] = head
            cut = end
        return head

    def depth_floor(self, formula: str) -> int:
        """The least depth any completion of the formula can have: the deepest level its prefix parse checked
        (a subtree's depth plus the levels the enclosing unfinished nodes still add); 0 where it does not lex."""
        try:
            p = self._parser(formula)
        except DslError:
            return 0
        try:
            p.parse()
        except DslError:
            pass
        return p.deepest

    def _parses_to_end(self, formula: str) -> bool:
        try:
            self._prefix_parse(formula)
        except DslError as exc:
            return exc.pos == len(formula)
        return True
