"""The decoder's checker of a brief (`policy.decoding: brief`): the contract (`briefs.contract`) kept token by token.

`compile_brief` turns a brief's four checkable fields and its horizon (`briefs/compliance.py`) into a
`Contract`; `ContractChecker` is the grammar's prefix checker (`dsl.prefix.PrefixChecker`) with the
contract added, so the sampler that keeps answers grammatical keeps them compliant too:

- **An answer is done only when it complies**: `<alpha>FORMULA</alpha>` is 'done' when the formula parses
  and passes every hard check (`compliance.check`: mechanism, horizon, input rule, structure, forbidden);
  a formula that parses but breaks one is 'dead'. So every valid answer complies, by construction.
- **A prefix dies at the token that breaks a rule no continuation can repair** (`contract.violation`, on the
  prefix's facts, `briefs.facts`): a forbidden operator or field, an operator used more often than allowed, a window
  longer than the horizon allows, more distinct fields than allowed, a smoothed bare price over more
  sessions than allowed, time-series operators nested deeper than allowed, more nodes than allowed, an
  outermost operator other than the required one, an outermost call closed while a requirement is
  still unmet, or requirements unmet that need more distinct fields or nodes than the brief leaves
  (`fields_needed`, `nodes_needed`: lower bounds, never more than a compliant formula adds after any of its
  prefixes, which a test checks). These counts only grow as text is appended, so a prefix refused here has
  no compliant completion; that is what keeps the sampler from writing into a formula it would have to
  throw away. A name cut off at the end counts as each way it can end (`ended`, `_endings`): `vwa` under
  "two fields" after two fields is refused while it is written, not one token after it, when no
  continuation could save it.
- **Requirements the model has not met are met by the completion** ("must use volume", "exactly one
  ts_corr", the horizon's window): the closing search (`PrefixChecker.completion`) also tries appending
  a witness as an operand (` + W`): first one built for what the prefix still lacks within the room it
  leaves (`contract.residual`), then the brief's own, short formulas that meet the whole contract by themselves;
  where a time-series call is open and the horizon's window still lacking, first that window (`, 168`). The
  witnesses come from a fixed library of small formulas (`witnesses.library`) filtered by the contract's facts; a
  brief for which the library has none is a `BriefError` when it is compiled, which the brief generator
  never draws (`generate.contradicts`; a test checks that the two agree on every catalogue combination).

Whether a prefix has a compliant completion is not decided exactly (as the grammar's own viability is
not): a prefix the rules above keep may still find none in the search budget, and its answer then ends
invalid rather than non-compliant. The sampled distribution is the model's distribution restricted to the
tokens this checker keeps, renormalised (`policy.grammar`).

Invariants: a 'done' answer passes every hard check of its brief; a prefix refused is one no appended text
can make compliant; `lacking` is empty exactly when `lacks` is false.
"""


from __future__ import annotations

import math
import re
import zlib
from collections.abc import Iterator, Mapping
from typing import Any

from alphagym.briefs.catalogue import CHECKS, Catalogue
from alphagym.briefs.contract import (
    UNLIMITED,
    Contract,
    brief_specs,
    check_contracts,
    holds,
    merge_specs,
    residual,
    unmet,
    unmet_ops,
    violation,
)
from alphagym.briefs.facts import Facts, Walk, ended, scan
from alphagym.briefs.witnesses import built, idea_witnesses, witnesses
from alphagym.dsl.canonical import node_count
from alphagym.dsl.errors import DslError
from alphagym.dsl.lexer import Token
from alphagym.dsl.parser import Limits
from alphagym.dsl.prefix import (
    CLOSE,
    FUNCTIONS,
    OPEN,
    OPERAND_DUE,
    PrefixChecker,
    halves_completed,
    last_blank,
    partial_name,
)
from alphagym.dsl.registry import ALIASES
from alphagym.errors import BriefError
from alphagym.panel import DSL_FIELDS


