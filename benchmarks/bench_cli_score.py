"""`alphagym score FORMULA` as a user runs it: a fresh process each time (imports, params, the verifier on
the train panel with the novelty archive and, R3 on, the kept stress worlds, numba's cached kernels), wall
time from the shell. Median and p90 over `--repeats` runs after one warm-up run (which fills numba's disk
cache), idle and with one competing CPU-bound process; next to it, interleaved, the floor every command of
this package pays: a fresh interpreter that imports pandas and numba and calls one cached kernel; and
the same command answered by the `alphagym serve` that the first `alphagym score` of the benchmark started
by itself (as it does for a user; stopped at the end).

    python benchmarks/bench_cli_score.py [--repeats 9]

Needs the pipeline's train panel, archive and world-model outputs (`make run`).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, CompetingLoad, median_p90  # noqa: E402

FORMULA = "rank(ts_std(volume, 20) / ts_mean(volume, 20))"


ALPHAGYM = str(Path(sys.executable).parent / "alphagym")
SCORE = [ALPHAGYM, "score", FORMULA, "--json", "--no-server"]      # a fresh process, every time
SERVED = [ALPHAGYM, "score", FORMULA, "--json"]
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
    if (cmd is SERVED) != ("scored by `alphagym serve`" in out.stderr):    # each run where it belongs
        raise SystemExit(f"{' '.join(cmd)}: served {cmd is not SERVED}, expected {cmd is SERVED}")
    return took


def start_server() -> tuple[int, float]:
    """The product's path: with no server running, `alphagym score` scores in its own process and starts
    `alphagym serve` in the background. Returns the server's pid and the wall time of that first call."""
    import re

    from alphagym.verifier.server import socket_path

    path = socket_path(ROOT)
    if path.exists():
        raise SystemExit(f"a scoring server already listens at {path}: stop it first")
    t0 = time.perf_counter()
    out = subprocess.run(SERVED, cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "ALPHAGYM_SCORE_AUTOSERVE": "1"})
    first = time.perf_counter() - t0
    m = re.search(r"started `alphagym serve` \(pid (\d+)", out.stderr)
    if out.returncode != 0 or m is None:
        raise SystemExit(f"`alphagym score` did not start a server: {out.stderr[-2000:]}")
    deadline = time.monotonic() + 120
    while not path.exists():
        if time.monotonic() > deadline:
            raise SystemExit("the server `alphagym score` started never listened")
        time.sleep(0.1)
    one_run(SERVED)                             # waits for the server's warm-up
    return int(m.group(1)), first


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    one_run(SCORE)                              # warm numba's on-disk cache and the OS page cache
    pid, first = start_server()
    print(f"idle        the first `alphagym score` (scores, starts the server)  {first:.2f} s (one run)")
    try:
        for loaded in (False, True):
            with CompetingLoad(loaded):
                runs: dict[str, list[float]] = {"alphagym score --no-server": [],
                                                "floor: import pandas + numba, one kernel": [],
                                                "alphagym score (the server it started)": []}
                for _ in range(args.repeats):   # interleaved, so all see the same machine state
                    for cmd, xs in zip((SCORE, FLOOR, SERVED), runs.values(), strict=True):
                        xs.append(one_run(cmd))
            for name, xs in runs.items():
                med, p90 = median_p90(xs)
                print(f"{'under load' if loaded else 'idle':10}  {name:42} median {med:.2f} s  p90 {p90:.2f} s  "
                      f"(min {min(xs):.2f}, max {max(xs):.2f}, {args.repeats} runs)")
    finally:
        os.kill(pid, signal.SIGTERM)


if __name__ == "__main__":
    main()
