"""The mechanism check (`src/alphagym/briefs/idea.py`) on its labelled set (`tests/mechanism_labels.yaml`): each
labelled formula's fidelity to its mechanism on the default simulator's train panel, the check's AUC, and
its accuracy at each threshold, the catalogue's `idea_tau` marked. The numbers docs/briefs.md reports.

    python tools/idea_calibration.py [--days N] [--set KEY=VALUE ...]

`--days N`: the last N sessions of the train panel only (the test uses 750); default: all of it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml

from alphagym.briefs.catalogue import load_catalogue
from alphagym.briefs.idea import IdeaCheck, auc
from alphagym.config import load_params
from alphagym.data.build_panel import build_panel
from alphagym.data.sources import load_source

ROOT = Path(__file__).resolve().parents[1]
LABELS = ROOT / "tests" / "mechanism_labels.yaml"


def labelled() -> list[tuple[str, bool, str]]:
    """(mechanism, on mechanism?, formula) of the labelled set."""
    raw = yaml.safe_load(LABELS.read_text())
    return [(m, key == "on_mechanism", f) for m, d in raw.items() for key in ("on_mechanism", "off_mechanism")
            for f in d[key]]


def fidelities(panel, rows: list[tuple[str, bool, str]]) -> list[float]:
    ic = IdeaCheck(panel, load_catalogue())
    return [ic.fidelity(ic.signal(f), m) for m, _, f in rows]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--days", type=int, default=0)
    ap.add_argument("--set", action="append", default=[])
    args = ap.parse_args()
    p = load_params(ROOT / "params.yaml", args.set)
    prices, sectors, _ = load_source(p)
    train, _, _ = build_panel(prices, sectors, p)
    if args.days:
        train = train.slice_days(max(0, train.shape[0] - args.days), train.shape[0])
    rows = labelled()
    fid = fidelities(train, rows)
    tau = load_catalogue().idea_tau
    on = [y for _, y, _ in rows]
    print(f"panel: {train.shape[0]} sessions x {train.shape[1]} stocks; {sum(on)} on-mechanism and "
          f"{len(on) - sum(on)} off-mechanism formulas over {len({m for m, _, _ in rows})} mechanisms")
    print(f"AUC {auc(fid, on):.3f}")
    for t in np.round(np.arange(0.1, 0.75, 0.05), 2):
        acc = np.mean([(f >= t) == y for f, y in zip(fid, on)])
        print(f"tau {t:.2f}: accuracy {acc:.3f}{'  <- idea_tau' if abs(t - tau) < 1e-9 else ''}")
    for (m, y, f), v in sorted(zip(rows, fid), key=lambda r: (not r[0][1], r[1])):
        wrong = " (wrong side)" if (v >= tau) != y else ""
        print(f"{'on ' if y else 'off'} {v:.3f} {m:24s} {f}{wrong}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