def compile_brief(brief: Mapping[str, Any], catalogue: Catalogue, tolerance: float,
                  limits: Limits | None = None) -> Contract:
    """A brief's contract; a BriefError naming the brief when no formula of the witness library meets it
    (its fields contradict each other, or ask for more than a short formula can give)."""
    c = merge_specs(brief_specs(brief, catalogue), int(brief["horizon"]), tolerance)
    name = f"brief {brief['id']}: " if brief.get("id") else ""
    longest = (limits or Limits()).max_window
    if c.window[0] > longest:         # no field can help: say so rather than that the fields disagree
        raise BriefError(f"{name}horizon {brief['horizon']} needs a window of at least {math.ceil(c.window[0])} "
                         f"sessions; a formula's windows are at most {longest} (dsl.limits.max_window)")
    if not witnesses(c, limits, 1):
        fields = ", ".join(f"{k}={brief[k]}" for k in ("mechanism", "horizon", "input_rule", "structure", "forbidden"))
        raise BriefError(f"{name}no formula meets this brief ({fields}): its constraints cannot be kept together")
    return c


class ContractChecker(PrefixChecker):
    """The grammar's prefix checker with a brief's contract (module docstring): 'done' only for a compliant
    formula, 'dead' at a prefix that breaks a rule no continuation repairs, and witnesses among the pieces
    its completion search tries."""

    def __init__(self, contract: Contract, brief: Mapping[str, Any], catalogue: Catalogue, tolerance: float,
                 limits: Limits | None = None, fields: tuple[str, ...] = DSL_FIELDS,
                 share: PrefixChecker | None = None, walks: dict[str, tuple[int, Walk]] | None = None,
                 variants: int = 1) -> None:
        super().__init__(limits, fields, share=share)
        self.contract, self.brief, self.catalogue, self.tolerance = contract, brief, catalogue, tolerance
        self.variants = variants         # the witness variants `repairs` draws among (`policy.witness_variants`)
        # text before a whitespace -> (i, the walk before its token i) (`_scan`); a prefix's walk does not
        # depend on the brief, so the checkers of one decoder share theirs (`BriefContracts`)
        self.walks: dict[str, tuple[int, Walk]] = {} if walks is None else walks
        own = idea_witnesses(contract, catalogue.references(str(brief["mechanism"])), self.limits) \
            if "mechanism" in brief else ()
        self.witness_pieces = tuple(f" + {w}" for w in dict.fromkeys([*own, *witnesses(contract, self.limits)]))
        self._idea_share = len(set(own))            # the mechanism's own witnesses lead `witness_pieces`
        self._parts: dict[str, Contract] | None = None          # `check_contracts`, built when first asked
        self.node_limited = contract.max_nodes < UNLIMITED

    def continues(self, formula: str) -> bool:
        # the contract's own rules first: reading the facts costs less than the prefix parse
        return self._keeps(formula) and self.viable(formula)

    def finishes(self, formula: str) -> bool:
        return self.complete(formula) and self._complies(formula)

    def _keeps(self, formula: str) -> bool:
        # a token cut in half is judged completed: 'x |' can only become 'x || ...', which a brief without
        # conditionals refuses (left open, it would be a dead end one token later)
        formula = halves_completed(formula)
        try:
            tokens = self._tokens(formula)
        except DslError:
            return True              # the grammar's own check decides
        f = self._scan(formula, tokens)
        if violation(self.contract, f) is not None:
            return False
        # a name cut off at the end (`vwa`, `vwap`) is not counted by `scan` (it may still grow): judge it as
        # each way it can end would be counted, so that a third field under "two fields" is refused before
        # the answer is written into it
        m = partial_name(formula)
        return m is None or any(violation(self.contract, ended(f, name)) is None
                                for name in self._endings(m.group(0).lower(), f))

    def _endings(self, cut: str, f: Facts) -> Iterator[str]:
        """The ways a cut-off name can end that the contract tells apart (`_completions` gives the parser one of
        each kind): every allowed field it can become (which field decides the distinct-field room), a call
        that meets a requirement still unmet where one can be written from it, then every other allowed call
        it can become, lazily (the first call the parser is given may have used up its count, `ts_corr` under
        "exactly one ts_corr", where `ts_mean` is still free)."""
        c, out = self.contract, self._completions(cut)
        out += [x for x in self.fields if x.startswith(cut) and x not in out and self.allows(x)]
        wanted = {o for g in unmet_ops(c, f.ops) for o in g}
        wanted |= {op for op, lo, _ in c.op_counts if f.ops.get(op, 0) < lo}
        call = next((fn for fn in FUNCTIONS if fn.startswith(cut) and ALIASES.get(fn, fn) in wanted
                     and self.allows(ALIASES.get(fn, fn) + "(")), None)
        if call is not None:
            out.append(call + "(")
        yield from out
        yield from self._other_calls(cut, out)

    def _other_calls(self, cut: str, given: list[str]) -> Iterator[str]:
        """The calls (`op(`) a cut-off name can become that the brief allows, but those in `given`."""
        return (fn + "(" for fn in FUNCTIONS if fn.startswith(cut) and fn + "(" not in given
                and self.allows(ALIASES.get(fn, fn) + "("))

    def _search_names(self, name: str) -> list[str]:
        # a call the name can become may have used up its count (`ts_corr` under "exactly one ts_corr"): the
        # completion search tries the others too, after the parser's own choices
        out = self._completions(name)
        return out + list(self._other_calls(name, out))

    def _complies(self, formula: str) -> bool:
        ast = self.parsed(formula)
        if ast is None:
            return False
        # the merged contract: every check's part at once (`contract.failure`, the compliance check's rules)
        return holds(self.contract, ast)

    def _scan(self, formula: str, tokens: list[Token]) -> Facts:
        """`scan(tokens, len(formula))[0]`, resumed from the walk kept for the longest text before one of the
        formula's whitespace characters: each token the sampler tries, and each witness the completion search
        appends, changes only the end of an answer already read. The walk before the last token ahead of the
        formula's last whitespace is kept (that token is read with the one after it)."""
        end = last_blank(formula, len(formula))
        if end <= 0:
            return scan(tokens, len(formula))[0]
        cut, resume = end, self.walks.get(formula[:end])
        while resume is None and cut > 0:
            cut = last_blank(formula, cut)
            resume = self.walks.get(formula[:cut]) if cut > 0 else None
        toks = tokens[:-1] if tokens and tokens[-1].kind == "end" else tokens
        mark = len(toks)
        while mark and toks[mark - 1].pos >= end:
            mark -= 1
        mark -= 1                            # the last token before the whitespace is read with the one after it
        facts, kept = scan(tokens, len(formula), resume, mark if mark > 0 else None)
        if kept is not None:
            if len(self.walks) >= 100_000:
                self.walks.clear()
            self.walks[formula[:end]] = (mark, kept)
        return facts

    def allows(self, name: str) -> bool:
        c = self.contract
        if re.fullmatch(r"adv\d*", name):        # adv<d> reads ts_mean(close * volume, d) (`scan` counts it so)
            return not {"close", "volume"} & c.forbid_fields and self.allows("ts_mean(") and self.allows("mul(")
        if name.endswith("("):
            op = name[:-1]
            return op not in c.forbid_ops and all(o != op or hi > 0 for o, _, hi in c.op_counts)
        return name not in c.forbid_fields

    def _facts(self, text: str) -> tuple[str, Facts | None]:
        """An answer's formula so far and its facts (None where it does not lex)."""
        s = text.lstrip(" \t\n")
        body = s[len(OPEN):] if s.startswith(OPEN) else ""
        try:
            return body, self._scan(body, self._tokens(body))
        except DslError:
            return body, None

    def node_room(self, answer: str) -> int | None:
        if self.contract.max_nodes >= UNLIMITED:
            return None
        s = answer.strip()
        ast = self.parsed(s[len(OPEN):-len(CLOSE)]) if s.startswith(OPEN) and s.endswith(CLOSE) else None
        return None if ast is None else self.contract.max_nodes - node_count(ast)

    def lacks(self, text: str) -> bool:
        f = self._facts(text)[1]
        return f is None or bool(unmet(self.contract, f.ops, f.fields, f.max_window))

    def lacking(self, text: str) -> tuple[str, ...]:
        """The checks whose own requirements (`check_contracts`) the answer `text` has not met; every check
        that asks for something where the formula does not lex."""
        if self._parts is None:
            self._parts = check_contracts(self.brief, self.catalogue, self.tolerance)
        f = self._facts(text)[1]
        if f is None:
            return tuple(n for n, c in self._parts.items() if unmet(c, {}, set(), 0.0))
        return tuple(n for n, c in self._parts.items() if unmet(c, f.ops, f.fields, f.max_window))

    def rescues(self, text: str) -> tuple[str, ...]:
        f = self._facts(text)[1]
        return () if f is None else tuple(f" - {x}" for x in sorted(f.fields) if x != "returns" and self.allows(x))

    def repairs(self, text: str) -> tuple[str, ...]:
        """A witness as the whole formula of an empty answer, or added as an operand (` + W`) while the
        formula has a requirement unmet; nothing once every requirement is met (the grammar closes it). A name
        at the end of `text` counts as written: the piece appended ends it (`-high` then ` + W` has used `high`,
        and W must bring the other field, not two)."""
        body, f = self._facts(text + " ")
        # the variant drawn for this answer: a hash of what it has written (so answers that differ get
        # different witnesses, and the same answer the same one: the search and its checks stay repeatable)
        k = zlib.crc32(body.encode()) % self.variants if self.variants > 1 else 0
        cut = self._idea_share                       # the idea's witnesses stay ahead of the generic ones
        own = _rotated(self.witness_pieces[:cut], k) + _rotated(self.witness_pieces[cut:], k)
        if not body.strip():
            return tuple(w[3:] for w in own)
        if f is None or not unmet(self.contract, f.ops, f.fields, f.max_window):
            return ()
        # first a witness of what is still missing (`residual`: `ts_corr(` under "exactly one ts_corr" takes
        # an operand without one; the drawn variant, then the first), then the brief's own
        need = residual(self.contract, f)
        pieces = tuple(dict.fromkeys([*(f" + {w}" for w in built(need, self.limits, k)),
                                      *(f" + {w}" for w in built(need, self.limits)), *own]))
        if body.rstrip()[-1:] in OPERAND_DUE:     # an operand is due: the witness is it (not ` + W`, a unary plus)
            return tuple(" " + w[3:] for w in pieces)
        if f.ts_open and f.max_window < self.contract.window[0]:
            # an open time-series call may take the horizon's window itself: no new node, under a node limit
            # the only way left
            return (f", {math.ceil(self.contract.window[0])}", *pieces)
        return pieces


