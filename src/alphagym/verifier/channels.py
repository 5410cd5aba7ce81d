"""The reward channels: one table (`REGISTRY`) of small pure functions, in the order of the ids in
`alphagym.params.REWARD_CHANNELS`.

Each per-answer channel is a function of one shared statistics object (`AnswerStats`, what the verifier
measured on the answer's book) and its typed params block (`verifier.<id>`); `Verifier._score_parsed` is a
loop over the table. Group and step channels take what they need from the whole group or step. Each
function's docstring opens with its definition, the one text that the report's definitions and
docs/verifier.md are rendered from (`python tools/verifier_doc.py`; a test fails on drift). Each channel
exists to close one way of looking profitable without an edge; the worked examples of the verifier issue
are their tests."""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from alphagym.dsl.ast import Call, Field, Node, Num
from alphagym.dsl.registry import MOTIF_WRAPPERS, OPS
from alphagym.params import (
    REWARD_CHANNELS,
    Complexity,
    Compliance,
    Cpcv,
    Crowding,
    FactorNeutrality,
    Format,
    Ic,
    Idea,
    JepaStress,
    Marginal,
    MinTurnover,
    MotifGuard,
    NoveltyPnl,
    NoveltySyntax,
    Pbo,
    Turnover,
)


@dataclass(frozen=True)
class AnswerStats:
    """What the verifier measured on one valid answer's book, shared by every per-answer channel.

    cpcv: R1's CPCV of the net P&L; raw_sharpe, residual_sharpe: its Sharpe before and after the five
    factors; turnover: mean daily turnover; ic: mean daily IC; nodes: expression nodes; reasoning: a
    reasoning block came before the answer; motif: the motif guard applies (`motif_guard_applies`).
    Set only where the channel is computed (None elsewhere, and the channel is then listed as skipped):
    world_cpcvs, stress_base: the CPCV in each kept stress world and the train panel's over the same span
    (R3); max_corr, seen_before: the P&L's max |corr| with the novelty archive and whether its canonical
    form is in it, as the archive is now (train window only); same_in_group: other answers of the group
    with the same canonical form (R9's group term)."""

    cpcv: float
    raw_sharpe: float
    residual_sharpe: float
    turnover: float
    ic: float
    nodes: int
    reasoning: bool
    motif: bool
    world_cpcvs: tuple[float, ...] | None = None
    stress_base: float | None = None
    max_corr: float | None = None
    seen_before: bool = False
    same_in_group: int = 0


def cpcv_channel(s: AnswerStats, cfg: Cpcv) -> float:
    """R1: net P&L cut into 6 blocks; each of the 15 pairs is a test slice; CPCV = mean(SR_k) − 0.5·std(SR_k)
    (population std). In-sample = other 4 blocks minus 10 sessions purged before and 5 embargoed after each
    test block.

    Computed by `engine.scorer.BookScorer.cpcv_sharpes`; an invalid answer gets `cfg`'s invalid score of its
    kind instead."""
    return s.cpcv


def pbo_penalties(insample: np.ndarray, oos: np.ndarray, cfg: Pbo) -> np.ndarray:
    """R2: in a group, per slice, rank valid answers by in-sample and by test Sharpe (0 = best); penalty =
    −0.48 · mean over slices of max(0, test rank − in-sample rank)/(n − 1); 0 for a group of one.

    insample, oos: (answers, slices); −0.48 is `cfg.floor`. First in-sample and last out-of-sample pays the
    full floor."""
    n = insample.shape[0]
    if n < 2:
        return np.zeros(n)
    r_is = np.argsort(np.argsort(-insample, axis=0, kind="stable"), axis=0, kind="stable")
    r_oos = np.argsort(np.argsort(-oos, axis=0, kind="stable"), axis=0, kind="stable")
    drop = np.maximum(r_oos - r_is, 0) / (n - 1)
    return cfg.floor * drop.mean(axis=1)


