"""`alphagym score FORMULA` as a user runs it: a fresh process each time (imports, params, the verifier on
the train panel with the novelty archive and, R3 on, the kept stress worlds, numba's cached kernels), wall
time from the shell. Median and p90 over `--repeats` runs after one warm-up run (which fills numba's disk
cache), idle and with one competing CPU-bound process.

    python benchmarks/bench_cli_score.py [--repeats 9]

Needs the pipeline's train panel, archive and world-model outputs (`make run`).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, CompetingLoad, median_p90  # noqa: E402

FORMULA = "rank(ts_std(volume, 20) / ts_mean(volume, 20))"


def one_run() -> float:
    t0 = time.perf_counter()
    out = subprocess.run([str(Path(sys.executable).parent / "alphagym"), "score", FORMULA, "--json"], cwd=ROOT,
                         capture_output=True, text=True)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    one_run()                                   # warm numba's on-disk cache and the OS page cache
    for loaded in (False, True):
        with CompetingLoad(loaded):
            ts = [one_run() for _ in range(args.repeats)]
        med, p90 = median_p90(ts)
        print(f"{'under load' if loaded else 'idle':10}  median {med:.2f} s  p90 {p90:.2f} s  "
              f"(min {min(ts):.2f}, max {max(ts):.2f}, {args.repeats} runs)")


if __name__ == "__main__":
    main()
