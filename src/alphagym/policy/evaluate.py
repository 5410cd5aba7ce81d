"""How a policy answers briefs: validity, distinct canonical forms and brief compliance, and whether it
reads them (`reading_of`: `briefs.reading` on its free-sampled answers, against random valid formulas
checked against the same briefs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from alphagym.briefs.catalogue import Catalogue
from alphagym.briefs.compliance import BriefChecker
from alphagym.briefs.idea import IdeaCheck
from alphagym.briefs.reading import reading
from alphagym.dsl.parser import Limits
from alphagym.policy.model import Policy
from alphagym.verifier.verifier import Verifier


def answer_stats(cards_by_brief: Sequence[Sequence[Any]]) -> dict[str, float]:
    cards = [c for group in cards_by_brief for c in group]
    valid = [c for c in cards if c.valid]
    n = max(1, len(cards))
    return {
        "answers": float(len(cards)),
        "valid_share": len(valid) / n,
        "distinct_canonical": float(len({c.canonical for c in valid})),
        "compliant_share": sum(c.metrics.get("compliant", 0.0) for c in cards) / n,
        "compliance_mean": sum(c.metrics.get("compliance", 0.0) for c in cards) / n,
        "cpcv_mean_valid": float(np.mean([c.channels["cpcv"] for c in valid])) if valid else float("nan"),
        "cpcv_positive_share": sum(c.channels["cpcv"] > 0 for c in valid) / n,
    }


def evaluate_policy(policy: Policy, briefs: Sequence[Mapping[str, Any]], verifier: Verifier, cat: Catalogue,
                    tolerance: float, n: int, temperature: float, seed: int,
                    desc: str = "evaluate", idea: IdeaCheck | None = None) -> tuple[dict[str, float], list]:
    """`n` answers per brief, scored as groups with the brief's compliance; (stats, per-brief rows).
    `desc` names the progress bar over the generation's micro-batches. With `idea` (on the verifier's train
    panel): each valid answer's `idea_fidelity` to its brief's mechanism (`briefs.idea`) and, in the stats,
    `compliance_idea`, the share of valid answers whose fidelity reaches the catalogue's `idea_tau`."""
    groups = scored_answers(policy, briefs, verifier, cat, tolerance, n, temperature, seed, desc, idea)
    rows = [{"brief": b["id"], "answer": c.text, "valid": c.valid, "canonical": c.canonical, "cpcv": c.channels["cpcv"],
             "compliance": c.metrics.get("compliance", 0.0), "reason": c.reason,
             # measured by the verifier on the signal it scored (`BriefChecker(idea=...)`), as in RL and the probe
             **({"idea_fidelity": c.metrics.get("idea_fidelity", float("nan"))} if idea is not None else {})}
            for b, g in zip(briefs, groups) for c in g]
    stats = answer_stats(groups)
    if idea is not None:
        fid = [r["idea_fidelity"] for r in rows if r["valid"]]
        stats["compliance_idea"] = float(np.mean([f >= idea.tau for f in fid])) if fid else float("nan")
    return stats, rows


def scored_answers(policy: Policy, briefs: Sequence[Mapping[str, Any]], verifier: Verifier, cat: Catalogue,
                   tolerance: float, n: int, temperature: float, seed: int, desc: str,
                   idea: IdeaCheck | None = None) -> list[list[Any]]:
    """`n` answers per brief, each brief's scored as a group with its compliance (and, with `idea`, each valid
    answer's `idea_fidelity`): one list of cards a brief."""
    from tqdm.auto import tqdm

    answers = policy.generate(briefs, n=n, temperature=temperature, seed=seed,
                              progress=lambda it: tqdm(it, desc=desc, unit="batch", mininterval=2))
    return [verifier.score_group(a, answer=True, brief=BriefChecker(b, cat, tolerance, idea=idea))
            for b, a in tqdm(list(zip(briefs, answers)), desc=f"{desc}: score", unit="brief", mininterval=2)]


def verified_answers(policy: Policy, briefs: Sequence[Mapping[str, Any]], verifier: Verifier, cat: Catalogue,
                     tolerance: float, n: int, temperature: float, seed: int,
                     desc: str = "self-distill", min_compliance: float = 0.0
                     ) -> tuple[list[tuple[str, str]], dict[str, float]]:
    """The policy's own valid answers to `briefs` (`n` drawn per brief; one per distinct canonical form
    of a brief) that pass at least `min_compliance` of their brief's checks, as (brief text, answer) pairs:
    a rejection-sampling round's training set. Callers pass training briefs only. Returns (pairs, stats
    with the drawn answers' `answer_stats`)."""
    groups = scored_answers(policy, briefs, verifier, cat, tolerance, n, temperature, seed, desc)
    pairs = []
    for b, g in zip(briefs, groups):
        seen: set[str] = set()
        for c in g:
            if c.valid and c.canonical not in seen and c.metrics.get("compliance", 0.0) >= min_compliance:
                seen.add(c.canonical)
                pairs.append((b["text"], c.text))
    return pairs, {**answer_stats(groups), "kept": float(len(pairs))}


def reading_of(rows: Sequence[Mapping[str, Any]], briefs: Sequence[Mapping[str, Any]], cat: Catalogue, tol: float,
               limits: Limits, baseline: Sequence[str], per_brief: int, seed: int) -> dict[str, float]:
    """`briefs.reading` of free-sampled answer rows (`brief`, `answer`), the baseline's formulas drawn
    `per_brief` a brief."""
    by_brief: dict[str, list[str]] = {b["id"]: [] for b in briefs}
    for r in rows:
        by_brief[r["brief"]].append(r["answer"])
    return reading(briefs, [by_brief[b["id"]] for b in briefs], cat, tol, limits, baseline, per_brief, seed)