def jepa_stress(s: AnswerStats, cfg: JepaStress) -> float:
    """R3: −min(1, 0.4 · log(1 + mean over the kept stress worlds of max(0, CPCV − CPCV in the world))): the
    same formula, book, training costs and CPCV in each world the world-model gates keep
    (`docs/worldmodel.md`; `verifier.jepa_stress.sessions: N` compares both over the last N train sessions
    only: faster, a weaker warning). On by default; 0 and listed under `skipped` while
    `verifier.jepa_stress.enabled` is false or no world is kept.

    A formula that holds up in every world pays 0; a drop of e − 1 = 1.72 pays −0.4 (0.4 is `cfg.scale`).
    The base is the train panel's CPCV over the same span (`stress_base`), or R1's CPCV."""
    base = s.cpcv if s.stress_base is None else s.stress_base
    drops = [max(0.0, base - w) for w in s.world_cpcvs or ()]
    return -min(1.0, cfg.scale * float(np.log1p(np.mean(drops)))) + 0.0 if drops else 0.0


def factor_neutrality(s: AnswerStats, cfg: FactorNeutrality) -> float:
    """R4: OLS of daily net P&L on 5 factor returns built like the book (market; size = dollar volume, the
    panels carry no market cap; 12-1 momentum; 5-day reversal; low volatility). Residual Sharpe = annualised
    mean of (intercept + residual) over the raw P&L's volatility, so raw − residual is the Sharpe explained
    by factors. −0.4 · clip(raw − residual, 0, 3).

    Sharpe 1.5 → 0.3 after factors pays −0.48."""
    return -cfg.scale * float(np.clip(s.raw_sharpe - s.residual_sharpe, 0.0, cfg.clip)) + 0.0


def turnover_penalty(s: AnswerStats, cfg: Turnover) -> float:
    """R5: −2 · max(0, turnover − 0.5)."""
    return -cfg.slope * max(0.0, s.turnover - cfg.cap) + 0.0      # + 0.0: no -0.0 in score cards


def min_turnover(s: AnswerStats, cfg: MinTurnover) -> float:
    """R6: 0 at ≥ 6% a day; linear to −1 between 6% and 3%; −1 from 3% to 2%; below 2% invalid."""
    free, ramp_to = cfg.free, cfg.ramp_to
    if s.turnover >= free:
        return 0.0
    if s.turnover <= ramp_to:
        return -1.0
    return -(free - s.turnover) / (free - ramp_to)


def ic_channel(s: AnswerStats, cfg: Ic) -> float:
    """R7: 0.2 · clip(20 · IC, −1, 1); at most 0.05 while CPCV ≤ 0.

    IC 0.05 earns the full 0.2."""
    value = cfg.weight * float(np.clip(cfg.scale * s.ic, -1.0, 1.0))
    return min(value, cfg.cap_when_cpcv_nonpositive) if s.cpcv <= 0 else value


def novelty_pnl(s: AnswerStats, cfg: NoveltyPnl) -> float:
    """R8: 0.4 · (1 − max |corr| of daily net P&L against the archive); ≥ 0.95 pays −0.4."""
    assert s.max_corr is not None
    if s.max_corr >= cfg.duplicate_corr:
        return cfg.duplicate_penalty
    return cfg.weight * (1.0 - s.max_corr)


def novelty_syntax(s: AnswerStats, cfg: NoveltySyntax) -> float:
    """R9: 0.2 · (1 − max |corr|) if the canonical form was never seen and its book is not one already seen
    (max |corr| < `same_book_corr`, 0.95: `rank(rank(X) * rank(X))` trades `rank(X)`'s book), else 0;
    −0.3 for each other answer in the group with the same canonical form."""
    assert s.max_corr is not None
    fresh = not s.seen_before and s.max_corr < cfg.same_book_corr
    base = cfg.weight * (1.0 - s.max_corr) if fresh else 0.0
    return base + cfg.same_group_penalty * s.same_in_group


