"""The two entropy controllers: REPO-R's zeta thermostat and ADAPO's moving upper clip.

Both record a target entropy as the mean over the first `warmup` updates ("w5" with warmup 5) and then
react to each update's mean token entropy. Their state is a small dict, saved in every checkpoint.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


class _Warmup:
    """The shared warm-up: the target is the mean entropy of the first `warmup` updates (fields `warmup`,
    `target`, `seen` of the controller)."""

    warmup: int
    target: float | None
    seen: list[float]

    def _warming_up(self, entropy: float) -> bool:
        """Record `entropy` while the target is unset; True while warming up (including the update that
        sets the target: the controller reacts from the next one)."""
        if self.target is not None:
            return False
        self.seen.append(float(entropy))
        if len(self.seen) >= self.warmup:
            self.target = sum(self.seen) / len(self.seen)
        return True

    def state(self) -> dict:
        return asdict(self)


@dataclass
class ZetaThermostat(_Warmup):
    """zeta starts at `init`; after the warm-up it doubles while entropy is below the target and halves while
    above, kept within [0, zeta_max]. A halving below `floor` sets it to 0; a doubling from 0 restarts at
    `floor` (doubling 0 would leave it at 0 forever)."""

    init: float
    floor: float
    zeta_max: float
    warmup: int = 5
    zeta: float = field(init=False)
    target: float | None = None
    seen: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.zeta = min(self.init, self.zeta_max)

    def update(self, entropy: float) -> float:
        """Feed one update's mean entropy; returns zeta for the next update."""
        if self._warming_up(entropy):
            return self.zeta
        if entropy < self.target:
            self.zeta = self.floor if self.zeta == 0.0 else min(self.zeta * 2.0, self.zeta_max)
        elif entropy > self.target:
            half = self.zeta / 2.0
            self.zeta = 0.0 if half < self.floor else half
        return self.zeta

    @classmethod
    def from_state(cls, state: dict) -> ZetaThermostat:
        obj = cls(state["init"], state["floor"], state["zeta_max"], state["warmup"])
        obj.zeta, obj.target, obj.seen = state["zeta"], state["target"], list(state["seen"])
        return obj


@dataclass
class AdaptiveClip(_Warmup):
    """ADAPO's entropy feedback on DAPO's upper clip: after the warm-up the upper clip rises by `step` while
    entropy is below the target (more room to raise unlikely tokens) and falls by `step` while above, within
    [low, high]."""

    init: float
    step: float
    low: float
    high: float
    warmup: int = 5
    value: float = field(init=False)
    target: float | None = None
    seen: list[float] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.value = self.init

    def update(self, entropy: float) -> float:
        if self._warming_up(entropy):
            return self.value
        if entropy < self.target:
            self.value = min(self.value + self.step, self.high)
        elif entropy > self.target:
            self.value = max(self.value - self.step, self.low)
        return self.value

    @classmethod
    def from_state(cls, state: dict) -> AdaptiveClip:
        obj = cls(state["init"], state["step"], state["low"], state["high"], state["warmup"])
        obj.value, obj.target, obj.seen = state["value"], state["target"], list(state["seen"])
        return obj
