"""Seeded design briefs: six fields drawn from the catalogue, rendered as one paragraph of text.

Template families are (mechanism, structure) pairs. A seeded share of the families is held out: the
holdout briefs come only from those, the training briefs never, and every mechanism and every structure
still occurs in training (the holdout tests new combinations, not new words). The held-out families name
every mechanism when there are at least as many of them as mechanisms, so every planted edge of the
simulator (one mechanism each) is asked for by some holdout brief, and the holdout briefs are drawn
family by family in a seeded order, so each held-out family holds the same number of them, give or take
one (a draw by chance gave one mechanism a third of them). A brief whose fields contradict each other (a
rule forbids every field or operator another field requires) is never drawn.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from alphagym.briefs.catalogue import FIELD_PART, FIELDS, Catalogue
from alphagym.briefs.contract import contradiction, merge_specs
from alphagym.errors import BriefError
from alphagym.params import Briefs as BriefsParams

RECORD = ("id", "split", "family", *FIELDS, "text")


def render(c: Catalogue, b: Mapping[str, Any]) -> str:
    return (f"{c.preamble} Design an alpha whose PRIMARY mechanism is: {c.text('mechanisms', b['mechanism'])}. "
            f"Target horizon: roughly {b['horizon']}-day windows. Inputs: {c.text('input_rules', b['input_rule'])}. "
            f"Structure: {c.text('structures', b['structure'])}. "
            f"Constraint: {c.text('forbidden', b['forbidden'])}. "
            f"Risk preference: {c.text('risks', b['risk'])}.")


def read_text(c: Catalogue, text: str) -> dict[str, Any] | None:
    """The fields of a brief text that `render` wrote (mechanism, horizon, input rule, structure, forbidden,
    risk), read back from the text alone; None for any other text (a user's own words). The decoder keeps a
    brief it can read (`briefs.contract`) and answers any other text under the grammar alone."""
    m = _RENDERED.fullmatch(text.strip())
    if m is None:
        return None
    out: dict[str, Any] = {"horizon": int(m["horizon"])}
    for key, part in FIELD_PART.items():
        ids = [k for k in c.ids(part) if c.text(part, k) == m[key]]
        if len(ids) != 1:
            return None
        out[key] = ids[0]
    return out


def read_fields(c: Catalogue, text: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """What a user's own brief text says of the catalogue's fields: each field (`FIELDS`) whose value it names
    unambiguously, by the catalogue's wording of one value or its id (`price_only`, or `price only`, as a
    word), and the horizon from a number of days (`21-day`, `21 days`, `horizon 21`); and the fields it
    could not read, each named or none. The text `render` writes reads whole (`read_text`)."""
    whole = read_text(c, text)
    if whole is not None:
        return whole, ()
    low = " ".join(text.lower().split())
    out: dict[str, Any] = {}
    m = re.search(r"(\d+)[- ]day|horizon\D{0,12}(\d+)", low)
    if m is not None:
        out["horizon"] = int(m.group(1) or m.group(2))
    for key, part in FIELD_PART.items():
        named = [k for k in c.ids(part) if c.text(part, k).lower().rstrip(".") in low
                 or re.search(rf"\b{re.escape(k.lower())}\b|\b{re.escape(k.lower().replace('_', ' '))}\b", low)]
        if len(named) == 1:
            out[key] = named[0]
    return out, tuple(k for k in FIELDS if k not in out)


_RENDERED = re.compile(r".* Design an alpha whose PRIMARY mechanism is: (?P<mechanism>.+?)\. Target horizon: roughly "
                       r"(?P<horizon>\d+)-day windows\. Inputs: (?P<input_rule>.+?)\. Structure: (?P<structure>.+?)\. "
                       r"Constraint: (?P<forbidden>.+?)\. Risk preference: (?P<risk>.+?)\.", re.S)


def contradicts(c: Catalogue, b: Mapping[str, Any]) -> bool:
    """True when one field forbids everything another requires (no formula could comply): the contract of the
    brief's four checked fields (`contract.merge_specs`) has a `contract.contradiction`."""
    specs = [c.spec(FIELD_PART[k], b[k]) for k in ("mechanism", "input_rule", "structure", "forbidden")]
    return contradiction(merge_specs(specs, 1, 0.0)) is not None


def families(c: Catalogue) -> list[str]:
    return [f"{m}|{s}" for m in c.ids("mechanisms") for s in c.ids("structures")]