def motif_guard(s: AnswerStats, cfg: MotifGuard) -> float:
    """R10: a bare motif (one time-series operator on one field, optionally inside rank/scale/sign/negation)
    or a price-only formula, with IC < 0.005: every positive channel is set to 0 and R10 = −1.

    `motif_guard_applies` decides; the verifier caps the other channels."""
    return cfg.penalty if s.motif else 0.0


def complexity(s: AnswerStats, cfg: Complexity) -> float:
    """R11: −0.02 per expression node beyond 24."""
    return cfg.per_node * max(0, s.nodes - cfg.free_nodes) + 0.0


def format_bonus(s: AnswerStats, cfg: Format) -> float:
    """R12: +0.05 for a `<think>…</think>` (or `<reasoning>`) block before the answer."""
    return cfg.reasoning_bonus if s.reasoning else 0.0




def is_bare_motif(node: Node) -> bool:
    """One time-series operator on one field, optionally wrapped in rank/scale/sign/negation
    (negation written as unary minus or as a product with a literal, as the paper does)."""
    while isinstance(node, Call):
        if node.op in MOTIF_WRAPPERS:
            node = node.args[0]
        elif node.op == "mul" and any(isinstance(a, Num) for a in node.args):
            node = next(a for a in node.args if not isinstance(a, Num))
        else:
            break
    return (isinstance(node, Call) and OPS[node.op].kind == "ts" and len(node.args) == 1
            and isinstance(node.args[0], Field))


def motif_guard_applies(node: Node, fields: list[str], ic: float, cfg: MotifGuard) -> bool:
    """R10: a bare motif or a price-only formula (no volume) whose IC is below the threshold."""
    return (is_bare_motif(node) or "volume" not in fields) and ic < cfg.ic_threshold


def crowding(families: Sequence[Sequence[str | None]], recent: Mapping[str, int],
             cfg: Crowding, eligible: Sequence[Sequence[bool]] | None = None) -> list[list[float]]:
    """R13: over a whole RL step: −`weight` (1.0) × the share of the answer's formula family (canonical form,
    windows bucketed; an answer whose train P&L has |corr| ≥ `same_bet_corr` (0.9) with a family's, in this
    step or the window, is that family: one bet, whatever its form) among the valid answers to the *other*
    briefs of the step and of the last `window` (20) steps. Rarity relieves only a bet of its own: an answer
    that is invalid, loses on the train window (CPCV ≤ 0) or is a factor bet (the five factors explain more
    than `max_factor_r2`, 0.5, of its daily P&L variance) pays the full −`weight`; the planted edges' factor
    R² is at most 0.42 on seeds 7, 5, 11 and 21-24, the high-beta trap's 1.00 and its range forms'
    0.77-0.89 (null: no gate, an invalid answer 0). It counts outside the answer's own group, so it still
    varies where GDPO standardises within the group. Set by the RL environment
    (`VerifierEnv.step_channels`; 0 on a formula scored alone); priority 0 by default: logged, not rewarded.

    `families`: one list per brief (group) of the step (`rl.env.bet_families`); `recent`: family -> count
    over the last `window` steps. Counting other briefs and earlier steps, not the answer's own group, keeps
    the signal alive where GDPO standardises within the group: in a group whose answers differ in family it
    differs wherever their families are not equally crowded elsewhere. Family A written by 6 of 8 answers
    to the other briefs and recent steps pays -0.75 x weight.

    `eligible` (same shape; `cfg.max_factor_r2` set): rarity relieves only the answers marked True (a bet of
    its own that makes money on the train window, `rl.env.VerifierEnv.step_channels`); every other answer,
    invalid ones included, pays the full -weight, so that a rare trap or a broken answer is not the group's
    most diverse. Without it an answer without a family (invalid) gets 0. Their families still count in the
    others' shares: they were written."""
    step = Counter(f for g in families for f in g if f)
    n_recent = sum(recent.values())
    out = []
    for i, g in enumerate(families):
        own = Counter(f for f in g if f)
        n_other = sum(step.values()) - sum(own.values()) + n_recent
        row = []
        for j, f in enumerate(g):
            if eligible is not None and not eligible[i][j]:
                row.append(-cfg.weight)
            else:
                row.append(-cfg.weight * (step[f] - own[f] + recent.get(f, 0)) / n_other if f and n_other else 0.0)
        out.append(row)
    return out


