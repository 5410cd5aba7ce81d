"""GDPO and the projections on hand-computed groups: zero-sum groups, invalid answers never positive,
priorities scale channels, a channel's numeric range does not matter, and the advantage-floor trap."""

from __future__ import annotations

import numpy as np
import pytest

from alphagym.rl.advantages import (
    below_on_brief,
    floor_eligible,
    gdpo,
    group_advantages,
    on_brief,
    project,
    standardise,
)


def test_standardise_by_hand_and_constant_channel_is_zero():
    z = standardise(np.array([1.0, 2.0, 3.0]))
    # mean 2, population std sqrt(2/3) = 0.81650
    np.testing.assert_allclose(z, [-1.224743, 0.0, 1.224743], atol=1e-5)
    assert np.all(standardise(np.array([0.7, 0.7, 0.7])) == 0.0)


def test_gdpo_sums_priority_weighted_zscores_and_is_zero_sum():
    ch = {"cpcv": [1.0, 2.0, 3.0], "format": [0.0, 0.0, 0.05], "pbo": [0.0, 0.0, 0.0]}
    pri = {"cpcv": 3.0, "format": 1.0, "pbo": 1.0}
    a = gdpo(ch, pri)
    f = np.array([-0.70710678, -0.70710678, 1.41421356])          # z-scores of [0, 0, 0.05]
    np.testing.assert_allclose(a, 3.0 * np.array([-1.224743, 0.0, 1.224743]) + f, atol=1e-4)
    assert abs(a.sum()) < 1e-9


def test_priorities_scale_a_channel_and_its_range_does_not_matter():
    base = {"cpcv": [0.1, -0.2, 0.3, 0.0], "turnover": [0.0, -1.0, 0.0, -0.5]}
    pri = {"cpcv": 3.0, "turnover": 1.0}
    a = gdpo(base, pri)
    huge = {**base, "turnover": [1e6 * v for v in base["turnover"]]}
    np.testing.assert_allclose(gdpo(huge, pri), a, rtol=1e-5)     # 1e6 x the range: same (up to eps)
    doubled = gdpo(base, {"cpcv": 6.0, "turnover": 1.0})
    np.testing.assert_allclose(doubled - a, 3.0 * standardise(np.array(base["cpcv"])), atol=1e-9)
    assert np.all(gdpo(base, {"cpcv": 0.0, "turnover": 0.0}) == 0)


def test_projection_invalid_never_positive_zero_sum_order_kept():
    adv = np.array([1.5, 0.5, -0.5, 1.0, -2.5])
    valid = np.array([False, True, True, True, False])
    out = project(adv, valid)
    # the invalid 1.5 is clamped to 0: M = 1.5 handed to the three valid answers (+0.5 each)
    np.testing.assert_allclose(out, [0.0, 1.0, 0.0, 1.5, -2.5])
    assert abs(out.sum()) < 1e-12 and np.all(out[~valid] <= 0)
    assert list(np.argsort(out[valid])) == list(np.argsort(adv[valid]))


@pytest.mark.parametrize("seed", range(20))
def test_projection_invariants_on_random_groups(seed):
    rng = np.random.default_rng(seed)
    adv = rng.normal(size=12)
    adv -= adv.mean()
    elig = rng.random(12) < 0.6
    out = project(adv, elig)
    assert abs(out.sum()) < 1e-9
    assert np.all(out[~elig] <= 1e-12)
    e = np.flatnonzero(elig)
    assert np.all(np.diff(out[e][np.argsort(adv[e])]) >= -1e-12)


def test_no_eligible_answer_means_no_signal():
    assert np.all(project(np.array([1.0, -1.0, 0.0]), np.array([False, False, False])) == 0)


def test_floor_trap_on_a_scripted_environment():
    """Environment B in miniature: every core score below 0. With the floor at 0 no answer may be positive,
    so every group is all zeros (0% non-zero advantages); with the floor off nearly all answers carry
    signal. 'Off' is minus infinity, not another clamp at zero."""
    rng = np.random.default_rng(3)
    shares = {}
    for floor in (0.0, None):
        nonzero = []
        for _ in range(50):
            core = rng.normal(-1.5, 0.4, size=12)
            ch = {"cpcv": core, "turnover": rng.normal(-0.3, 0.2, size=12), "pbo": rng.uniform(-0.5, 0, size=12)}
            valid = np.ones(12, bool)
            a = group_advantages(ch, {"cpcv": 3.0, "turnover": 1.0, "pbo": 1.0}, valid, core, floor)
            nonzero.append(np.mean(np.abs(a) > 1e-9))
        shares[floor] = float(np.mean(nonzero))
    assert shares[0.0] == 0.0
    assert shares[None] > 0.95
    assert np.array_equal(floor_eligible(np.array([True, False]), np.array([-5.0, 1.0]), None), [True, False])


def test_combined_reward_lets_a_wide_channel_dominate_gdpo_does_not():
    ch = {"cpcv": [1.0, 0.0, 0.5, 0.2], "turnover": [0.0, -100.0, 0.0, -50.0]}
    pri = {"cpcv": 3.0, "turnover": 1.0}
    c = group_advantages(ch, pri, np.ones(4, bool), np.zeros(4), None, "combined")
    np.testing.assert_allclose(c, standardise(np.array([3.0, -100.0, 1.5, -49.4])))
    g = group_advantages(ch, pri, np.ones(4, bool), np.zeros(4), None, "gdpo")
    assert np.argmax(g) == 0 and np.argmax(c) in (0, 2)
    with pytest.raises(ValueError, match="unknown advantage"):
        group_advantages(ch, pri, np.ones(4, bool), np.zeros(4), None, "ppo")


