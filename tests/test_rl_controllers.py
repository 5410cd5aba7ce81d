"""The REPO-R zeta thermostat and ADAPO's clip on scripted entropy sequences."""

from __future__ import annotations

import pytest

from alphagym.rl.controllers import AdaptiveClip, ZetaThermostat


def test_thermostat_log_on_a_scripted_entropy_sequence():
    th = ZetaThermostat(init=0.01, floor=0.005, zeta_max=0.05, warmup=5)
    warm = [1.0, 1.2, 0.8, 1.1, 0.9]                 # target = 1.0 ("w5")
    log = [th.update(e) for e in warm]
    assert log == [0.01] * 5 and th.target == pytest.approx(1.0)
    script = [0.9, 0.9, 0.9, 0.9, 1.1, 1.1, 1.1, 1.1, 1.1, 0.5, 1.0]
    log = [th.update(e) for e in script]
    # below target: doubles, capped at 0.05; above: halves, to 0 once below the floor; from 0 it restarts at
    # the floor; at the target it holds
    assert log == pytest.approx([0.02, 0.04, 0.05, 0.05, 0.025, 0.0125, 0.00625, 0.0, 0.0, 0.005, 0.005])


def test_thermostat_state_round_trips():
    th = ZetaThermostat(0.01, 0.005, 0.05, warmup=2)
    for e in (1.0, 0.5, 0.2):
        th.update(e)
    again = ZetaThermostat.from_state(th.state())
    assert again.state() == th.state()
    assert again.update(0.1) == th.update(0.1)


def test_adaptive_clip_moves_with_entropy_within_bounds():
    ac = AdaptiveClip(init=0.28, step=0.05, low=0.2, high=0.4, warmup=2)
    log = [ac.update(e) for e in (1.0, 1.0, 0.5, 0.5, 0.5, 2.0, 2.0, 2.0, 2.0)]
    assert log == pytest.approx([0.28, 0.28, 0.33, 0.38, 0.4, 0.35, 0.3, 0.25, 0.2])
    assert AdaptiveClip.from_state(ac.state()).state() == ac.state()
