"""The SFT corpus: verified brief -> formula pairs.

Formulas come from two seeded sources: a grammar sampler that composes the shapes alpha formulas take (a
base quantity, one or two time-series transforms, a cross-sectional wrapper, sometimes a second piece
combined with it) with windows near the catalogue's horizons, and mutations of the usable Alpha101 (windows
rescaled, one field swapped), every one written in plain form (`dsl.printer`: one name per operator,
integer windows). The verifier scores each on the train window; each valid one gets a brief it
satisfies: for every brief field, the catalogue options the compliance checker passes on this formula, one
drawn at random (the mechanism and structure pair only from the training families). A formula no training
family fits is dropped. Every pair is re-checked before it is kept.

The mechanism checks are loose (`ts_mean(close, d)` passes both `reversal` and `trend_persistence`), so a
pair drawn by form alone often names a mechanism whose idea the formula does not follow, and the policy
learns that a brief's mechanism says little. `mechanism_by: idea` draws the mechanism among those the
formula also follows, where there is one: its signal's fidelity to the mechanism's reference signals
reaches the catalogue's `idea_tau` (`briefs.idea`, measured on the train panel); a formula that follows
none keeps a mechanism drawn by form, or with `idea_only` is dropped (counted as `off_mechanism`).

`pairing: brief` builds the corpus brief first, so that a brief's fields can be learned from it: `briefs`
briefs are drawn from the training families as the briefs stage draws them (families in a seeded order,
cycled; every other field uniform, so every value of every field is represented), and each is paired with up
to `per_brief` of the valid formulas that pass every check of it, the least used first (so the pairs spread
over the candidates instead of repeating the few that pass many briefs); under `mechanism_by: idea(_only)`
the formulas that also follow the brief's mechanism come first (`idea_only`: only they). A formula-first
pair draws each field among the options a formula passes, so a field predicts little of the formula: the
horizon, a number the answer must copy into its longest window, is what that teaches least. A brief no
candidate passes is counted (`briefs_unmatched`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import numpy as np
import pandas as pd

from alphagym.briefs.catalogue import CHECKS, FIELD_PART, Catalogue
from alphagym.briefs.compliance import check
from alphagym.briefs.contract import failure, horizon_contract, spec_contract, whole_facts
from alphagym.briefs.generate import contradicts, render
from alphagym.briefs.idea import IdeaCheck
from alphagym.dsl.alpha101 import alpha101
from alphagym.dsl.canonical import canonical
from alphagym.dsl.errors import DslError
from alphagym.dsl.parser import Limits, parse
from alphagym.dsl.printer import plain
from alphagym.dsl.registry import draw_order, ts_transforms
from alphagym.errors import ConfigError
from alphagym.panel import DSL_FIELDS
from alphagym.params import Corpus

BASES = ["returns", "volume", "close", "vwap", "high - low", "(close - open) / (high - low + 0.001)",
         "close / vwap", "log(volume)", "open / delay(close, 1) - 1", "close * volume", "(high + low) / 2 - close",
         "volume / ts_mean(volume, {w})", "ts_delta(log(close), {s})", "abs(returns)", "high / low"]
# The time-series operators the sampler wraps a base in: the registry's (`ts_transforms`), less ts_product
# (over a window, a product of most bases overflows or vanishes). The draws are seeded, so the order of TS1
# is part of the corpus: the registry's `draw_rank` keeps the order every corpus so far was drawn in, and an
# operator the registry gains is drawn after those.
TS1 = draw_order([op for op in ts_transforms(1) if op != "ts_product"])
TS2 = ts_transforms(2)
WRAP = ["rank({x})", "-rank({x})", "sign({x})", "-sign({x})", "rank(indneutralize({x}))", "scale({x})", "{x}"]
COMBINE = ["{a} / {b}", "{a} - {b}", "rank({a}) - rank({b})", "rank({a}) * rank({b})", "{a} * {b}"]


def _window(rng: np.random.Generator, horizons: tuple[int, ...]) -> int:
    h = float(horizons[int(rng.integers(len(horizons)))])
    return int(max(2, min(252, round(h * float(rng.uniform(0.75, 1.3))))))


def sample_formula(rng: np.random.Generator, horizons: tuple[int, ...]) -> str:
    """One formula of the grammar sampler."""
    def base() -> str:
        return BASES[int(rng.integers(len(BASES)))].format(w=_window(rng, horizons), s=int(rng.integers(1, 6)))

    def piece() -> str:
        if rng.random() < 0.2:
            op = TS2[int(rng.integers(len(TS2)))]
            return f"{op}({base()}, {base()}, {_window(rng, horizons)})"
        x = base()
        for _ in range(1 + int(rng.random() < 0.35)):
            x = f"{TS1[int(rng.integers(len(TS1)))]}({x}, {_window(rng, horizons)})"
        return x

    body = piece()
    if rng.random() < 0.3:
        body = COMBINE[int(rng.integers(len(COMBINE)))].format(a=body, b=piece())
    return WRAP[int(rng.integers(len(WRAP)))].format(x=body)


_NUM_AFTER_COMMA = re.compile(r",\s*(\d+(?:\.\d+)?)\s*\)")


def mutate_alpha(text: str, rng: np.random.Generator) -> str:
    """An Alpha101 text with its windows rescaled by one factor and, half the time, one field swapped."""
    factor = float(rng.choice([0.5, 0.75, 1.5, 2.0]))

    def scale(m: re.Match) -> str:
        v = float(m.group(1))
        return m.group(0) if v != int(v) else m.group(0).replace(m.group(1), str(max(2, min(250, round(v * factor)))))

    out = _NUM_AFTER_COMMA.sub(scale, text)
    if rng.random() < 0.5:
        used = [f for f in DSL_FIELDS if re.search(rf"\b{f}\b", out)]
        if used:
            a = used[int(rng.integers(len(used)))]
            b = [f for f in DSL_FIELDS if f != a][int(rng.integers(len(DSL_FIELDS) - 1))]
            out = re.sub(rf"\b{a}\b", b, out, count=1)
    return out


def _plain(text: str) -> str:
    """The text in plain form (`dsl.printer`); a text that does not parse is kept, and counted as such."""
    try:
        return plain(parse(text))
    except DslError:
        return text


def candidates(n: int, seed: int, horizons: tuple[int, ...], alpha_share: float, one_horizon: bool = False
               ) -> list[str]:
    """`n` distinct formula texts in plain form, `alpha_share` of them Alpha101 mutations. `one_horizon`:
    every window of a sampled formula is drawn around one horizon drawn for that formula, so a brief's
    horizon (matched to the longest window) says something of all of them; otherwise each window is drawn
    around its own horizon."""
    rng = np.random.default_rng([seed, 11])
    alphas = [a.text for a in alpha101(panel_fields=frozenset(DSL_FIELDS)) if a.usable]
    out, seen = [], set()
    for _ in range(n * 20):
        if len(out) == n:
            break
        f = _plain(mutate_alpha(alphas[int(rng.integers(len(alphas)))], rng) if rng.random() < alpha_share
                   else sample_formula(rng, (horizons[int(rng.integers(len(horizons)))],) if one_horizon
                                       else horizons))
        if f not in seen:
            seen.add(f)
            out.append(f)
    return out


def assign_brief(ast: Any, cat: Catalogue, train_families: set[str], tolerance: float,
                 rng: np.random.Generator, follows: Callable[[str], bool] | None = None
                 ) -> dict[str, Any] | None:
    """A brief (field ids) this formula satisfies, drawn from the passing options; None if none fits.
    `follows(mechanism)`: whether the formula follows that mechanism's idea; the mechanism is then drawn among
    those it follows where one pairs with a training family (module docstring)."""
    facts, windowed = whole_facts(ast)
    passing = {part: [k for k in cat.ids(part) if failure(spec_contract(cat.spec(part, k)), facts, windowed) is None]
               for part in ("mechanisms", "structures", "input_rules", "forbidden")}
    horizons = [h for h in cat.horizons if failure(horizon_contract(h, tolerance), facts, windowed) is None]
    pairs = [(m, s) for m in passing["mechanisms"] for s in passing["structures"] if f"{m}|{s}" in train_families]
    if not pairs or not horizons or not passing["input_rules"] or not passing["forbidden"]:
        return None
    if follows is not None:
        pairs = [(m, s) for m, s in pairs if follows(m)] or pairs
    for _ in range(20):
        m, s = pairs[int(rng.integers(len(pairs)))]
        b = {"mechanism": m, "horizon": int(horizons[int(rng.integers(len(horizons)))]), "structure": s,
             "input_rule": passing["input_rules"][int(rng.integers(len(passing["input_rules"])))],
             "forbidden": passing["forbidden"][int(rng.integers(len(passing["forbidden"])))],
             "risk": cat.ids("risks")[int(rng.integers(len(cat.ids("risks"))))]}
        if not contradicts(cat, b):
            return b
    return None


def build_corpus(score: Callable[[str], Any], cat: Catalogue, train_families: set[str], cfg: Corpus,
                 tolerance: float, limits: Limits, buckets: tuple[int, ...], seed: int,
                 progress: Callable[[Any], Any] = lambda x: x, idea: IdeaCheck | None = None
                 ) -> tuple[pd.DataFrame, dict[str, int]]:
    """Score candidates with `score` (text -> ScoreCard), keep the valid ones that a training brief fits.
    `idea` (on the train panel) is needed unless `cfg.mechanism_by` is "form"; each pair then records its
    mechanism's `idea_fidelity`, and the counts how many pairs follow their mechanism (`on_mechanism`)."""
    if cfg.mechanism_by != "form" and idea is None:
        raise ConfigError(f"sft.corpus.mechanism_by: {cfg.mechanism_by} needs the idea check (build_corpus(idea=...))")
    texts = candidates(cfg.candidates, seed, cat.horizons, cfg.alpha101_share, cfg.one_horizon)
    if cfg.pairing == "brief":
        return _brief_first(texts, score, cat, train_families, cfg, tolerance, limits, buckets, seed, progress, idea)
    rng = np.random.default_rng([seed, 12])
    rows, counts = [], {"candidates": len(texts), "parse_errors": 0, "invalid": 0, "no_brief": 0}
    for text, ast, card in _valid(texts, score, limits, counts, progress):
        fidelity = None
        if idea is not None and cfg.mechanism_by != "form":
            # one evaluation of the signal; `fidelity_of` remembers each mechanism's fidelity of this formula
            fidelity = partial(idea.fidelity_of, ast, signal=idea.signal(ast))
        fields = assign_brief(ast, cat, train_families, tolerance, rng,
                              None if fidelity is None else lambda m, f=fidelity: f(m) >= idea.tau)
        if fields is None:
            counts["no_brief"] += 1
            continue
        assert check(fields, ast, cat, tolerance).ok, (text, fields)
        extra = {}
        if fidelity is not None:
            extra["idea_fidelity"] = fidelity(fields["mechanism"])
            on = extra["idea_fidelity"] >= idea.tau
            if cfg.mechanism_by == "idea_only" and not on:
                counts["off_mechanism"] = counts.get("off_mechanism", 0) + 1       # it follows none it could name
                continue
            counts["on_mechanism"] = counts.get("on_mechanism", 0) + on
        rows.append(_row(cat, fields, extra, text, ast, card, buckets))
    counts["pairs"] = len(rows)
    return pd.DataFrame(rows), counts