def compliance(share: float, valid: bool, cfg: Compliance) -> float:
    """R14: brief compliance: the share of the brief's five checks the answer passes (mechanism, horizon,
    input rule, structure, forbidden pattern; `docs/briefs.md`) − 1, so a compliant answer scores 0 and one
    passing 3 of 5 −0.4; gated (`verifier.compliance.gated`, on): an invalid answer scores −1. 0 on a formula
    scored without a brief. Priority 0 by default: logged, not rewarded; a rung turns it on with
    `reward_weights`."""
    return -1.0 if cfg.gated and not valid else float(share) - 1.0


def idea(fidelity: float | None, tau: float, valid: bool, cfg: Idea) -> float:
    """R15: mechanism fidelity: min(fidelity / τ − 1, 0), where fidelity is how closely the answer's train-window
    signal orders the stocks as one of its brief's mechanism references does (`briefs.idea`: the largest
    |mean daily rank correlation|) and τ the catalogue's `idea_tau`: 0 on mechanism, −1 for a signal that orders
    stocks unlike every reference. Gated (`verifier.idea.gated`, on): an invalid answer scores −1. 0 on a formula
    scored without a brief. It is what a grammar cannot state: the brief decoder keeps the mechanism's operators
    and fields, not its idea. Priority 0 by default: logged, not rewarded; a rung turns it on with
    `reward_weights`."""
    if not valid:
        return -1.0 if cfg.gated else 0.0
    if fidelity is None:
        return 0.0
    return min(float(fidelity) / tau - 1.0, 0.0)


def marginal(pnl: np.ndarray | None, members: np.ndarray, cpcv: float, valid: bool,
             cpcv_of: Callable[[np.ndarray], float], cfg: Marginal) -> float:
    """R16: marginal alpha: R1's CPCV of the answer's daily net P&L after OLS on the P&L of the members of a
    running book of the policy's own valid answers with train CPCV > 0 (at most `size`, 20, each with |corr|
    < `max_corr`, 0.5, with every other, as the capped book is built): what the answer adds to the book,
    not its own backtest. An invalid answer gets its R1 score; with an empty book it is R1. Set by the RL
    environment (`VerifierEnv.step_channels`, the book as it was before the step; 0 on a formula scored
    alone); priority 0 by default: logged, not rewarded.

    The residual keeps the answer's mean return less what its exposure to the members earns (the regression
    is fitted on demeaned series): an answer that copies a member earns 0, one uncorrelated with every
    member about its own CPCV. `members`: (k, T) raw net P&L over the train rows; `cpcv_of`: the verifier's
    CPCV of a net P&L (`BookScorer.cpcv_of_net`)."""
    if not valid or pnl is None or len(members) == 0:
        return cpcv
    x = members.T - members.mean(axis=1)
    beta = np.linalg.lstsq(x, pnl - pnl.mean(), rcond=None)[0]
    resid = pnl - members.T @ beta
    # a copy leaves rounding noise (1e-17): below the Sharpe's own floor it is a flat series, 0
    if float(np.std(resid)) <= 1e-12 * max(float(np.std(pnl)), 1e-300):
        return 0.0
    return float(cpcv_of(resid))


def combined(channels: Mapping[str, float], priorities: Mapping[str, float]) -> float:
    """The priority-weighted sum of the raw channels: TRL's `reward`, what a single-reward run sees (a channel
    without a priority weighs 0)."""
    return float(sum(priorities.get(k, 0.0) * v for k, v in channels.items()))


