"""Combinatorial purged cross-validation of a daily P&L series (Lopez de Prado, AFML ch. 12).

The series is cut into `blocks` contiguous blocks; every combination of `test_blocks` blocks is one test
slice (6 choose 2 = 15). Its in-sample part is the remaining blocks minus `purge` sessions before and
`embargo` sessions after each test block. Masks are built once per series length; scoring is then two
matrix-vector products.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

import numpy as np


@dataclass(frozen=True)
class Slices:
    test: np.ndarray        # (K, T) bool
    insample: np.ndarray    # (K, T) bool

    @property
    def count(self) -> int:
        return self.test.shape[0]


def block_bounds(length: int, blocks: int) -> list[tuple[int, int]]:
    edges = np.linspace(0, length, blocks + 1).round().astype(int)
    return [(int(edges[i]), int(edges[i + 1])) for i in range(blocks)]


def make_slices(length: int, blocks: int = 6, test_blocks: int = 2, purge: int = 10, embargo: int = 5) -> Slices:
    bounds = block_bounds(length, blocks)
    tests, ins = [], []
    for combo in combinations(range(blocks), test_blocks):
        test = np.zeros(length, bool)
        for b in combo:
            test[bounds[b][0]:bounds[b][1]] = True
        inside = ~test
        for b in combo:
            lo, hi = bounds[b]
            inside[max(0, lo - purge):lo] = False
            inside[hi:min(length, hi + embargo)] = False
        tests.append(test)
        ins.append(inside)
    return Slices(np.array(tests), np.array(ins))


def masked_sharpes(x: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Annualised Sharpe (population std) of x over each mask; 0 where the std is 0."""
    m = masks.astype(np.float64)
    n = m.sum(axis=1)
    s1 = m @ x
    s2 = m @ (x * x)
    with np.errstate(all="ignore"):
        mean = s1 / n
        var = np.maximum(s2 / n - mean * mean, 0.0)
        sd = np.sqrt(var)
        out = np.where(sd > 1e-15, mean / sd * np.sqrt(252.0), 0.0)
    return np.where(n > 1, out, 0.0)


def cpcv_statistic(sharpes: np.ndarray, std_penalty: float = 0.5) -> float:
    """mean(SR) - std_penalty * std(SR) (population std)."""
    return float(np.mean(sharpes) - std_penalty * np.std(sharpes))
