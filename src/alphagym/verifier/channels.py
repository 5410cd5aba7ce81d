"""The reward channels as small pure functions of raw statistics. Each exists to close one way of looking
profitable without an edge; the worked examples of the verifier issue are their tests."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from alphagym.dsl.ast import Call, Field, Node, Num
from alphagym.dsl.registry import OPS
from alphagym.params import (
    Complexity,
    Crowding,
    FactorNeutrality,
    Format,
    Ic,
    MinTurnover,
    MotifGuard,
    NoveltyPnl,
    NoveltySyntax,
    Turnover,
)


def factor_neutrality(raw_sharpe: float, residual_sharpe: float, cfg: FactorNeutrality) -> float:
    """R4: -0.4 * clip(raw - residual Sharpe, 0, 3). Sharpe 1.5 -> 0.3 after factors pays -0.48."""
    return -cfg.scale * float(np.clip(raw_sharpe - residual_sharpe, 0.0, cfg.clip)) + 0.0


def jepa_stress(base_cpcv: float, world_cpcvs: list[float], scale: float) -> float:
    """R3: -min(1, 0.4 * log(1 + mean over kept worlds of max(0, CPCV_base - CPCV_world))), the same CPCV and
    training costs as R1. A formula that holds up in every world pays 0; a drop of e - 1 = 1.72 pays -0.4."""
    drops = [max(0.0, base_cpcv - w) for w in world_cpcvs]
    return -min(1.0, scale * float(np.log1p(np.mean(drops)))) + 0.0 if drops else 0.0


def turnover_penalty(turnover: float, cfg: Turnover) -> float:
    """R5: -2 * max(0, turnover - 0.5)."""
    return -cfg.slope * max(0.0, turnover - cfg.cap) + 0.0      # + 0.0: no -0.0 in score cards


def min_turnover(turnover: float, cfg: MinTurnover) -> float:
    """R6: 0 at >= 6%/day; a linear ramp to -1 between 6% and 3%; -1 from 3% to 2% (below 2%: invalid)."""
    free, ramp_to = cfg.free, cfg.ramp_to
    if turnover >= free:
        return 0.0
    if turnover <= ramp_to:
        return -1.0
    return -(free - turnover) / (free - ramp_to)


def ic_channel(ic: float, cpcv: float, cfg: Ic) -> float:
    """R7: 0.2 * clip(20 * IC, -1, 1), at most 0.05 while CPCV <= 0. IC 0.05 earns the full 0.2."""
    value = cfg.weight * float(np.clip(cfg.scale * ic, -1.0, 1.0))
    return min(value, cfg.cap_when_cpcv_nonpositive) if cpcv <= 0 else value


def novelty_pnl(max_corr: float, cfg: NoveltyPnl) -> float:
    """R8: 0.4 * (1 - max |corr|) against the archive; a near duplicate (>= 0.95) pays -0.4."""
    if max_corr >= cfg.duplicate_corr:
        return cfg.duplicate_penalty
    return cfg.weight * (1.0 - max_corr)


def novelty_syntax(max_corr: float, seen_before: bool, same_in_group: int, cfg: NoveltySyntax) -> float:
    """R9: 0.2 * (1 - max |corr|) for a never-seen canonical form whose book is not one already seen (max
    |corr| below `same_book_corr`, 0.95: `rank(rank(X) * rank(X))` is `rank(X)`'s book under another form);
    -0.3 per other group answer sharing its form."""
    fresh = not seen_before and max_corr < cfg.same_book_corr
    base = cfg.weight * (1.0 - max_corr) if fresh else 0.0
    return base + cfg.same_group_penalty * same_in_group


def complexity(nodes: int, cfg: Complexity) -> float:
    """R11: -0.02 per expression node beyond 24."""
    return cfg.per_node * max(0, nodes - cfg.free_nodes) + 0.0


def format_bonus(has_reasoning: bool, cfg: Format) -> float:
    """R12: +0.05 for a reasoning block before the answer."""
    return cfg.reasoning_bonus if has_reasoning else 0.0


def pbo_penalties(insample: np.ndarray, oos: np.ndarray, floor: float) -> np.ndarray:
    """R2, for a group: per slice, rank answers by in-sample and by out-of-sample Sharpe; an answer's penalty
    is floor * mean over slices of max(0, oos rank - in-sample rank) / (n - 1). Rank 0 is the best.
    insample, oos: (answers, slices). First in-sample and last out-of-sample pays the full floor."""
    n = insample.shape[0]
    if n < 2:
        return np.zeros(n)
    r_is = np.argsort(np.argsort(-insample, axis=0, kind="stable"), axis=0, kind="stable")
    r_oos = np.argsort(np.argsort(-oos, axis=0, kind="stable"), axis=0, kind="stable")
    drop = np.maximum(r_oos - r_is, 0) / (n - 1)
    return floor * drop.mean(axis=1)


_WRAPPERS = {"rank", "scale", "sign", "neg"}


def is_bare_motif(node: Node) -> bool:
    """One time-series operator on one field, optionally wrapped in rank/scale/sign/negation
    (negation written as unary minus or as a product with a literal, as the paper does)."""
    while isinstance(node, Call):
        if node.op in _WRAPPERS:
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
    """R13, over a whole step: -weight x the share of an answer's formula family (its canonical form, windows
    bucketed, or the family whose P&L it tracks: `rl.env.bet_families`) among the valid answers to the *other* briefs
    of its step and of the last `window` steps (`recent`: family -> count); 0 with nothing to compare.
    `families`: one list per brief (group) of the step. Counting other briefs and earlier steps, not the
    answer's own group, keeps the signal alive where GDPO standardises within the group: in a group whose
    answers differ in family it differs wherever their families are not equally crowded elsewhere. Family A
    written by 6 of 8 answers to the other briefs and recent steps pays -0.75 x weight.

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


