"""Score cards of a fixed set of formulas in three verifier settings, written as JSON: run before and after a
change that should not change behaviour, and compare the files (or their sha256) byte for byte.

    python tools/behaviour_check.py --out /tmp/before.json      # on the old commit
    python tools/behaviour_check.py --out /tmp/after.json       # on the new one
    cmp /tmp/before.json /tmp/after.json

The formulas: the first 40 usable Alpha101 formulas, every planted effect's formula and the traps, and a few
broken or degenerate answers (a parse error, a missing tag, a flat, a static and a concentrated book).
The settings:
- `train`: the default params, train window, groups of eight scored together with a brief (PBO, R9's group
  term, R14), each group's valid books added to the novelty archive before the next;
- `holdout`: the holdout window and its costs;
- `stress`: train window with two stress worlds (the train panel cut 300 and 600 sessions before its end), R3 over the
  last 1008 sessions, higher costs and another CPCV split.
Floats are written with `repr`, so a one-ulp change shows.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def formulas() -> list[str]:
    from alphagym.data.simulator import EFFECTS
    from alphagym.dsl.alpha101 import alpha101
    from alphagym.panel import DSL_FIELDS

    usable = [a.text for a in alpha101(panel_fields=frozenset(DSL_FIELDS)) if a.usable][:40]
    planted = [e.formula for e in EFFECTS.values()]
    broken = ["rank(close", "ts_mean(close, 0)", "-1", "rank(volume) * 0 + 1",
              "sign(rank(ts_max(volume / ts_mean(volume, 17), 20)) * rank(ts_max(volume / ts_mean(volume, 17), 20)))",
              "rank(ts_mean(close, 250))"]
    answers = ["<think>volume spikes fade</think><answer>rank(ts_std(volume, 20) / ts_mean(volume, 20))</answer>",
               "<answer>-rank(ts_delta(log(close), 5))</answer>", "no tag here: rank(close)"]
    return usable + planted + broken + answers


def groups(texts: list[str]) -> list[tuple[list[str], bool]]:
    """Groups of eight formulas, then the tagged answers as one group scored as answers."""
    plain = [t for t in texts if not is_answer(t)]
    return [(plain[i:i + 8], False) for i in range(0, len(plain), 8)] + [([t for t in texts if is_answer(t)], True)]


def is_answer(text: str) -> bool:
    return text.startswith("<") or text.startswith("no tag")


def _row(card) -> dict:
    def clean(d):
        return {k: repr(float(v)) if isinstance(v, (float, np.floating)) else v for k, v in sorted(d.items())}
    return {"text": card.text, "valid": card.valid, "reason": card.reason, "error_type": card.error_type,
            "canonical": card.canonical, "channels": clean(card.channels), "metrics": clean(card.metrics),
            "skipped": dict(sorted(card.skipped.items())),
            "pnl_sha": hashlib.sha256(card.pnl.tobytes()).hexdigest() if card.pnl is not None else None}


def run() -> dict:
    from alphagym.briefs.catalogue import load_catalogue
    from alphagym.briefs.compliance import BriefChecker
    from alphagym.briefs.generate import generate
    from alphagym.config import load_params
    from alphagym.data.build_panel import build_panel
    from alphagym.data.sources import load_source
    from alphagym.verifier.verifier import Verifier

    base = load_params(ROOT / "params.yaml", ["tracking.enabled=false"])
    prices, sectors, _ = load_source(base)
    train, holdout, _ = build_panel(prices, sectors, base)
    texts = formulas()
    cat = load_catalogue()
    briefs, _, _ = generate(cat, base.briefs, 7)
    out: dict = {"formulas": len(texts)}

    v = Verifier(train, base)
    rows = []
    for i, (group, answer) in enumerate(groups(texts)):
        brief = BriefChecker(briefs[i % len(briefs)], cat, 0.5)
        cards = v.score_group(group, answer=answer, brief=brief)
        rows += [_row(c) for c in cards]
        for c in cards:
            if c.valid and c.canonical:
                v.archive.add(c.pnl, c.canonical, c.formula)
    out["train"] = rows

    h = Verifier(holdout, base, window="holdout")
    out["holdout"] = [_row(h.score(t, answer=is_answer(t))) for t in texts]

    stressed = load_params(ROOT / "params.yaml", ["tracking.enabled=false", "verifier.jepa_stress.sessions=1008",
                                                  "verifier.costs.train.half_spread_bps=2", "verifier.cpcv.blocks=8"])
    n = train.shape[0]
    worlds = {"early1": train.slice_days(0, n - 300), "early2": train.slice_days(0, n - 600)}
    s = Verifier(train, stressed, stress_worlds=worlds)
    out["stress"] = [_row(c) for group, answer in groups(texts) for c in s.score_group(group, answer=answer)]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    args = ap.parse_args(argv)
    from alphagym.runtime import configure_runtime

    configure_runtime()
    data = run()
    text = json.dumps(data, indent=1, sort_keys=True)
    args.out.write_text(text)
    n = sum(len(data[k]) for k in ("train", "holdout", "stress"))
    print(f"{args.out}: {data['formulas']} formulas, {n} cards, sha256 {hashlib.sha256(text.encode()).hexdigest()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
