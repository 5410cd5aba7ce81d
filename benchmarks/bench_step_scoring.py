"""An RL step's scoring, the verifier as it is against its reference, alternating in one process.

The trainer of `--rung` (on the pipeline's own outputs: run the stages up to `filter` first) samples
`--steps` steps of answers once; then every step's groups are scored with their briefs as the trainer
scores them (`VerifierEnv.score`: cards, group channels, brief compliance; the card cache off, nothing
committed to the archive, so both arms see the same inputs), `--rounds` times, the arms alternating step
by step. Arm "ours" is the verifier as it is. Arm "reference" is what scoring did before three changes:
the thinner leg's effective names computed with numpy (six (T, N) temporaries a book), the brief
checks parsing each answer again, ts_skew/ts_kurt over long windows by the two-pass O(d) scan
instead of merged block moments, and ts_rank's scan adding a float select per value instead of integer
counts. Both arms must give the same validity and channels (to 1e-9: the two
moment kernels round differently) and metrics (to 1e-9); the benchmark stops if they do not. One numba
thread and one BLAS thread (a rung's budget beside another rung).

Last lines: `step_scoring_<arm>_<median|p90>=<seconds>` and `step_scoring_speedup_<median|p90>=<ratio>`
(reference / ours, step by step).
"""

from __future__ import annotations

import argparse
import sys
import time

import numba
import numpy as np

import alphagym.kernels as kernels
import alphagym.verifier.verifier as verifier_mod
from alphagym.config import load_params
from alphagym.pipeline import stage_table
from alphagym.rl.stage import build_trainer
from common import ROOT


@numba.njit(cache=True, error_model="numpy")
def ts_rank_float_select(x: np.ndarray, d: int) -> np.ndarray:
    """The reference: ts_rank's O(d) scan adding 1, 1/2 or 0 per value by a float select."""
    t_len, n = x.shape
    out = np.full((t_len, n), np.nan)
    acc = np.zeros(n)
    for t in range(d - 1, t_len):
        lo = t - d + 1
        for j in range(n):
            acc[j] = 0.0
        bad = np.zeros(n)
        for k in range(lo, t + 1):
            for j in range(n):
                bad[j] += 1.0 if np.isnan(x[k, j]) else 0.0
        for k in range(lo, t):
            for j in range(n):
                w = x[k, j]
                v = x[t, j]
                acc[j] += 1.0 if w < v else (0.5 if w == v else 0.0)
        for j in range(n):
            r = 0.5 if d == 1 else acc[j] / (d - 1)
            out[t, j] = r if bad[j] == 0.0 else np.nan
    return out


def leg_names_numpy(weights: np.ndarray) -> np.ndarray:
    """The reference: `engine.book.leg_names` as numpy array expressions."""
    w = np.nan_to_num(weights)
    out = np.full(len(w), np.inf)
    for leg in (np.where(w > 0, w, 0.0), np.where(w < 0, -w, 0.0)):
        s, q = leg.sum(axis=1), (leg * leg).sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = np.minimum(out, np.where(q > 0, s * s / q, 0.0))
    return out


class Arms:
    """Switches the verifier module between the two arms."""

    def __init__(self) -> None:
        self.ours_leg_names = verifier_mod.leg_names
        self.ours_score_one = verifier_mod.Verifier.score_one

        def score_one_reparse(v, text, answer=False):       # the card without its tree: checks parse again
            card = self.ours_score_one(v, text, answer)
            card.ast = None
            return card

        self.reference_score_one = score_one_reparse
        self.ours_moment_scan_max = kernels.MOMENT_SCAN_MAX_WINDOW
        self.ours_window_scan = kernels._window_scan
        ours_scan = self.ours_window_scan

        def window_scan_float_rank(x, d, kind):
            return ts_rank_float_select(x, d) if kind == kernels.K_RANK else ours_scan(x, d, kind)

        self.reference_window_scan = window_scan_float_rank

    def set(self, arm: str) -> None:
        ours = arm == "ours"
        verifier_mod.leg_names = self.ours_leg_names if ours else leg_names_numpy
        verifier_mod.Verifier.score_one = self.ours_score_one if ours else self.reference_score_one
        kernels.MOMENT_SCAN_MAX_WINDOW = self.ours_moment_scan_max if ours else 10**9   # reference: always scan
        kernels._window_scan = self.ours_window_scan if ours else self.reference_window_scan


