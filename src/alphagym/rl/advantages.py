"""Group advantages: GDPO over the reward channels, then the validity projection and the advantage floor.

Each function is a small pure function of arrays of one group (the answers to one brief), re-derived from
its definition and tested on hand-computed groups (tests/test_rl_advantages.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

EPS = 1e-6          # in (x - mean) / (std + EPS): a near-constant channel cannot blow up
OFF_BRIEF = ("clamp", "last", "punish")   # group_advantages' treatment of answers below min_compliance


def standardise(x: np.ndarray, eps: float = EPS) -> np.ndarray:
    """(x - mean) / (std + eps) within the group (population std); a constant channel gives zeros."""
    x = np.asarray(x, dtype=float)
    std = float(x.std())
    if std < 1e-12:
        return np.zeros_like(x)
    return (x - x.mean()) / (std + eps)


def gdpo(channels: Mapping[str, Sequence[float]], priorities: Mapping[str, float], eps: float = EPS) -> np.ndarray:
    """GDPO: A_i = sum_c priority_c * (x_ic - mean_c) / (std_c + eps), each channel standardised within the
    group. Every channel's contribution then has unit scale whatever its numeric range, so a channel with
    values in the thousands weighs what its priority says and no more.

    Difference from TRL's `multi_objective_aggregation="normalize_then_sum"`: TRL sums the weighted channel
    z-scores and then standardises the sum again over the whole batch; here the sum is used as is (no batch
    re-normalisation), so the priorities keep their absolute meaning: a group where only CPCV varies gets
    advantages of scale 3, one where only the format bonus varies gets scale 1."""
    names = [c for c in channels if priorities.get(c, 0.0) != 0.0]
    if not names:
        n = len(next(iter(channels.values()))) if channels else 0
        return np.zeros(n)
    return np.sum([float(priorities[c]) * standardise(np.asarray(channels[c], float), eps) for c in names], axis=0)


def combined(channels: Mapping[str, Sequence[float]], priorities: Mapping[str, float], eps: float = EPS) -> np.ndarray:
    """GRPO's advantage on one reward: R_i = sum_c priority_c * x_ic, then (R_i - mean) / (std + eps) within
    the group. A channel with a large numeric range dominates R, which is what GDPO avoids."""
    names = [c for c in channels if priorities.get(c, 0.0) != 0.0]
    n = len(next(iter(channels.values()))) if channels else 0
    reward = np.sum([float(priorities[c]) * np.asarray(channels[c], float) for c in names], axis=0) if names \
        else np.zeros(n)
    return standardise(reward, eps)


def project(adv: np.ndarray, eligible: np.ndarray) -> np.ndarray:
    """No positive advantage for an ineligible answer, and the group still sums to zero.

    Ineligible answers' advantages are clamped to <= 0; the positive mass removed (M) is handed back to the
    eligible answers as one equal shift (M / n_eligible), which keeps their order. With no eligible answer
    the only zero-sum vector with every entry <= 0 is all zeros, so the group carries no signal."""
    adv = np.asarray(adv, float)
    eligible = np.asarray(eligible, bool)
    adv = adv - adv.mean()                      # a zero-sum input (GDPO's is, up to rounding)
    out = adv.copy()
    out[~eligible] = np.minimum(adv[~eligible], 0.0)
    if not eligible.any():
        return np.zeros_like(adv)
    out[eligible] -= out.sum() / eligible.sum()
    return out


def floor_eligible(valid: np.ndarray, core: np.ndarray, floor: float | None) -> np.ndarray:
    """Answers that may get a positive advantage: valid, and (with a floor) core score above the floor.
    `floor=None` is "off": the floor is at minus infinity, not a clamp at zero."""
    valid = np.asarray(valid, bool)
    if floor is None:
        return valid
    return valid & (np.asarray(core, float) > float(floor))


def on_brief(compliance: np.ndarray, min_share: float | None) -> np.ndarray:
    """Answers that follow their brief well enough for a positive advantage: R14 (`compliance`, the share of
    the brief's checks passed minus 1) at least `min_share` - 1; all of them when `min_share` is None. With
    0.6, an answer passing 3 of 5 checks stays eligible and one passing 2 does not."""
    compliance = np.asarray(compliance, float)
    if min_share is None:
        return np.ones(compliance.shape, bool)
    return compliance + 1.0 >= float(min_share) - 1e-9


def below_on_brief(adv: np.ndarray, on: np.ndarray) -> np.ndarray:
    """Each off-brief answer's advantage lowered to at most the lowest of the group's on-brief answers, so
    that every answer on brief, winning or losing, ranks above every answer off it; unchanged when the group
    is all on or all off brief. `project` keeps this order: it only lowers ineligible answers and raises
    eligible ones."""
    adv, on = np.asarray(adv, float), np.asarray(on, bool)
    if on.all() or not on.any():
        return adv
    out = adv.copy()
    out[~on] = np.minimum(adv[~on], adv[on].min())
    return out


def group_advantages(channels: Mapping[str, Sequence[float]], priorities: Mapping[str, float], valid: np.ndarray,
                     core: np.ndarray, floor: float | None, kind: str = "gdpo",
                     min_compliance: float | None = None, off_brief: str = "clamp") -> np.ndarray:
    """GDPO (or the combined reward's z-score), then the validity projection and the floor's in one
    projection: the floor, and `min_compliance` (`on_brief`, read from the `compliance` channel), only narrow
    the answers eligible for a positive advantage. An answer that ignores its brief then cannot be
    reinforced however well it scores, which a summed compliance channel cannot promise: there CPCV's
    priority outweighs it.

    `off_brief`: "clamp" leaves an off-brief answer at most 0, so a winning one sits at 0 above its group's
    losing answers on brief, and the update moves the policy off brief wherever following it loses; "last"
    also puts it at or below every on-brief answer of its group (`below_on_brief`); "punish" is "last", and
    a group with no eligible answer (none on brief scores above the floor) makes its valid on-brief answers
    the eligible ones, so an off-brief answer's advantage is negative wherever a valid answer follows the
    brief, where "last" leaves such a group at zero."""
    if kind not in ("gdpo", "combined"):
        raise ValueError(f"unknown advantage {kind!r} (gdpo, combined)")
    if off_brief not in OFF_BRIEF:
        raise ValueError(f"unknown off_brief {off_brief!r} ({', '.join(OFF_BRIEF)})")
    raw = gdpo(channels, priorities) if kind == "gdpo" else combined(channels, priorities)
    eligible = floor_eligible(valid, core, floor)
    if min_compliance is not None:
        on = on_brief(np.asarray(channels["compliance"], float), min_compliance)
        if off_brief != "clamp":
            raw = below_on_brief(raw, on)
        eligible &= on
        if off_brief == "punish" and not eligible.any():
            eligible = np.asarray(valid, bool) & on
    return project(raw, eligible)
