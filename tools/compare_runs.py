"""Compare two results folders of the same DAG (before and after a change that should not change
behaviour), file by file, with timing keys removed: prints each file that differs and how, exits 1 if any.

    python tools/compare_runs.py /tmp/before/results/smoke results/smoke

JSON and JSON-lines files and torch trainer states are compared as data without keys that hold timings
(`TIMING`: `time/generation`, `step_time_median`, seconds, MLflow run ids); parquet files as tables without
such columns; images, logs, MLflow stores, lock files and hidden folders are skipped (they hold timings or
are rendered by libraries whose bytes vary); everything else byte for byte.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

TIMING = re.compile(r"(^|[_/.])(time|times|seconds|secs?|elapsed|wall|duration|timings|started|finished|run_id|"
                    r"created|ms)([_/.]|$)|(^|_)\w*_s$|throughput|per_s$", re.I)
SKIP_SUFFIX = {".png", ".log", ".db", ".lock"}
SKIP_PARTS = {"mlflow", "logs", "work"}


def _clean(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items() if not TIMING.search(str(k))}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _same(x: Any, y: Any) -> bool:
    import torch

    if isinstance(x, dict):
        return isinstance(y, dict) and x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    if isinstance(x, (list, tuple)):
        return isinstance(y, (list, tuple)) and len(x) == len(y) and all(_same(u, v) for u, v in zip(x, y))
    if torch.is_tensor(x):
        return torch.is_tensor(y) and x.dtype == y.dtype and torch.equal(x, y)
    if isinstance(x, np.ndarray):
        return isinstance(y, np.ndarray) and x.dtype == y.dtype and np.array_equal(x, y, equal_nan=True)
    return bool(x == y)


def _json_lines(path: Path) -> list[Any]:
    return [_clean(json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def differs(a: Path, b: Path) -> str | None:
    """Why files `a` and `b` differ once timings are removed, or None."""
    if a.suffix == ".json":
        da, db = _clean(json.loads(a.read_text())), _clean(json.loads(b.read_text()))
        if a.name == "manifest.json":      # the hash of a trainer state hashes its timings: compared as data
            da, db = ({k: v for k, v in d.items() if not str(k).endswith(".pt")} for d in (da, db))
        return None if da == db else "json data"
    if a.suffix == ".jsonl":
        return None if _json_lines(a) == _json_lines(b) else "json lines"
    if a.suffix == ".pt":                # a trainer state: tensors, and a history with timings
        import torch

        return None if _same(_clean(torch.load(a, weights_only=False)),
                             _clean(torch.load(b, weights_only=False))) else "torch state"
    if a.suffix == ".parquet":
        import pandas as pd

        da, db = pd.read_parquet(a), pd.read_parquet(b)
        keep = [c for c in da.columns if not TIMING.search(str(c))]
        if list(da.columns) != list(db.columns):
            return f"columns {list(da.columns)} != {list(db.columns)}"
        return None if da[keep].equals(db[keep]) else "parquet values"
    return None if a.read_bytes() == b.read_bytes() else "bytes"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    args = ap.parse_args()
    files = {p.relative_to(args.before) for p in args.before.rglob("*") if p.is_file()}
    files |= {p.relative_to(args.after) for p in args.after.rglob("*") if p.is_file()}
    bad, same = [], 0
    for rel in sorted(files):
        if rel.suffix in SKIP_SUFFIX or SKIP_PARTS & set(rel.parts) or any(p.startswith(".") for p in rel.parts):
            continue
        a, b = args.before / rel, args.after / rel
        if not a.exists() or not b.exists():
            bad.append(f"{rel}: only in {'after' if not a.exists() else 'before'}")
            continue
        why = differs(a, b)
        if why:
            bad.append(f"{rel}: {why}")
        else:
            same += 1
    print(f"{same} files the same, {len(bad)} different")
    for line in bad:
        print("  " + line)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