Scope = Literal["answer", "archive", "group", "step", "brief"]
SCOPES: dict[str, str] = {
    "answer": "per answer, from its book (kept with the card in the verifier's cache)",
    "archive": "per answer, against the novelty archive as it is now (train window only)",
    "group": "over the group of answers to one brief",
    "step": "over a whole RL step (set by the RL environment; 0 on a formula scored alone)",
    "brief": "per answer, against its brief (0 on a formula scored without one)",
}


@dataclass(frozen=True)
class Channel:
    """One reward channel: its id (the score card's key, `verifier.priorities`' key and its params block
    `verifier.<id>`), R-number, the pure function that computes it and what it is computed over (`SCOPES`).
    Its definition is the first paragraph of the function's docstring.

    `needs`: an `AnswerStats` field that is None where the channel is not computed; the card then lists the
    channel under `skipped` with `off`, and it stays 0."""

    id: str
    fn: Callable[..., Any]
    scope: Scope
    needs: str | None = None
    off: str = ""

    @property
    def r(self) -> str:
        return f"R{REWARD_CHANNELS.index(self.id) + 1}"

    @property
    def doc(self) -> str:
        """The definition: the docstring's first paragraph, on one line, without its R-number."""
        first = (self.fn.__doc__ or "").strip().split("\n\n")[0]
        return re.sub(r"^R\d+:\s*", "", " ".join(first.split()))


_STRESS_OFF = ("off: verifier.jepa_stress.enabled is false, or the world-model gates kept no world "
               "(results/world_model/gates.json); channel is 0")
_TRAIN_ONLY = "novelty is a train-window channel"

# In the order of `REWARD_CHANNELS` (a test checks it): the score card's order, the zero card, the report's
# definitions and docs/verifier.md follow this table.
REGISTRY: tuple[Channel, ...] = (
    Channel("cpcv", cpcv_channel, "answer"),
    Channel("pbo", pbo_penalties, "group"),
    Channel("jepa_stress", jepa_stress, "answer", needs="world_cpcvs", off=_STRESS_OFF),
    Channel("factor_neutrality", factor_neutrality, "answer"),
    Channel("turnover", turnover_penalty, "answer"),
    Channel("min_turnover", min_turnover, "answer"),
    Channel("ic", ic_channel, "answer"),
    Channel("novelty_pnl", novelty_pnl, "archive", needs="max_corr", off=_TRAIN_ONLY),
    Channel("novelty_syntax", novelty_syntax, "archive", needs="max_corr", off=_TRAIN_ONLY),
    Channel("motif_guard", motif_guard, "answer"),
    Channel("complexity", complexity, "answer"),
    Channel("format", format_bonus, "answer"),
    Channel("crowding", crowding, "step"),
    Channel("compliance", compliance, "brief"),
    Channel("idea", idea, "brief"),
    Channel("marginal", marginal, "step"),
)
CHANNELS = tuple(c.id for c in REGISTRY)
BY_ID = {c.id: c for c in REGISTRY}


def score_channels(s: AnswerStats, cfg: Any, scope: Scope, channels: dict[str, float],
                   skipped: dict[str, str]) -> None:
    """Set every channel of `scope` ("answer" or "archive") from the answer's statistics and its params block
    (`cfg`: the `verifier` params), in registry order; a channel whose `needs` is None is listed in `skipped`
    instead. Under the motif guard no channel of the scope stays positive (R10 itself is negative)."""
    for c in REGISTRY:
        if c.scope != scope:
            continue
        if c.needs is not None and vars(s)[c.needs] is None:
            skipped[c.id] = c.off
            continue
        value = c.fn(s, cfg[c.id])
        channels[c.id] = min(value, 0.0) if s.motif else value


def markdown(width: int = 110) -> str:
    """docs/verifier.md's list of channels, rendered from the registry (`python tools/verifier_doc.py`)."""
    out = []
    for c in REGISTRY:
        head = f"- **{c.r} `{c.id}`** ({c.scope}): "
        out += textwrap.wrap(head + c.doc, width, subsequent_indent="  ", break_on_hyphens=False)
    return "\n".join(out) + "\n"