def _valid(texts: list[str], score: Callable[[str], Any], limits: Limits, counts: dict[str, int],
           progress: Callable[[Any], Any]) -> Iterator[tuple[str, Any, Any]]:
    """(text, parsed formula, score card) of each candidate that parses and scores valid, in order; the others
    counted in `counts` (`parse_errors`, `invalid`)."""
    for text in progress(texts):
        try:
            ast = parse(text, limits)
        except DslError:
            counts["parse_errors"] += 1
            continue
        card = score(text)
        if not card.valid:
            counts["invalid"] += 1
            continue
        yield text, ast, card


def _row(cat: Catalogue, fields: dict[str, Any], extra: dict[str, Any], text: str, ast: Any, card: Any,
         buckets: tuple[int, ...]) -> dict[str, Any]:
    return {"brief": render(cat, fields), **{f"brief_{k}": v for k, v in fields.items()}, **extra,
            "family": f"{fields['mechanism']}|{fields['structure']}", "formula": text,
            "canonical": canonical(ast, buckets), "answer": f"<alpha>{text}</alpha>",
            "cpcv": card.channels["cpcv"],
            **{f"channel_{k}": float(v) for k, v in card.channels.items()},
            **{f"metric_{k}": float(v) for k, v in card.metrics.items()
               if k in ("sharpe_net", "turnover", "ic", "beta", "lookback", "nodes")}}




