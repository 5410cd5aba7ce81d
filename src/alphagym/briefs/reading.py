"""Does a policy read its brief? Measured on answers sampled without the decoder (`policy.decoding: free`),
so what is counted is what the model itself writes, not what a constrained decoder wrote for it.

For answers to briefs (one list of answer texts a brief):

- `parse`: the share of answers whose `<alpha>` formula parses (within the verifier's limits);
- `own_<check>`: among the answers that parse, the share passing that check of their own brief;
  `own_checks` the mean over the five checks, `own_all` the share passing all five;
- `swap_<check>`: the same answers checked against their brief with that check's field changed to another
  value (`swapped`), and `gap_<check>` = own - swap. A policy that reads the field passes its own brief's
  check far more often than the swapped one's; a policy that ignores it passes both alike (gap near 0).
- `random_<check>`, `random_checks`, `random_all`: random valid formulas (e.g. the corpus's) checked against
  the same briefs, the same way: what answers that ignore the brief pass. Like with like: formulas that
  parse against answers that parse.

The swap changes one field and keeps the brief drawable (no contradiction with the others); the horizon is
swapped to one whose tolerance band does not overlap the brief's, so one window cannot pass both. The swap
is seeded by the brief's id, so the same briefs get the same swaps.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from alphagym.briefs.catalogue import CHECKS, FIELD_PART, Catalogue
from alphagym.briefs.compliance import check
from alphagym.briefs.generate import contradicts
from alphagym.dsl.answer import extract
from alphagym.dsl.ast import Node
from alphagym.dsl.errors import DslError
from alphagym.dsl.parser import Limits, parse


def swapped(brief: Mapping[str, Any], name: str, cat: Catalogue, tolerance: float) -> dict[str, Any]:
    """`brief` with the field of check `name` changed to another value that keeps it drawable; for the
    horizon, one whose band [h / (1 + tol), h * (1 + tol)] does not meet the brief's. Seeded by the brief's
    id and the check. A field with no such other value is a ValueError naming it."""
    field, part = name, FIELD_PART.get(name)       # each check reads the field of its name
    if part is None:
        h, band = int(brief[field]), (1.0 + tolerance) ** 2
        options: list[Any] = [x for x in cat.horizons if x > h * band or x * band < h]
    else:
        options = [x for x in cat.ids(part) if x != brief[field]]
    options = [x for x in options if part is None or not contradicts(cat, {**brief, field: x})]
    if not options:
        raise ValueError(f"brief {brief.get('id')}: no other {field} keeps it drawable")
    rng = np.random.default_rng([zlib.crc32(f"{brief.get('id')}|{name}".encode()), 41])
    return {**brief, field: options[int(rng.integers(len(options)))]}


def parsed(text: str, limits: Limits) -> Node | None:
    """The answer's formula parsed, or None when the answer has no well-formed block or it does not parse."""
    try:
        return parse(extract(text).formula, limits)
    except DslError:
        return None


def _passes(asts: Sequence[tuple[Mapping[str, Any], Node]], cat: Catalogue, tolerance: float
            ) -> dict[str, float]:
    out = {k: float("nan") for k in CHECKS}
    if not asts:
        return {**out, "checks": float("nan"), "all": float("nan")}
    results = [check(b, a, cat, tolerance).checks for b, a in asts]
    out = {k: float(np.mean([r[k] for r in results])) for k in CHECKS}
    return {**out, "checks": float(np.mean([out[k] for k in CHECKS])),
            "all": float(np.mean([all(r.values()) for r in results]))}


def reading(briefs: Sequence[Mapping[str, Any]], answers: Sequence[Sequence[str]], cat: Catalogue,
            tolerance: float, limits: Limits, baseline: Sequence[str] = (), per_brief: int = 0,
            seed: int = 0) -> dict[str, float]:
    """The reading measures (module docstring) of `answers` (one list a brief) to `briefs`; `baseline`:
    formulas drawn at random (`per_brief` a brief, seeded), each checked against the brief it is drawn for.
    Keys: answers, parse, own_*, swap_*, gap_*, and with a baseline random_*."""
    if len(briefs) != len(answers):
        raise ValueError(f"{len(briefs)} briefs but {len(answers)} answer lists")
    own = [(b, a) for b, group in zip(briefs, answers) for a in (parsed(t, limits) for t in group) if a is not None]
    n = sum(len(g) for g in answers)
    out: dict[str, float] = {"answers": float(n), "parse": len(own) / n if n else float("nan")}
    out.update({f"own_{k}": v for k, v in _passes(own, cat, tolerance).items()})
    for k in CHECKS:
        swap = [(swapped(b, k, cat, tolerance), a) for b, a in own]
        out[f"swap_{k}"] = _passes(swap, cat, tolerance)[k]
        out[f"gap_{k}"] = out[f"own_{k}"] - out[f"swap_{k}"]
    if baseline and per_brief:
        rng = np.random.default_rng([seed, 43])
        pool = [a for a in (parsed(f"<alpha>{f}</alpha>", limits) for f in baseline) if a is not None]
        rand = [(b, pool[int(i)]) for b in briefs for i in rng.integers(len(pool), size=per_brief)]
        out.update({f"random_{k}": v for k, v in _passes(rand, cat, tolerance).items()})
    return out