def fingerprint(scored) -> tuple[list, np.ndarray]:
    """Validity and the names of channels and metrics (compared exactly), and their values (to 1e-9:
    numpy and numba sum a book's legs in different orders, and the two moment kernels round differently)."""
    exact = [(s.valid, sorted(s.channels), sorted(s.metrics)) for s in scored]
    values = [v for s in scored for m in (s.channels, s.metrics) for _, v in sorted(m.items())]
    return exact, np.array(values, dtype=float)


def same(a: tuple[list, np.ndarray], b: tuple[list, np.ndarray]) -> bool:
    return a[0] == b[0] and a[1].shape == b[1].shape and bool(np.allclose(a[1], b[1], rtol=1e-9, atol=1e-12,
                                                                           equal_nan=True))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rung", default="cispo_repo")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    params = load_params(ROOT / "params.yaml", [*args.set, "rl.recipe.torch_threads=1", "rl.recipe.numba_threads=1",
                                                "rl.recipe.score_cache=0", "tracking.enabled=false"])
    deps = stage_table(params)[f"train@{args.rung}"].paths("deps")
    trainer = build_trainer(params, deps, args.rung, None)
    numba.set_num_threads(1)
    steps = []
    for s in range(args.steps):
        briefs = trainer._draw(s, trainer.cfg.briefs_per_step, 0)
        steps.append((briefs, trainer._sample(briefs, s, 1)))
    n = sum(len(a) for _, ans in steps for a in ans)
    print(f"rung {args.rung}: {args.steps} steps, {n} answers sampled; scoring {args.rounds} rounds, arms alternating")
    arms, env = Arms(), trainer.env
    times: dict[str, list[float]] = {"ours": [], "reference": []}
    first: dict[int, tuple[list, np.ndarray]] = {}
    for r in range(args.rounds + 1):                       # round 0 warms the kernels up and checks the arms
        for i, (briefs, answers) in enumerate(steps):
            order = ("ours", "reference") if (r + i) % 2 == 0 else ("reference", "ours")
            for arm in order:
                arms.set(arm)
                t0 = time.perf_counter()
                scored = [s for a, b in zip(answers, briefs) for s in env.score(a, b)]
                dt = time.perf_counter() - t0
                fp = fingerprint(scored)
                if i not in first:
                    first[i] = fp
                elif not same(fp, first[i]):
                    raise SystemExit(f"step {i}: arm {arm} scored differently from the first scoring")
                if r:
                    times[arm].append(dt)
    arms.set("ours")
    ours, ref = np.array(times["ours"]), np.array(times["reference"])
    speedup = ref / ours
    for arm, v in (("ours", ours), ("reference", ref)):
        print(f"{arm}: {np.median(v):.3f} s a step (p90 {np.percentile(v, 90):.3f}) over {len(v)} step scorings")
    print(f"step_scoring_ours_median={np.median(ours):.3f}")
    print(f"step_scoring_ours_p90={np.percentile(ours, 90):.3f}")
    print(f"step_scoring_reference_median={np.median(ref):.3f}")
    print(f"step_scoring_reference_p90={np.percentile(ref, 90):.3f}")
    print(f"step_scoring_speedup_median={np.median(speedup):.3f}")
    print(f"step_scoring_speedup_p90={np.percentile(speedup, 10):.3f}")   # the slow tail: 10th percentile of the ratio
    return 0


if __name__ == "__main__":
    sys.exit(main())
