"""`alphagym score FORMULA` as a user runs it: a fresh process each time (imports, params, the verifier on
the train panel with the novelty archive and, R3 on, the kept stress worlds, numba's cached kernels), wall
time from the shell. Median and p90 over `--repeats` runs after one warm-up run (which fills numba's disk
cache), idle and with one competing CPU-bound process; next to it, interleaved, the floor every command of
this package pays: a fresh interpreter that imports pandas and numba and calls one cached kernel; and
the same command answered by a warm `alphagym serve` (started by the benchmark, stopped at the end).

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
SCORE = [ALPHAGYM, "score", FORMULA, "--json", "--no-server"]
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


def start_server() -> subprocess.Popen:
    from alphagym.verifier.server import socket_path

    path = socket_path(ROOT)
    srv = subprocess.Popen([ALPHAGYM, "serve", "--idle-timeout", "3600"], cwd=ROOT, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not path.exists():
        if srv.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"`alphagym serve` did not start (a server may already run for {ROOT})")
        time.sleep(0.1)
    one_run(SERVED)                             # loads the verifier into the server
    return srv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=9)
    args = ap.parse_args()
    one_run(SCORE)                              # warm numba's on-disk cache and the OS page cache
    srv = start_server()
    try:
        for loaded in (False, True):
            with CompetingLoad(loaded):
                runs: dict[str, list[float]] = {"alphagym score": [], "floor: import pandas + numba, one kernel": [],
                                                "alphagym score, `alphagym serve` warm": []}
                for _ in range(args.repeats):   # interleaved, so all see the same machine state
                    for cmd, xs in zip((SCORE, FLOOR, SERVED), runs.values(), strict=True):
                        xs.append(one_run(cmd))
            for name, xs in runs.items():
                med, p90 = median_p90(xs)
                print(f"{'under load' if loaded else 'idle':10}  {name:42} median {med:.2f} s  p90 {p90:.2f} s  "
                      f"(min {min(xs):.2f}, max {max(xs):.2f}, {args.repeats} runs)")
    finally:
        os.kill(srv.pid, signal.SIGTERM)
        srv.wait(30)


if __name__ == "__main__":
    main()