def test_min_compliance_keeps_an_off_brief_answer_from_a_positive_advantage():
    """A group of four where the best-scoring answer passes 2 of 5 brief checks (R14 -0.6): with
    `min_compliance` 0.6 it may not be reinforced, its positive advantage goes to the answers on brief and the
    group still sums to zero; without it (negative control) it gets the largest advantage."""
    ch = {"cpcv": [2.0, 0.5, 0.4, -0.5], "compliance": [-0.6, 0.0, -0.4, -0.2]}
    pri = {"cpcv": 3.0, "compliance": 1.0}
    valid, core = np.ones(4, bool), np.array(ch["cpcv"])
    plain = group_advantages(ch, pri, valid, core, None)
    gated = group_advantages(ch, pri, valid, core, None, min_compliance=0.6)
    assert np.argmax(plain) == 0 and plain[0] > 0
    assert gated[0] <= 0 and abs(gated.sum()) < 1e-9 and np.argmax(gated) == 1
    assert list(on_brief(np.array(ch["compliance"]), 0.6)) == [False, True, True, True]
    assert on_brief(np.array(ch["compliance"]), None).all()


def test_off_brief_last_ranks_every_answer_on_brief_above_every_answer_off_it():
    """The same group: with `off_brief: clamp` the winning off-brief answer (0) sits above the losing
    on-brief one (negative), so the update moves the policy off brief (the control); with "last" it sits at
    or below every on-brief answer, the group still sums to zero, and the on-brief answers keep their order."""
    ch = {"cpcv": [2.0, 0.5, 0.4, -0.5], "compliance": [-0.6, 0.0, -0.4, -0.2]}
    pri = {"cpcv": 3.0, "compliance": 1.0}
    valid, core = np.ones(4, bool), np.array(ch["cpcv"])
    clamp = group_advantages(ch, pri, valid, core, None, min_compliance=0.6)
    last = group_advantages(ch, pri, valid, core, None, min_compliance=0.6, off_brief="last")
    assert clamp[0] > clamp[3]                      # the control: the check below can fail
    assert last[0] <= last[1:].min() + 1e-12 and last[0] < 0
    assert abs(last.sum()) < 1e-9
    assert list(np.argsort(-last[1:])) == list(np.argsort(-clamp[1:]))
    # with the floor: the on-brief loser is ineligible too, and still ranks above the off-brief winner
    floored = group_advantages(ch, pri, valid, core, 0.0, min_compliance=0.6, off_brief="last")
    assert floored[0] <= floored[3] + 1e-12 and abs(floored.sum()) < 1e-9
    with pytest.raises(ValueError, match="off_brief"):
        group_advantages(ch, pri, valid, core, None, min_compliance=0.6, off_brief="first")


def test_below_on_brief_leaves_a_group_all_on_or_all_off_brief_alone():
    adv = np.array([1.0, -0.5, -0.5])
    np.testing.assert_array_equal(below_on_brief(adv, np.ones(3, bool)), adv)
    np.testing.assert_array_equal(below_on_brief(adv, np.zeros(3, bool)), adv)
    np.testing.assert_array_equal(below_on_brief(adv, np.array([False, True, True])), [-0.5, -0.5, -0.5])


def test_off_brief_punish_gives_a_group_without_an_eligible_answer_the_brief_as_its_signal():
    """Every on-brief answer loses (core at or below the floor 0) and the off-brief one wins: "last" (the
    control) leaves the group at zero, "punish" gives the off-brief answer a negative advantage, at or below
    the valid on-brief ones, which keep their own order and take the positive mass; an invalid on-brief
    answer stays at or below 0."""
    ch = {"cpcv": [1.5, -0.2, -0.6, -1.0], "compliance": [-0.6, 0.0, -0.2, 0.0]}
    pri = {"cpcv": 3.0, "compliance": 1.0}
    core = np.array(ch["cpcv"])
    valid = np.array([True, True, True, False])
    last = group_advantages(ch, pri, valid, core, 0.0, min_compliance=0.6, off_brief="last")
    punish = group_advantages(ch, pri, valid, core, 0.0, min_compliance=0.6, off_brief="punish")
    assert np.allclose(last, 0.0)
    assert punish[0] < 0 and punish[0] <= punish[1:3].min() and punish[1] > punish[2] and punish[1] > 0
    assert punish[3] <= 0 and abs(punish.sum()) < 1e-9
    # a group with an eligible answer is treated as under "last"
    ch2 = {"cpcv": [2.0, 0.5, 0.4, -0.5], "compliance": [-0.6, 0.0, -0.4, -0.2]}
    args = (ch2, pri, np.ones(4, bool), np.array(ch2["cpcv"]), 0.0)
    np.testing.assert_allclose(group_advantages(*args, min_compliance=0.6, off_brief="punish"),
                               group_advantages(*args, min_compliance=0.6, off_brief="last"))
