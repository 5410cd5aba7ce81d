"""The Verifier: an answer -> a typed score card of the reward channels (`channels.REGISTRY`), validity and
book metrics.

Built once per panel: forward returns, factor returns, cost inputs, CPCV masks and the novelty archive are
precomputed, so scoring one answer is one formula evaluation plus a handful of vector operations.
Deterministic to the bit; `score_group(..., workers=k)` spreads answers over processes with identical
results (each answer is scored independently; the group-level channels are computed afterwards).
"""

from __future__ import annotations

import logging
import multiprocessing
import time
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

import numpy as np

from alphagym.dsl.answer import extract
from alphagym.dsl.ast import Node
from alphagym.dsl.canonical import canonical, fields_used, node_count
from alphagym.dsl.errors import AnswerTagError, DslError
from alphagym.dsl.evaluate import Evaluator, is_rank_root
from alphagym.dsl.parser import Limits, lookback, parse
from alphagym.engine.book import Book, leg_names, market_forward
from alphagym.engine.scorer import BookScorer, span_scorers
from alphagym.errors import DataError
from alphagym.panel import Panel
from alphagym.params import Params, Turnover
from alphagym.verifier import channels as ch
from alphagym.verifier.archive import NoveltyArchive
from alphagym.verifier.factors import FACTOR_NAMES, factor_returns, residual_sharpe_gap

log = logging.getLogger(__name__)

# error_type of an answer whose evaluation raised something other than a typed DslError: a bug of ours,
# not of the answer. The card is invalid (one model answer never aborts a group or a 40-minute rung), the
# formula is logged, and the trainer counts these cards (verifier/evaluator_errors); a fuzz test asserts none.
EVALUATOR_ERROR = "evaluator_error"


@dataclass
class ScoreCard:
    text: str
    formula: str | None
    canonical: str | None
    valid: bool
    reason: str | None
    error_type: str | None
    channels: dict[str, float]
    metrics: dict[str, float]
    skipped: dict[str, str]
    timings: dict[str, float]
    nodes: int = 0
    motif: bool = False
    max_corr: float = 0.0
    pnl: np.ndarray | None = field(default=None, repr=False)
    insample_sharpes: np.ndarray | None = field(default=None, repr=False)
    test_sharpes: np.ndarray | None = field(default=None, repr=False)
    ast: Node | None = field(default=None, repr=False, compare=False)   # the parsed formula (brief checks read it)
    stats: ch.AnswerStats | None = field(default=None, repr=False)      # what the per-answer channels read

    def total(self, priorities: dict[str, float]) -> float:
        """Priority-weighted sum of the raw channels (what a single-reward baseline would see)."""
        return ch.combined(self.channels, priorities)

    def copy(self) -> ScoreCard:
        """An independent copy (what `copy.deepcopy` gives, at a fraction of its cost: the card cache copies a
        card on every store and hit): its dicts hold only numbers and strings, its arrays are copied."""
        arrays = {k: None if v is None else v.copy()
                  for k, v in (("pnl", self.pnl), ("insample_sharpes", self.insample_sharpes),
                               ("test_sharpes", self.test_sharpes))}
        return replace(self, channels=dict(self.channels), metrics=dict(self.metrics), skipped=dict(self.skipped),
                       timings=dict(self.timings), **arrays)

    def to_json(self) -> dict[str, Any]:
        return {"valid": self.valid, "reason": self.reason, "error_type": self.error_type,
                "formula": self.formula, "canonical": self.canonical,
                "channels": {k: round(v, 10) for k, v in self.channels.items()},
                "metrics": {k: (round(v, 10) if isinstance(v, float) else v) for k, v in self.metrics.items()},
                "skipped": self.skipped, "timings_ms": {k: round(v, 3) for k, v in self.timings.items()}}


def _zero_channels() -> dict[str, float]:
    return dict.fromkeys(ch.CHANNELS, 0.0)


