"""Grammar-constrained decoding (`policy.decoding: grammar`): the policy samples only tokens that keep the
answer a viable prefix of `<alpha>FORMULA</alpha>` (`dsl.prefix`), and may end only after a formula that
parses.

The sampling loop (`policy.decode.sample`) perturbs the temperature-scaled logits with Gumbel noise once
per token (`gumbel_keys`) and the sampler takes the candidates in the order of those keys, keeping the
first whose answer stays viable. The first candidate is a draw from the model's distribution; the first
viable one is an exact draw from that distribution restricted to viable tokens and renormalised (Gumbel
top-k is sampling without replacement). It costs one parse per candidate tried instead of one per
vocabulary entry (a 49k-token vocabulary makes masking every token per step far too slow on a CPU), and
each parse reuses the calls the answer had already finished (`dsl.parser.FinishedCalls`): only the calls
still open at its end are parsed again, and only the text after its last space is lexed again.
Greedy decoding is the same walk over the logits themselves. After `scan` rejected candidates (a dead
end, which `dead_ends` counts) the answer is finished with its shortest completion, as in the closing
phase below.

Closing: an answer still open when the last quarter of `max_new_tokens` begins (at least 8 tokens) would be
cut at the cap and score invalid. It is finished there with the shortest completion the checker finds
(`PrefixChecker.completion`: close what is open, supply a missing window or operand, then `</alpha>`),
written token by token, then the end token; from half the budget on, an answer whose completion would
need nearly all the tokens left (deep nesting) is finished at once. This touches only answers already
longer than nearly every training formula; `forced` counts them. That watch does not search at every
token: a search costs 2-7 ms, and on the tiny SFT policy it found the completion fitting with about 20
tokens to spare on average (1,215 searches over 320 answers; it forced 2). The completion grew by at most
10 tokens per token written, under the grammar as under a brief's checker (whose
completion may bring a witness, ` + W`, for what the answer still lacks), over the default batch's rounds
with a watch at every token (`python benchmarks/bench_brief_decoding.py --rounds 12 --dense-watch` prints
this `growth_max`: the most a row's completion grew, per token written, between two searches of it). So a
search that leaves `slack` ≤ GROWTH tokens forces the completion there, while it fits (one more token could
grow it past what is left), and one that leaves more is followed by the next `slack // (GROWTH + 1)` tokens
later (at least 1), before the slack can have fallen to GROWTH; `watch_searches` counts the searches, and
`forced_late` the completions forced whose text needs more tokens than are left (cut at the cap, invalid: the
bound failed, or no completion was found until the closing phase). A row lacking a requirement of its brief
(`PrefixChecker.lacks`) is watched once `LACK_ROOM` tokens are left (between a quarter and half of the budget),
so that its completion, witness included, still fits; any other from half. No search is needed while the completion
found last still finishes the answer (as it stands, or less what the model wrote of it) with slack to spare: its
length bounds the shortest one's (`_still_completes`, one state check). A search that finds nothing has run its
whole budget (about 0.2 s): after each such miss in a row the wait before the next doubles, up to 16 times the
spacing.

Under a brief's node limit (`compact`: fewer than 20 nodes) the prefix rules count only the nodes sure to be
in the parse, a lower bound: `- ( - (` adds none, yet whatever fills it brings a `neg` each. An answer can so
walk past the last point where a completion fits in the nodes left, and then write parentheses and blanks
until the cap. A node-limited row is therefore also watched for its nodes: its completion is searched, and
forced when the formula it finishes leaves `NODE_GROWTH` nodes or fewer (one more written token may need
that many: `adv20` is four); otherwise the next node watch comes `(room - NODE_GROWTH) // NODE_GROWTH` tokens
later (at least 1), before the room can have fallen that far. `node_searches` counts these searches and
`forced_nodes` the completions they forced. Rows without a node limit are not affected.

Under the depth limit (16 levels) an operator chain puts a level over the whole formula at each operator, so an
answer still lacking a requirement can reach the point where no witness fits over it: it then has no completion
and writes blanks to the cap. A brief's row is therefore watched for its depth at every token, from the floor its
prefix parse gives (`PrefixChecker.depth_floor`, one parse reusing the calls finished before): while it lacks a
requirement and the floor leaves `DEPTH_ROOM` levels or fewer, its completion is searched and forced;
`forced_depth` counts these (a search that finds nothing waits 2, 4, 8, then 16 tokens before the next).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from tokenizers import decoders
from transformers import PreTrainedTokenizerBase, PreTrainedTokenizerFast

from alphagym.dsl.prefix import OPEN, PrefixChecker

GROWTH = 10         # the most tokens one written token has added to an answer's completion (module docstring)
# a row lacking a requirement of its brief is first watched with this many tokens left, so that its completion
# (closing and a witness) still fits: at most 31 tokens with the end token over the brief benchmark's 12 rounds
# (`lacking_completion_max` of `python benchmarks/bench_brief_decoding.py`; a test holds it on an untrained policy)
LACK_ROOM = 40
NODE_GROWTH = 4     # the most nodes one written token can add to what a node-limited answer needs (`adv20`: 4)
NODE_WATCH_FROM = 2  # a node-limited row's first node watch, in answer tokens
# a row lacking a requirement is finished once its formula's depth floor (`PrefixChecker.depth_floor`) leaves
# DEPTH_ROOM levels or fewer: a witness appended over the formula takes one, a written token up to three more
DEPTH_ROOM = 4
DENSE_WATCH = False  # a search at each token of a watched row (how GROWTH is observed: benchmarks, tests)
# a traced draw judges the likeliest tokens until this share of the model's mass is judged, at most
# TRACE_MAX of them (`GrammarSampler.refused`): the mass left unjudged bounds the error of the
# renormalising constant the RL loss divides by (docs/rl.md, "Log-probabilities under constrained decoding")
TRACE_MASS = 0.95
TRACE_MAX = 16


@dataclass(frozen=True)
class Trace:
    """How one answer was written, for the log-probabilities of the distribution it was drawn from: its token
    ids, and per token the likeliest tokens the decoder refused there (a draw from the model restricted to
    the rest), or None where the token was not drawn but written by the forced completion."""

    ids: tuple[int, ...]
    refused: tuple[tuple[int, ...] | None, ...]


def rejected_share(stats: dict[str, float]) -> float:
    """Candidates refused per token drawn (a sampler's or `Policy.decode_stats`' counts); can exceed 1,
    since several may be refused before one is kept."""
    return stats.get("rejections", 0) / max(1, stats.get("draws", 0))


def steered_share(stats: dict[str, float]) -> float:
    """Share of tokens drawn whose first candidate was refused (at most 1). Unlike `rejected_share`, a few
    dead ends, each up to `scan` refusals, cannot dominate it."""
    return stats.get("steered", 0) / max(1, stats.get("draws", 0))


def concatenates(tokenizer: PreTrainedTokenizerBase) -> bool:
    """Whether an answer's text plus one token's text is the text of the answer with that token, whenever
    both are ASCII: true of a byte-level BPE decoder (its bytes concatenate) without transformers' clean-up
    pass, which is every tokenizer here (the tiny one, SmolLM2's). Other tokenizers decode the whole row."""
    return (isinstance(tokenizer, PreTrainedTokenizerFast)
            and isinstance(tokenizer.backend_tokenizer.decoder, decoders.ByteLevel)
            and not tokenizer.clean_up_tokenization_spaces)


class GrammarSampler:
    """Picks each answer's next token (`pick`) for the sampling loop; one per micro-batch, since it keeps
    each row's forced completion and the counts of what it refused. `checker` judges every row's prefixes;
    `rows`, when given, one checker per batch row instead (`policy.decoding: brief`: each row its own
    brief's contract, `briefs.checker.BriefContracts`)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, checker: PrefixChecker, max_new_tokens: int = 0,
                 scan: int = 256, rows: Sequence[PrefixChecker] | None = None, trace: bool = False) -> None:
        self.checker = checker
        self.rows = rows
        # batch row -> per token written: the refused tokens of its draw, or None for a forced one (`Trace`)
        self.traces: dict[int, list[tuple[int, ...] | None]] | None = {} if trace else None
        self.tokenizer, self.eos, self.scan = tokenizer, tokenizer.eos_token_id, scan
        # special tokens decode to nothing, so the text would not show them: refused (but the end token)
        self.special = frozenset(tokenizer.all_special_ids) - {self.eos}
        # the last quarter of the budget (at least 8 tokens) is for closing; 0: never. From half the budget
        # on, an answer whose shortest completion would no longer fit in what is left closes at once
        self.max_new_tokens = max_new_tokens
        self.closing_from = max_new_tokens - max(8, max_new_tokens // 4) if max_new_tokens else 1 << 30
        self.watch_from = max_new_tokens // 2 if max_new_tokens else 1 << 30
        # a brief's checker may need a whole witness to finish an answer: a row lacking a requirement is watched
        # once LACK_ROOM tokens are left (not before a quarter of the budget, not after half)
        self.watch_early = (min(self.watch_from, max(max_new_tokens // 4, max_new_tokens - LACK_ROOM))
                            if max_new_tokens else 1 << 30)
        self.forced: dict[int, list[int]] = {}       # batch row -> the completion's tokens still to write
        self.watch_at: dict[int, int] = {}           # batch row -> the answer length of its next watch search
        self.last: dict[int, tuple[str, str]] = {}   # batch row -> (its text, the completion last found for it)
        self.missed: dict[int, int] = {}             # batch row -> its watch searches in a row that found nothing
        self.searched: dict[int, tuple[int, int]] = {}  # batch row -> (answer length, completion length) found last
        self.node_watch_at: dict[int, int] = {}      # batch row -> the answer length of its next node watch
        self.node_missed: dict[int, int] = {}        # batch row -> its node watches in a row that found nothing
        self.depth_wait: dict[int, int] = {}         # batch row -> the answer length of its next depth watch
        self.depth_missed: dict[int, int] = {}       # batch row -> its depth watches in a row that found nothing
        self.stats = {"draws": 0, "steered": 0, "rejections": 0, "dead_ends": 0, "forced": 0,
                      "forced_late": 0, "forced_lacking": 0, "watch_searches": 0, "growth_max": 0.0,
                      "node_searches": 0, "forced_nodes": 0, "lacking_completion_max": 0, "forced_depth": 0}
        # token -> its own text when appending it is exact (ASCII, not an added token), else None; None
        # for the whole map when the tokenizer does not concatenate
        self.pieces: dict[int, str | None] | None = {} if concatenates(tokenizer) else None
        self.added = frozenset(tokenizer.get_added_vocab().values()) if self.pieces is not None else frozenset()

    def _text(self, ids: list[int]) -> str:
        # decoded as `Policy.generate` decodes the answer: a token's text can depend on its neighbours
        # (sentencepiece's leading-space marker), so the row is decoded whole unless `concatenates` holds
        return self.tokenizer.decode(ids, skip_special_tokens=True)

    def _piece(self, tok: int) -> str | None:
        if self.pieces is None:
            return None
        if tok not in self.pieces:
            text = self.tokenizer.decode([tok], skip_special_tokens=True)
            self.pieces[tok] = text if text.isascii() and tok not in self.added else None
        return self.pieces[tok]

    def checker_of(self, b: int) -> PrefixChecker:
        """The checker of batch row `b`."""
        return self.checker if self.rows is None else self.rows[b]

    def _ok(self, row: list[int], tok: int, base: str | None = None, b: int = 0) -> bool:
        """Whether `tok` keeps row `b`'s answer viable; `base` is the row's text, when the caller has it."""
        checker = self.checker_of(b)
        if tok in self.special:
            return False
        if base is None:
            base = self._text(row)
        if tok == self.eos:
            return checker.state(base) == "done"
        piece = self._piece(tok) if base.isascii() else None
        # a row's text and an ASCII token's text concatenate (checked per tokenizer): one decode per step
        # instead of one per candidate, which is most of the sampler's time when many are refused
        return checker.state(base + piece if piece is not None else self._text([*row, tok])) != "dead"

    def choose(self, row: list[int], keys: torch.Tensor, b: int = 0) -> int | None:
        """The first viable token of batch row `b` in the order of `keys` (Gumbel-perturbed logits,
        `decode.gumbel_keys`; greedy: the logits); None at a dead end."""
        self.stats["draws"] += 1
        base = self._text(row)
        first = int(torch.argmax(keys))
        if self._ok(row, first, base, b):
            return first
        self.stats["rejections"] += 1
        self.stats["steered"] += 1
        for tok in torch.topk(keys, min(self.scan, keys.numel())).indices[1:].tolist():
            if keys[tok] == float("-inf"):
                break
            if self._ok(row, tok, base, b):
                return tok
            self.stats["rejections"] += 1
        self.stats["dead_ends"] += 1
        return None

    def _completion(self, b: int, row: list[int]) -> list[int] | None:
        """The tokens of row `b`'s shortest completion, then the end token; None when there is none."""
        text, checker = self._text(row), self.checker_of(b)
        suffix = checker.completion(text) if checker.state(text) == "open" else None
        if suffix is None:
            return None
        self.last[b] = (text, suffix)
        queue = [*self.tokenizer(suffix, add_special_tokens=False)["input_ids"], self.eos]
        if b in self.searched and len(row) > self.searched[b][0]:
            grew = (len(queue) - self.searched[b][1]) / (len(row) - self.searched[b][0])
            self.stats["growth_max"] = max(self.stats["growth_max"], grew)
        self.searched[b] = (len(row), len(queue))
        if self.rows is not None and checker.lacks(text):      # what LACK_ROOM must hold
            self.stats["lacking_completion_max"] = max(self.stats["lacking_completion_max"], len(queue))
        return queue

    def _still_completes(self, b: int, text: str) -> int | None:
        """The token count (with the end token) of row `b`'s last found completion, when it still finishes the
        answer `text` (as it stands, or less the text written since, when the model wrote the completion's
        own beginning); None when it does not, or there is none. One state check instead of a search."""
        last = self.last.get(b)
        if last is None or not text.startswith(last[0]):
            return None
        added, suffix = text[len(last[0]):], last[1]
        for rest in ((suffix[len(added):],) if suffix.startswith(added) else ()) + (suffix,):
            if self.checker_of(b).state(text + rest) == "done":
                return len(self.tokenizer(rest, add_special_tokens=False)["input_ids"]) + 1
        return None

    def _start_forcing(self, b: int, row: list[int], queue: list[int] | None = None) -> None:
        """Queue row `b`'s shortest completion (`queue`, or computed); empty when there is none."""
        queue = self._completion(b, row) if queue is None else queue
        self.forced[b] = queue or []
        self.stats["forced"] += queue is not None
        # a completion whose text (the queue but its end token) is longer than the tokens left is cut at the
        # cap: the answer ends invalid
        self.stats["forced_late"] += queue is not None and len(row) + len(queue) - 1 > self.max_new_tokens > 0
        # a brief's requirement the model had not met is written by the decoder, not learned (`lacking`):
        # counted once an answer, and once for each check whose requirement it lacked
        lacking = self.checker_of(b).lacking(self._text(row)) if queue is not None else ()
        self.stats["forced_lacking"] += bool(lacking)
        for check in lacking:
            self.stats[f"forced_lacking_{check}"] = self.stats.get(f"forced_lacking_{check}", 0) + 1

    def _next_forced(self, b: int, row: list[int]) -> int | None:
        """The next token of row `b`'s forced completion (computed when its closing phase begins, or
        earlier from `watch_from` on, once the completion needs nearly all the tokens left)."""
        if b not in self.forced and len(row) >= self.closing_from:
            self._start_forcing(b, row)
        elif b not in self.forced and len(row) >= max(self.watch_early, self.watch_at.get(b, 0)):
            text = self._text(row)
            if len(row) >= self.watch_from or self.checker_of(b).lacks(text):
                self._watch(b, row, text)
        if (b not in self.forced and self.checker_of(b).node_limited
                and len(row) >= self.node_watch_at.get(b, NODE_WATCH_FROM)):
            self._watch_nodes(b, row)
        if b not in self.forced and self.rows is not None and len(row) >= self.depth_wait.get(b, 0):
            self._watch_depth(b, row)
        queue = self.forced.get(b)
        if queue and self._ok(row, queue[0], b=b):
            return queue.pop(0)
        return None

    def _watch(self, b: int, row: list[int], text: str) -> None:
        """A watch of row `b` (module docstring): force its completion once it may no longer fit, and set when
        the next watch comes."""
        known = self._still_completes(b, text)
        # a known completion's length bounds the shortest one's: no search while that still fits
        slack = None if known is None else self.max_new_tokens - len(row) - known - 2
        found = True
        if slack is None or slack <= GROWTH:
            queue = self._completion(b, row)
            self.stats["watch_searches"] += 1
            found = queue is not None
            slack = self.max_new_tokens - len(row) - (len(queue) if queue is not None else 0) - 2
            # forced while it still fits: one more written token may grow it by GROWTH
            if queue is not None and slack <= GROWTH:
                self._start_forcing(b, row, queue)
        # a search that found nothing ran its whole budget: the next waits twice as long after each miss
        self.missed[b] = 0 if found else self.missed.get(b, 0) + 1
        step = 1 if DENSE_WATCH else max(1, slack // (GROWTH + 1))
        self.watch_at[b] = len(row) + (step if found else step << min(self.missed[b], 4))

    def _watch_nodes(self, b: int, row: list[int]) -> None:
        """A node watch of row `b` (module docstring): force its completion once the formula it finishes leaves
        `NODE_GROWTH` nodes or fewer under the brief's limit, and set when the next node watch comes."""
        queue = self._completion(b, row)
        self.stats["node_searches"] += 1
        if queue is None:                # a search that found nothing ran its whole budget: back off
            missed = self.node_missed[b] = self.node_missed.get(b, 0) + 1
            self.node_watch_at[b] = len(row) + (1 << min(missed, 4))
            return
        self.node_missed[b] = 0
        text, suffix = self.last[b]
        room = self.checker_of(b).node_room(text + suffix)
        if room is not None and room <= NODE_GROWTH:
            self._start_forcing(b, row, queue)
            self.stats["forced_nodes"] += 1
            return
        self.node_watch_at[b] = len(row) + max(1, ((room or 0) - NODE_GROWTH) // NODE_GROWTH)

    def _watch_depth(self, b: int, row: list[int]) -> None:
        """A depth watch of row `b` (module docstring): a row lacking a requirement whose formula leaves no more
        than `DEPTH_ROOM` levels under the depth limit is finished now, while a witness still fits over it."""
        checker, text = self.checker_of(b), self._text(row)
        if not checker.lacks(text):      # the facts are read already; the parse for the floor is not
            return
        s = text.lstrip(" \t\n")
        if not s.startswith(OPEN) or checker.depth_floor(s[len(OPEN):]) < checker.limits.max_depth - DEPTH_ROOM:
            return
        queue = self._completion(b, row)
        if queue is None:                # a search that found nothing ran its whole budget: back off
            missed = self.depth_missed[b] = self.depth_missed.get(b, 0) + 1
            self.depth_wait[b] = len(row) + (1 << min(missed, 4))
            return
        self._start_forcing(b, row, queue)
        self.stats["forced_depth"] += 1

    def pick(self, b: int, row: list[int], keys: torch.Tensor, logits: torch.Tensor | None = None) -> int:
        """Row `b`'s next token after its answer tokens `row`: the next token of its forced completion,
        else the first viable one in the order of `keys`, else (a dead end) the start of its shortest
        completion, or the end token when there is none. When tracing, `logits` (the model's, unscaled)
        give the refused tokens of a drawn token (`refused`)."""
        tok = self._next_forced(b, row)
        drawn = tok is None
        if tok is None:
            tok = self.choose(row, keys, b)
        if tok is None:
            # none of the `scan` likeliest tokens keeps the answer viable (the model went somewhere it
            # never saw, e.g. `ts_Ar`): finish it as the closing phase would, instead of cutting it
            drawn = False
            self._start_forcing(b, row)
            tok = self._next_forced(b, row)
        if self.traces is not None:
            self.traces.setdefault(b, []).append(
                self.refused(b, row, logits) if drawn and logits is not None else None)
        return self.eos if tok is None else tok

    def refused(self, b: int, row: list[int], logits: torch.Tensor) -> tuple[int, ...]:
        """The tokens the decoder refuses after row `b`'s answer `row`, among the likeliest under `logits`:
        judged in order of probability until `TRACE_MASS` of it is judged or `TRACE_MAX` tokens are."""
        p = torch.softmax(logits.float(), dim=-1)
        top = torch.topk(p, min(TRACE_MAX, p.numel()))
        base, mass, out = self._text(row), 0.0, []
        for pt, tok in zip(top.values.tolist(), top.indices.tolist(), strict=True):
            if mass >= TRACE_MASS:
                break
            mass += pt
            if not self._ok(row, tok, base, b):
                out.append(tok)
        return tuple(out)

    def trace(self, b: int, row: list[int]) -> Trace:
        """Row `b`'s `Trace` once its answer `row` is written (a sampler made with `trace=True`)."""
        assert self.traces is not None
        refused = self.traces.get(b, [])
        assert len(refused) == len(row), (len(refused), len(row))
        return Trace(tuple(row), tuple(refused))