def _rotated(items: tuple[str, ...], k: int) -> tuple[str, ...]:
    """`items` starting at its `k`-th (modulo its length)."""
    if not items:
        return items
    k %= len(items)
    return items[k:] + items[:k]


def brief_text(brief: str | Mapping[str, Any]) -> str:
    """The prompt of a brief: a bare text, or a brief record's `text`."""
    return brief if isinstance(brief, str) else str(brief.get("text", ""))


class BriefContracts:
    """The checker the decoder keeps for each prompt, compiled the first time it is asked for: a brief record
    (the fields the generator drew, with the `text` rendered from them: what the trainer, the probe, the SFT
    evaluation and `propose` pass) is compiled from its fields; a record without them, or a bare text (a
    user's own words), is answered under the grammar's own checker. A catalogue brief no formula can meet is
    a BriefError (`compile_brief`). A bare text is read back into fields (`generate.read_text`) only by
    `propose`, at the front door, before it gets here."""

    def __init__(self, catalogue: Catalogue, tolerance: float, limits: Limits | None = None,
                 fields: tuple[str, ...] = DSL_FIELDS, keep: int = 4096, variants: int = 1) -> None:
        self.catalogue, self.tolerance, self.fields, self.keep = catalogue, tolerance, fields, keep
        self.variants = variants
        self.grammar = PrefixChecker(limits, fields)
        self.limits = self.grammar.limits
        self._checkers: dict[tuple[str, ...], PrefixChecker] = {}
        self._walks: dict[str, tuple[int, Walk]] = {}

    def checker(self, brief: str | Mapping[str, Any]) -> PrefixChecker:
        if isinstance(brief, str) or not all(k in brief for k in CHECKS):
            return self.grammar
        key = (brief_text(brief), *(str(brief[k]) for k in CHECKS))
        ck = self._checkers.get(key)
        if ck is None:
            contract = compile_brief(brief, self.catalogue, self.tolerance, self.limits)
            ck = ContractChecker(contract, brief, self.catalogue, self.tolerance, self.limits, self.fields,
                                 share=self.grammar, walks=self._walks, variants=self.variants)
            if len(self._checkers) >= self.keep:        # a run's briefs are a few hundred; a bound all the same
                self._checkers.pop(next(iter(self._checkers)))
            self._checkers[key] = ck
        return ck

    def reads(self, brief: str | Mapping[str, Any]) -> bool:
        """Whether the decoder keeps this brief's contract (else: the grammar alone)."""
        return self.checker(brief) is not self.grammar

