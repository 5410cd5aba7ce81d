"""What a run's briefs ask of the simulated market: how many briefs of each split name a mechanism that
carries a planted edge, a decoy, or no effect (the market's `ground_truth.json`), which edges no brief of a
split asks for, and the held-out families. A brief-following policy can express on the holdout only the
edges its briefs name, and puts its answers to decoy briefs on decoys: docs/results.md reads the targets
against this.

    python tools/briefs_report.py results            # a results folder of a simulator run
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from alphagym.briefs.generate import read_briefs


def mechanism_kinds(ground_truth: Mapping[str, Any]) -> dict[str, str]:
    """Mechanism -> `edge`, `decoy` or `none`, from the simulator's ground truth (traps name no mechanism)."""
    kinds = {str(e["mechanism"]): str(e["kind"]) for e in ground_truth["effects"].values() if e.get("mechanism")}
    kinds.update({str(m): "none" for m in ground_truth.get("mechanisms_without_effect", [])})
    return kinds


def asked(briefs: Sequence[Mapping[str, Any]], kinds: Mapping[str, str]) -> dict[str, Any]:
    """Briefs by the kind of their mechanism, by mechanism within each kind, and the edges never asked for."""
    by_mech = Counter(str(b["mechanism"]) for b in briefs)
    unknown = sorted(set(by_mech) - set(kinds))
    if unknown:
        raise SystemExit(f"mechanisms missing from the ground truth: {', '.join(unknown)}")
    by_kind: dict[str, dict[str, int]] = {}
    for m, n in sorted(by_mech.items(), key=lambda kv: (-kv[1], kv[0])):
        by_kind.setdefault(kinds[m], {})[m] = n
    edges = sorted(m for m, k in kinds.items() if k == "edge")
    return {"briefs": len(briefs), "by_kind": {k: sum(v.values()) for k, v in by_kind.items()},
            "by_mechanism": by_kind, "edges_asked": [m for m in edges if m in by_mech],
            "edges_not_asked": [m for m in edges if m not in by_mech]}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="a simulator run's results folder (briefs/, raw/)")
    a = ap.parse_args(argv)
    truth = json.loads((a.results / "raw" / "ground_truth.json").read_text())
    kinds = mechanism_kinds(truth)
    out: dict[str, Any] = {s: asked(read_briefs(a.results / "briefs" / f"{s}.jsonl"), kinds)
                           for s in ("train", "holdout")}
    out["holdout_families"] = json.loads((a.results / "briefs" / "summary.json").read_text())["holdout_families"]
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