def _brief_first(texts: list[str], score: Callable[[str], Any], cat: Catalogue, train_families: set[str],
                 cfg: Corpus, tolerance: float, limits: Limits, buckets: tuple[int, ...], seed: int,
                 progress: Callable[[Any], Any], idea: IdeaCheck | None) -> tuple[pd.DataFrame, dict[str, int]]:
    """The brief-first corpus (module docstring): each valid candidate indexed by the options of every field
    it passes, then each drawn brief paired with the formulas in all five of its options."""
    from alphagym.briefs.generate import draw

    counts = {"candidates": len(texts), "parse_errors": 0, "invalid": 0}
    valid: list[tuple[str, Any, Any]] = []
    index: dict[tuple[str, Any], set[int]] = {}
    for text, ast, card in _valid(texts, score, limits, counts, progress):
        i = len(valid)
        valid.append((text, ast, card))
        facts, windowed = whole_facts(ast)
        for field in (f for f in CHECKS if f in FIELD_PART):          # the horizon is indexed below
            part = FIELD_PART[field]
            for k in cat.ids(part):
                if failure(spec_contract(cat.spec(part, k)), facts, windowed) is None:
                    index.setdefault((field, k), set()).add(i)
        for h in cat.horizons:
            if failure(horizon_contract(h, tolerance), facts, windowed) is None:
                index.setdefault(("horizon", h), set()).add(i)
    rng = np.random.default_rng([seed, 13])
    briefs = draw(cat, sorted(train_families), cfg.briefs, "corpus", rng, stratified=True)
    used = np.zeros(len(valid), int)
    signals: dict[int, Any] = {}
    rows: list[dict[str, Any]] = []
    unmatched = 0
    for b in briefs:
        fields = {k: b[k] for k in ("mechanism", "horizon", "input_rule", "structure", "forbidden", "risk")}
        match = set.intersection(*(index.get((f, fields[f]), set()) for f in CHECKS))
        order = sorted(match, key=lambda i: (int(used[i]), float(rng.random())))
        fid: dict[int, float] = {}
        if idea is not None and cfg.mechanism_by != "form":
            order = order[:8 * cfg.per_brief]          # the least used, enough to find those that follow it
            for i in order:
                if i not in signals:
                    signals[i] = idea.signal(valid[i][1])
                fid[i] = idea.fidelity_of(valid[i][1], fields["mechanism"], signal=signals[i])
            follows = [i for i in order if fid[i] >= idea.tau]
            order = follows if cfg.mechanism_by == "idea_only" else follows + [i for i in order if i not in follows]
        if not order:
            unmatched += 1
            continue
        for i in order[:cfg.per_brief]:
            used[i] += 1
            text, ast, card = valid[i]
            assert check(fields, ast, cat, tolerance).ok, (text, fields)
            rows.append(_row(cat, fields, {"idea_fidelity": fid[i]} if fid else {}, text, ast, card, buckets))
    counts.update({"valid": len(valid), "briefs": len(briefs), "briefs_unmatched": unmatched,
                   "formulas_used": int((used > 0).sum()), "pairs": len(rows)})
    if idea is not None and cfg.mechanism_by != "form":
        counts["on_mechanism"] = sum(r["idea_fidelity"] >= idea.tau for r in rows)
    return pd.DataFrame(rows), counts
