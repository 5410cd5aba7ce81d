"""`alphagym score FORMULA` as a user runs it: a fresh process each time (imports, params, the verifier on
the train panel with the novelty archive and, R3 on, the kept stress worlds, numba's cached kernels), wall
time from the shell. Median and p90 over `--repeats` runs after one warm-up run (which fills numba's disk
cache), idle and with one competing CPU-bound process; next to it, interleaved, the floor every command of
this package pays: a fresh interpreter that imports pandas and numba and calls one cached kernel.

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


SCORE = [str(Path(sys.executable).parent / "alphagym"), "score", FORMULA, "--json"]
# the floor under any command of this package: a fresh interpreter importing the two libraries the
# evaluator cannot do without, and calling one cached numba kernel (numba's one-off CPU-target set-up)
FLOOR = [sys.executable, "-c", "import pandas, numpy as np\n"
         "from alphagym.kernels import K_MEAN, ts_moments\n"
         "x = np.ones((30, 4)); ts_moments(x, x, 5, K_MEAN)"]


def one_run(cmd: list[str]) -> float:
    t0 = time.perf_counter()
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if out.returncode != 0:
        raise SystemExit(out.stderr[-2000:])
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    one_run(SCORE)                              # warm numba's on-disk cache and the OS page cache
    for loaded in (False, True):
        with CompetingLoad(loaded):
            ts, fs = [], []
            for _ in range(args.repeats):       # interleaved, so both see the same machine state
                ts.append(one_run(SCORE))
                fs.append(one_run(FLOOR))
        for name, xs in (("alphagym score", ts), ("floor: import pandas + numba, one kernel", fs)):
            med, p90 = median_p90(xs)
            print(f"{'under load' if loaded else 'idle':10}  {name:42} median {med:.2f} s  p90 {p90:.2f} s  "
                  f"(min {min(xs):.2f}, max {max(xs):.2f}, {args.repeats} runs)")


if __name__ == "__main__":
    main()
