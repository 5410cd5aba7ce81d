"""Deterministic brief compliance: what a brief asks that can be checked on the formula itself.

Five checks, each pass/fail with a reason: the mechanism's signature (operators and fields it implies),
the horizon (the formula's longest window within a tolerance of the brief's), the input rule, the
structural hint (required operators or root) and the forbidden pattern. The risk preference is about the
book, not the formula, and is not checked here. Compliance is the share of checks passed; it is reported
wherever answers are scored, as the R14 `compliance` channel (rewarded when its priority is above 0).

The rules are not written here: each check is its part of the brief's contract (`contract.check_contracts`),
judged by the contract's one statement of the rules (`contract.failure`), which the decoder's prefix rules
(`contract.unmet`, `contract.violation`) and the generator's refusal of contradictory briefs
(`contract.contradiction`) share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from alphagym.briefs.catalogue import CHECKS, Catalogue
from alphagym.briefs.contract import Contract, check_contracts, failure, whole_facts
from alphagym.briefs.idea import IdeaCheck
from alphagym.dsl.ast import Node
from alphagym.panel import Panel

# the probe's and the report's column of each check's pass rate
CHECK_COLUMNS = {k: f"compliance_{k}" for k in CHECKS}


@dataclass(frozen=True)
class Compliance:
    checks: dict[str, bool]
    reasons: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return all(self.checks.values())

    @property
    def share(self) -> float:
        return sum(self.checks.values()) / len(self.checks)


def check(brief: Mapping[str, Any], ast: Node, catalogue: Catalogue, tolerance: float) -> Compliance:
    """Compliance of a parsed formula with a brief (a row of the brief file: ids into the catalogue): each
    check's part of the brief's contract (`contract.check_contracts`) judged by the contract's one statement
    of the rules (`contract.failure`), on the formula's facts read once."""
    facts, windowed = whole_facts(ast)
    reasons = {name: failure(part, facts, windowed) for name, part in _parts(brief, catalogue, tolerance).items()}
    return Compliance({k: r is None for k, r in reasons.items()}, {k: r for k, r in reasons.items() if r})


# (catalogue id, the checked fields, tolerance) -> (the catalogue, its parts): the catalogue is kept so its id
# stays its own; a scoring run meets a few hundred briefs
_PARTS: dict[tuple[Any, ...], tuple[Catalogue, dict[str, Contract]]] = {}


def _parts(brief: Mapping[str, Any], catalogue: Catalogue, tolerance: float) -> dict[str, Contract]:
    key = (id(catalogue), *(str(brief[k]) for k in CHECKS), tolerance)
    hit = _PARTS.get(key)
    if hit is None:
        if len(_PARTS) >= 8192:
            _PARTS.clear()
        hit = _PARTS[key] = (catalogue, check_contracts(brief, catalogue, tolerance))
    return hit[1]


@dataclass(frozen=True)
class BriefChecker:
    """One brief's compliance check, as the verifier takes it (`Verifier.score_group(..., brief=...)`)."""

    brief: Mapping[str, Any]
    catalogue: Catalogue
    tolerance: float
    checks: tuple[str, ...] = CHECKS
    idea: IdeaCheck | None = None     # mechanism fidelity on the train panel (R15); None: not measured

    def check(self, ast: Node) -> Compliance:
        return check(self.brief, ast, self.catalogue, self.tolerance)

    @property
    def idea_tau(self) -> float:
        return self.catalogue.idea_tau

    def fidelity(self, ast: Node, signal: np.ndarray | None = None, panel: Panel | None = None) -> float | None:
        """A valid formula's fidelity to the brief's mechanism (`briefs.idea`), None without an idea check or a
        mechanism. `signal`: the formula's values on `panel`, read only when that is the idea check's panel."""
        if self.idea is None or "mechanism" not in self.brief:
            return None
        return self.idea.fidelity_of(ast, str(self.brief["mechanism"]), signal if panel is self.idea.panel else None)
