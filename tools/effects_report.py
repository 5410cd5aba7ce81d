"""How a set of planted effects behaves in the simulated market: for each effect and trap, its planted
formula scored alone (train CPCV, holdout net Sharpe after holdout costs, turnover), the largest pairwise
|corr| of the edges' daily train P&L, and the equal-weight book of the edges on the holdout year against
the best single edge. What `simulator.effects.planted` is calibrated with (docs/results.md states the
calibration seeds, which the tests do not use).

    python tools/effects_report.py --planted market.yaml --seeds 21,22
    python tools/effects_report.py --seeds 7            # the params' own planted effects

`--planted`: a YAML mapping effect name -> {kind, strength, calm_mult, crisis_mult, half_life_years} that
replaces `simulator.effects.planted`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import yaml

from alphagym.runtime import configure_runtime

configure_runtime()

from alphagym.books.metrics import sharpe  # noqa: E402
from alphagym.config import load_params  # noqa: E402
from alphagym.data.build_panel import build_panel  # noqa: E402
from alphagym.data.simulator import simulate_market  # noqa: E402
from alphagym.params import Simulator  # noqa: E402
from alphagym.verifier.verifier import Verifier  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def report(params, planted: dict | None, seed: int) -> dict:
    sim = params.simulator
    if planted is not None:
        raw = sim.model_dump()
        raw["effects"]["planted"] = planted
        sim = Simulator.model_validate(raw)
    d = params.data
    m = simulate_market(sim, calendar=d.calendar, start=d.start, end=d.end, seed=seed)
    train, holdout, _ = build_panel(m.prices, m.sectors, params)
    tv, hv = Verifier(train, params), Verifier(holdout, params, window="holdout")
    rows, train_pnl, hold_pnl = {}, {}, {}
    for name, e in m.ground_truth["effects"].items():
        a, b = tv.score(e["formula"]), hv.score(e["formula"])
        rows[name] = {"kind": e["kind"], "train_cpcv": a.channels["cpcv"] if a.valid else None,
                      "holdout_sharpe": b.metrics["sharpe_net"] if b.valid else None,
                      "turnover": a.metrics.get("turnover"), "invalid": a.error_type}
        if e["kind"] == "edge" and a.valid and b.valid:
            train_pnl[name], hold_pnl[name] = a.pnl, b.pnl
    names = list(train_pnl)
    out = {"rows": rows}
    if len(names) > 1:
        c = np.abs(np.corrcoef(np.stack([train_pnl[k] for k in names])))
        i, j = np.unravel_index(np.argmax(np.triu(c, 1)), c.shape)
        out["max_abs_corr"] = (float(c[i, j]), names[i], names[j])
        best = max(sharpe(hold_pnl[k]) for k in names)
        ew = sharpe(np.mean([hold_pnl[k] for k in names], axis=0))
        out["ew_holdout_sharpe"], out["best_single"] = ew, best
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--planted", type=Path, default=None)
    ap.add_argument("--seeds", default="21,22")
    args = ap.parse_args()
    params = load_params(ROOT / "params.yaml", ["verifier.jepa_stress.enabled=false"])
    planted = yaml.safe_load(args.planted.read_text()) if args.planted else None
    for seed in (int(s) for s in args.seeds.split(",")):
        out = report(params, planted, seed)
        print(f"seed {seed}")
        for name, r in out["rows"].items():
            fmt = {k: (round(v, 2) if isinstance(v, float) else v) for k, v in r.items()}
            print(f"  {name:24s} {fmt}")
        if "max_abs_corr" in out:
            print(f"  edges' largest train P&L |corr| {out['max_abs_corr'][0]:.2f} "
                  f"({out['max_abs_corr'][1]}, {out['max_abs_corr'][2]})")
            print(f"  equal-weight book of the edges, holdout Sharpe {out['ew_holdout_sharpe']:.2f} against the best "
                  f"single {out['best_single']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