def holdout_families(c: Catalogue, share: float, seed: int) -> list[str]:
    """A seeded set of families to hold out, leaving every mechanism and structure in training: first one
    family of each mechanism (in a seeded order, as many as the share allows), then seeded others."""
    rng = np.random.default_rng([seed, 1])
    fams = families(c)
    want = max(1, round(share * len(fams)))
    held: list[str] = []

    def keeps_training(f: str) -> bool:
        m, s = f.split("|")
        rest = [g for g in fams if g not in held and g != f]
        return any(g.startswith(m + "|") for g in rest) and any(g.endswith("|" + s) for g in rest)

    mechanisms = c.ids("mechanisms")
    for k in rng.permutation(len(mechanisms)):
        if len(held) == want:
            break
        own = [f for f in fams if f.startswith(mechanisms[k] + "|")]
        for i in rng.permutation(len(own)):
            if own[i] not in held and keeps_training(own[i]):
                held.append(own[i])
                break
    for i in rng.permutation(len(fams)):
        if len(held) == want:
            break
        if fams[i] not in held and keeps_training(fams[i]):
            held.append(fams[i])
    return sorted(held)


def _fields(c: Catalogue, family: str, rng: np.random.Generator) -> dict[str, Any]:
    m, s = family.split("|")
    return {"mechanism": m, "horizon": int(c.horizons[int(rng.integers(len(c.horizons)))]),
            "input_rule": c.ids("input_rules")[int(rng.integers(len(c.ids("input_rules"))))],
            "structure": s,
            "forbidden": c.ids("forbidden")[int(rng.integers(len(c.ids("forbidden"))))],
            "risk": c.ids("risks")[int(rng.integers(len(c.ids("risks"))))]}


def draw(c: Catalogue, fams: list[str], n: int, split: str, rng: np.random.Generator,
         max_tries: int = 100_000, stratified: bool = False) -> list[dict[str, Any]]:
    """`n` distinct, non-contradictory briefs from the given families: each from a family drawn at random,
    or (`stratified`) the i-th from the i-th family of a seeded order, cycled, so the families hold n / F
    briefs each, give or take one."""
    out, seen = [], set()
    order = [fams[i] for i in rng.permutation(len(fams))] if stratified else []
    tries = 0
    while len(out) < n and tries < max_tries:
        tries += 1
        family = order[len(out) % len(order)] if stratified else fams[int(rng.integers(len(fams)))]
        b = _fields(c, family, rng)
        key = tuple(b[f] for f in FIELDS)
        if key in seen or contradicts(c, b):
            continue
        seen.add(key)
        out.append({"id": f"{split}-{len(out):04d}", "split": split, "family": family, **b,
                    "text": render(c, b)})
    if len(out) < n:
        raise BriefError(f"could draw only {len(out)} of {n} distinct {split} briefs from {len(fams)} families")
    return out


def generate(c: Catalogue, cfg: BriefsParams, seed: int) -> tuple[list[dict], list[dict], list[str]]:
    """(train briefs, holdout briefs, holdout families)."""
    held = holdout_families(c, cfg.holdout_family_share, seed)
    train_fams = [f for f in families(c) if f not in held]
    rng = np.random.default_rng([seed, 2])
    return (draw(c, train_fams, cfg.train, "train", rng),
            draw(c, held, cfg.holdout, "holdout", rng, stratified=True), held)


def write_briefs(path: Path, briefs: Iterable[Mapping[str, Any]]) -> None:
    path.write_text("".join(json.dumps({k: b[k] for k in RECORD}) + "\n" for b in briefs))


def json_object(line: str, path: Path, i: int) -> dict[str, Any]:
    """Line `i` of a brief file as a JSON object; a BriefError naming the file and the line otherwise."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BriefError(f"not JSON: {exc.msg}", file=str(path), line=i) from None
    if not isinstance(row, dict):
        raise BriefError("a brief must be a JSON object", file=str(path), line=i)
    return row


def read_briefs(path: Path, catalogue: Catalogue | None = None) -> list[dict[str, Any]]:
    """Brief records from a JSONL file; a missing file, bad JSON, a missing or empty field, or an id the
    catalogue does not know is a BriefError naming the file, the line and the field."""
    path = Path(path)
    if not path.is_file():
        raise BriefError("brief file not found (run `alphagym briefs`)", file=str(path))
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BriefError(f"not UTF-8 text (garbled?): {exc}", file=str(path)) from None
    out = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        row = json_object(line, path, i)
        for k in RECORD:
            if k not in row:
                raise BriefError("missing field", file=str(path), line=i, field=k)
            if row[k] in ("", None):
                raise BriefError("empty field", file=str(path), line=i, field=k)
        if catalogue is not None:
            for k, part in FIELD_PART.items():
                if row[k] not in catalogue.rows[part]:
                    raise BriefError(f"unknown id {row[k]!r}", file=str(path), line=i, field=k)
        out.append(row)
    if not out:
        raise BriefError("no briefs in file", file=str(path))
    return out