class BriefCheck(Protocol):
    """What the verifier needs of a brief: its check names, a compliance check of a parsed formula and the
    formula's fidelity to the brief's mechanism, with its threshold (implemented by
    `alphagym.briefs.BriefChecker`; the verifier does not depend on the catalogue)."""

    checks: tuple[str, ...]

    @property
    def idea_tau(self) -> float: ...

    def check(self, ast: Any) -> Any: ...

    def fidelity(self, ast: Any, signal: np.ndarray | None = None, panel: Panel | None = None) -> float | None: ...


class Verifier:
    def __init__(self, panel: Panel, params: Params, archive: NoveltyArchive | None = None,
                 window: str = "train", stress_worlds: dict[str, Panel] | None = None) -> None:
        if window not in ("train", "holdout"):
            raise ValueError(f"window must be 'train' or 'holdout', got {window!r}")
        self.params, self.cfg, self.window = params, params.verifier, window
        self.panel = panel
        self.limits = Limits.from_params(params.dsl.limits)
        self.buckets = tuple(params.dsl.window_buckets)
        # P&L rows that count: all train rows; in the holdout panel only the holdout year (not the warm-up)
        rows = None if window == "train" else panel.in_holdout[:-2].copy()
        self.scorer = BookScorer(panel, self.cfg, rows, holdout_costs=window == "holdout")
        self.evaluator = Evaluator(panel)
        self._keep_signals, self._signals = False, {}        # `score_group`'s signals, for its brief's checks
        self.min_valid = self.scorer.min_valid
        self.fwd = self.scorer.fwd
        self.market = market_forward(self.fwd)
        self.rows = self.scorer.rows
        self.slices = self.scorer.slices
        self.factors = factor_returns(panel, self.fwd, self.cfg.factor_neutrality, self.min_valid)[self.rows]
        n = int(self.rows.sum())
        self.archive = archive if archive is not None else NoveltyArchive(n, self.cfg.novelty_pnl.capacity)
        if window == "train" and self.archive.length != n:
            raise DataError("archive_mismatch", f"the novelty archive holds P&L of length {self.archive.length}, "
                            f"this train panel gives {n}: it was built on another panel (another profile or "
                            f"data range); rerun `alphagym archive` for this one", file=self.archive.source)
        # R3 (train window only): one scorer per kept stress world over the span `jepa_stress.sessions`, and
        # the train panel's over the same span (None: the worlds are scored whole, against the card's CPCV)
        self.stress: dict[str, BookScorer] | None = None
        self.stress_base: BookScorer | None = None
        if stress_worlds and window == "train":
            self.stress, self.stress_base = span_scorers(panel, stress_worlds, self.cfg,
                                                         self.cfg.jepa_stress.sessions,
                                                         params.dsl.limits.max_lookback)
        # the scorers take signals: one evaluator per scorer's panel (a world's span, the train span), each
        # keeping its own field ranks across formulas
        self.stress_evaluators = {name: Evaluator(sc.panel) for name, sc in (self.stress or {}).items()}
        self.stress_base_evaluator = Evaluator(self.stress_base.panel) if self.stress_base is not None else None
        self.stress_worlds = stress_worlds or {}
        # the holdout score charges turnover as R5 does, at the holdout block's cap and slope
        self.holdout_turnover = Turnover(cap=self.cfg.holdout.turnover_cap, slope=self.cfg.holdout.turnover_slope)
        self._cache: OrderedDict[tuple[Node, bool], ScoreCard] = OrderedDict()
        self.cache_size = 0
        self.cache_hits = 0
        self.cache_lookups = 0

    def enable_cache(self, size: int) -> None:
        """Keep the score cards of the last `size` distinct formulas, keyed by the parsed formula (its syntax
        tree: answers that differ only in spacing, letter case, aliases, redundant parentheses or the text
        around the tags share one) and whether the answer carried reasoning. Everything in a card but the
        novelty channels depends only on that tree and the panel, so a repeat skips evaluation, books and
        the stress worlds; its novelty channels are recomputed against the archive as it is now (so results
        equal an uncached score, which a test checks)."""
        self.cache_size = int(size)
        self._cache.clear()

    # --- single answer ---
    def book(self, signal: np.ndarray, ranked: bool = False) -> Book:
        return self.scorer.book(signal, ranked)

    def _invalid(self, card: ScoreCard, score_key: str, reason: str, error_type: str) -> ScoreCard:
        card.valid, card.reason, card.error_type = False, reason, error_type
        card.channels = _zero_channels()
        card.channels["cpcv"] = float(self.cfg.cpcv[score_key])
        return card

    def _novelty(self, card: ScoreCard) -> None:
        """The archive channels (R8, R9's per-answer part) against the archive as it is now."""
        assert card.pnl is not None and card.canonical is not None and card.stats is not None
        card.max_corr = self.archive.max_abs_corr(card.pnl)
        card.stats = replace(card.stats, max_corr=card.max_corr, seen_before=self.archive.seen(card.canonical))
        ch.score_channels(card.stats, self.cfg, "archive", card.channels, card.skipped)
        card.metrics["novelty_max_corr"] = card.max_corr

    def score_one(self, text: str, answer: bool = False) -> ScoreCard:
        """All per-answer channels; group-level ones (pbo, novelty_syntax's group term) default to a group
        of one. Use score_group for groups."""
        t0 = time.perf_counter()
        self.cache_lookups += bool(self.cache_size)       # every answer: the hit rate is a share of answers
        card = ScoreCard(text, None, None, True, None, None, _zero_channels(), {}, {}, {})
        reasoning = False
        formula = text
        if answer:
            try:
                parsed = extract(text)
            except AnswerTagError as exc:
                return self._invalid(card, "missing_tag_score", str(exc), exc.rule)
            formula, reasoning = parsed.formula, parsed.reasoning is not None
        card.formula = formula
        try:
            ast = parse(formula, self.limits)
        except DslError as exc:
            return self._invalid(card, "invalid_score", str(exc), exc.rule)
        card.ast = ast
        if not self.cache_size:
            return self._score_parsed(card, ast, reasoning, t0)
        key = (ast, reasoning)
        hit = self._cache.get(key)
        if hit is None:
            card = self._score_parsed(card, ast, reasoning, t0)
            self._cache[key] = card.copy()
            if len(self._cache) > self.cache_size:
                self._cache.popitem(last=False)
            return card
        self._cache.move_to_end(key)
        self.cache_hits += 1
        card = replace(hit.copy(), text=text, formula=formula)
        card.timings = {"parse": (time.perf_counter() - t0) * 1e3, "evaluate": 0.0, "book_and_channels": 0.0}
        if card.valid and self.window == "train":
            self._novelty(card)
        return card

    def _score_parsed(self, card: ScoreCard, ast: Node, reasoning: bool, t0: float) -> ScoreCard:
        """Everything after the parse: evaluation, book, channels (the part the card cache keeps)."""
        try:
            card.canonical = canonical(ast, self.buckets)
            card.nodes = node_count(ast)
            t1 = time.perf_counter()
            signal = self.evaluator.evaluate(ast)
            if self._keep_signals:
                self._signals[ast] = signal
        except DslError as exc:
            return self._invalid(card, "invalid_score", str(exc), exc.rule)
        except Exception as exc:  # noqa: BLE001 -- untrusted input must not escape as an untyped error
            log.error("evaluator bug on %r: %s: %s", card.formula, type(exc).__name__, exc, exc_info=True)
            return self._invalid(card, "invalid_score", f"evaluator error on this formula ({type(exc).__name__}:"
                                 f" {exc}); a bug of the evaluator, not of the answer", EVALUATOR_ERROR)
        t2 = time.perf_counter()
        book = self.book(signal, is_rank_root(ast))
        rows = self.rows
        net, ic_series = book.net[rows], book.ic[rows]
        flat_share = float(book.flat[:-2][rows].mean())
        mean_turnover = float(book.turnover[:-2][rows].mean())
        metrics = book.metrics(self.market, rows)
        metrics.update(lookback=float(lookback(ast)), nodes=float(card.nodes))
        card.metrics = metrics
        bcfg = self.cfg.book
        if flat_share > bcfg.max_flat_share:
            return self._invalid(card, "degenerate_score", f"signal missing or without opinion on "
                                 f"{flat_share:.0%} of days (limit {bcfg['max_flat_share']:.0%})", "flat_book")
        if mean_turnover < self.cfg.min_turnover.invalid_below:
            return self._invalid(card, "degenerate_score", f"turnover {mean_turnover:.2%}/day is below "
                                 f"{self.cfg.min_turnover.invalid_below:.0%}: a static book", "static_book")
        live = ~book.flat[:-2][rows]
        names = float(np.median(leg_names(book.weights)[:-2][rows][live])) if live.any() else 0.0
        metrics["leg_names"] = names
        if names < bcfg.min_leg_names:
            return self._invalid(card, "degenerate_score", f"its thinner leg holds {names:.1f} effective names "
                                 f"(median over its days; limit {bcfg['min_leg_names']:g}): a concentrated book, "
                                 "not a cross-sectional bet", "concentrated_book")
        # R1 CPCV on the net P&L
        cpcv, test_sr, in_sr = self.scorer.cpcv_sharpes(net)
        card.pnl, card.test_sharpes, card.insample_sharpes = net, test_sr, in_sr
        ic = float(np.nanmean(ic_series)) if np.isfinite(ic_series).any() else 0.0
        raw_sr, resid_sr, betas, r2 = residual_sharpe_gap(net, self.factors)
        metrics.update(cpcv=cpcv, residual_sharpe=resid_sr, factor_r2=r2,
                       **{f"factor_beta_{n}": float(b) for n, b in zip(FACTOR_NAMES, betas)})
        world_cpcvs = stress_base = None
        stress_metrics: dict[str, float] = {}
        if self.stress:
            world_cpcv = {name: sc.cpcv(*self.stress_evaluators[name].signal(ast))
                          for name, sc in self.stress.items()}
            if self.stress_base is not None:
                stress_base = stress_metrics["cpcv_stress_span"] = self.stress_base.cpcv(
                    *self.stress_base_evaluator.signal(ast))
            world_cpcvs = tuple(world_cpcv.values())
            stress_metrics.update({f"cpcv_world_{k}": v for k, v in world_cpcv.items()})
        card.motif = ch.motif_guard_applies(ast, fields_used(ast), ic, self.cfg.motif_guard)
        card.stats = ch.AnswerStats(cpcv=cpcv, raw_sharpe=raw_sr, residual_sharpe=resid_sr, turnover=mean_turnover,
                                    ic=ic, nodes=card.nodes, reasoning=reasoning, motif=card.motif,
                                    world_cpcvs=world_cpcvs, stress_base=stress_base)
        if self.window == "train":
            self._novelty(card)
        else:
            ch.score_channels(card.stats, self.cfg, "archive", card.channels, card.skipped)   # listed as skipped
            turnover_pen = ch.turnover_penalty(card.stats, self.holdout_turnover)
            clip = self.cfg.holdout.clip
            metrics["holdout_score"] = float(np.clip(cpcv + turnover_pen, -clip, clip))
        metrics.update(stress_metrics)
        ch.score_channels(card.stats, self.cfg, "answer", card.channels, card.skipped)
        t3 = time.perf_counter()
        card.timings = {"parse": (t1 - t0) * 1e3, "evaluate": (t2 - t1) * 1e3, "book_and_channels": (t3 - t2) * 1e3}
        return card

    def score(self, text: str, answer: bool = False, brief: BriefCheck | None = None) -> ScoreCard:
        return self.score_group([text], answer=answer, brief=brief)[0]

    # --- groups ---
    def score_group(self, texts: list[str], answer: bool = True, workers: int | None = None,
                    brief: BriefCheck | None = None) -> list[ScoreCard]:
        """Score a group of answers to one brief. With `brief` (`alphagym.briefs.BriefChecker`), each card also gets the
        brief-compliance metrics (`compliance`: share of checks passed, `compliant`: all passed,
        `compliance/<check>`) and the R14 `compliance` channel from them; where the brief measures it, a valid
        answer's `idea_fidelity` and the R15 `idea` channel."""
        workers = self.cfg.workers if workers is None else workers
        # a brief's mechanism check reads the signals this group evaluates (one evaluation, not two); kept for
        # this call only (a card from the cache, or from a worker, is evaluated again by the check)
        self._keep_signals = brief is not None
        try:
            return self._score_group(texts, answer, workers, brief)
        finally:
            self._keep_signals = False
            self._signals.clear()

    def _score_group(self, texts: list[str], answer: bool, workers: int, brief: BriefCheck | None
                     ) -> list[ScoreCard]:
        if workers > 1 and len(texts) > 1:
            # spawn, not fork: numba's OpenMP pool does not survive a fork. Each worker builds its own
            # Verifier once from the same inputs, so its results are identical to the serial path.
            ctx = multiprocessing.get_context("spawn")
            init = (self.panel, self.params, self.archive, self.window, self.stress_worlds)
            with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker,
                                     initargs=init) as pool:
                cards = list(pool.map(_score_in_worker, texts, [answer] * len(texts)))
        else:
            cards = [self.score_one(t, answer) for t in texts]
        self._group_channels(cards)
        if brief is not None:
            self._compliance(cards, brief)
        return cards

    def _compliance(self, cards: list[ScoreCard], brief: BriefCheck) -> None:
        for c in cards:
            try:
                ast = c.ast if c.ast is not None else parse(c.formula, self.limits) if c.formula else None
                comp = brief.check(ast) if ast is not None else None
            except DslError:
                comp = None
            share = comp.share if comp else 0.0
            c.metrics["compliance"] = share
            c.metrics["compliant"] = float(comp is not None and comp.ok)
            for k in brief.checks:
                c.metrics[f"compliance/{k}"] = float(comp is not None and comp.checks[k])
            c.channels["compliance"] = ch.compliance(share, c.valid, self.cfg.compliance)
            fidelity = brief.fidelity(ast, self._signals.get(ast), self.panel) if c.valid and ast is not None else None
            if fidelity is not None:
                c.metrics["idea_fidelity"] = fidelity
            c.channels["idea"] = ch.idea(fidelity, brief.idea_tau, c.valid, self.cfg.idea)

    def _group_channels(self, cards: list[ScoreCard]) -> None:
        valid = [c for c in cards if c.valid]
        if len(valid) >= 2:
            pen = ch.pbo_penalties(np.array([c.insample_sharpes for c in valid]),
                                   np.array([c.test_sharpes for c in valid]), self.cfg.pbo)
            for c, p in zip(valid, pen):
                c.channels["pbo"] = 0.0 if c.motif else float(p)
        if self.window != "train":
            return
        forms = [c.canonical for c in cards if c.canonical]
        for c in valid:
            assert c.stats is not None
            stats = replace(c.stats, same_in_group=forms.count(c.canonical) - 1)
            value = ch.novelty_syntax(stats, self.cfg.novelty_syntax)
            c.channels["novelty_syntax"] = min(value, 0.0) if c.motif else value


_WORKER_VERIFIER: Verifier | None = None


def _init_worker(panel: Panel, params: Params, archive: NoveltyArchive, window: str,
                 stress_worlds: dict[str, Panel]) -> None:
    import numba

    from alphagym.runtime import configure_runtime

    configure_runtime()               # a spawned process: the settings of its parent
    numba.set_num_threads(1)          # one process per core: no oversubscription
    global _WORKER_VERIFIER
    _WORKER_VERIFIER = Verifier(panel, params, archive, window, stress_worlds)


def _score_in_worker(text: str, answer: bool) -> ScoreCard:
    assert _WORKER_VERIFIER is not None
    return _WORKER_VERIFIER.score_one(text, answer)