def compliance(share: float, valid: bool, gated: bool) -> float:
    """R14: share of the brief's checkable parts the answer satisfies (mechanism, horizon, input rule,
    structure, forbidden pattern; `briefs.compliance`) minus 1: 0 for a compliant answer, -0.4 for one that
    passes 3 of 5 checks. Gated, an invalid answer earns -1 whatever it would have passed."""
    return -1.0 if gated and not valid else float(share) - 1.0


def cpcv_channel(cpcv: float) -> float:
    """R1: the CPCV of the net P&L itself (`engine.scorer.BookScorer.cpcv_sharpes`: 6 blocks, each of the 15
    pairs a test slice, mean(SR_k) - 0.5 std(SR_k), purged and embargoed); an invalid answer gets the
    invalid score of its kind instead."""
    return cpcv


def motif_guard(applies: bool, cfg: MotifGuard) -> float:
    """R10: -1 when `motif_guard_applies` (and every positive channel is set to 0), else 0."""
    return cfg.penalty if applies else 0.0


def combined(channels: Mapping[str, float], priorities: Mapping[str, float]) -> float:
    """The priority-weighted sum of the raw channels: TRL's `reward`, what a single-reward run sees (a channel
    without a priority weighs 0)."""
    return float(sum(priorities.get(k, 0.0) * v for k, v in channels.items()))


@dataclass(frozen=True)
class Channel:
    """One reward channel: its id (the score card's key and `verifier.priorities`' key), R-number, the pure
    function that computes it, its params block under `verifier:`, whether it is per answer or needs the
    group, and a one-line definition with a worked example."""

    id: str
    r: str
    fn: Callable[..., Any]
    params_key: str | None
    scope: Literal["answer", "group", "step"]
    doc: str


# The one table of channels, in score-card order: `CHANNELS`, the zero card, the report's definitions and
# the docs' table are read from it (tests/test_verifier_channels.py keeps `Priorities` and docs/verifier.md
# in step with it).
REGISTRY: tuple[Channel, ...] = (
    Channel("cpcv", "R1", cpcv_channel, "cpcv", "answer",
            "CPCV of the net P&L: mean(SR_k) - 0.5 std(SR_k) over 15 purged test slices"),
    Channel("pbo", "R2", pbo_penalties, "pbo", "group",
            "rank drop from in-sample to test Sharpe within the group, times -0.48; 0 for a group of one"),
    Channel("jepa_stress", "R3", jepa_stress, "jepa_stress", "answer",
            "-min(1, 0.4 log(1 + mean CPCV drop in the kept stress worlds)); a drop of 1.72 pays -0.4"),
    Channel("factor_neutrality", "R4", factor_neutrality, "factor_neutrality", "answer",
            "-0.4 clip(raw - residual Sharpe after 5 factors, 0, 3); 1.5 -> 0.3 pays -0.48"),
    Channel("turnover", "R5", turnover_penalty, "turnover", "answer", "-2 max(0, turnover - 0.5)"),
    Channel("min_turnover", "R6", min_turnover, "min_turnover", "answer",
            "0 at >= 6%/day, a ramp to -1 at 3%, -1 to 2%; below 2% invalid"),
    Channel("ic", "R7", ic_channel, "ic", "answer", "0.2 clip(20 IC, -1, 1), at most 0.05 while CPCV <= 0"),
    Channel("novelty_pnl", "R8", novelty_pnl, "novelty_pnl", "answer",
            "0.4 (1 - max |corr| with the archive); a near duplicate (>= 0.95) pays -0.4"),
    Channel("novelty_syntax", "R9", novelty_syntax, "novelty_syntax", "group",
            "0.2 (1 - max |corr|) for an unseen form of an unseen book; -0.3 per group answer sharing its form"),
    Channel("motif_guard", "R10", motif_guard, "motif_guard", "answer",
            "a bare motif or price-only formula with IC < 0.005: positive channels to 0, -1"),
    Channel("complexity", "R11", complexity, "complexity", "answer", "-0.02 per expression node beyond 24"),
    Channel("format", "R12", format_bonus, "format", "answer", "+0.05 for a reasoning block before the answer"),
    Channel("crowding", "R13", crowding, "crowding", "step",
            "-weight x the share of the answer's family (its canonical form, or the family whose P&L it "
            "tracks at |corr| >= 0.9) among the other briefs' answers of the step and of recent steps (set by "
            "the RL environment; 0 when a formula is scored alone); an answer that is invalid, loses (CPCV <= 0) "
            "or is a factor bet (factor R^2 > max_factor_r2) pays the full -weight"),
    Channel("compliance", "R14", compliance, "compliance", "group",
            "share of the brief's checks passed - 1 (3 of 5 pays -0.4); an invalid answer -1 when gated; 0 "
            "when a formula is scored without a brief"),
)
CHANNELS = tuple(c.id for c in REGISTRY)
BY_ID = {c.id: c for c in REGISTRY}
