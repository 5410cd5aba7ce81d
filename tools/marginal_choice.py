"""Which statistic pays an answer for what it adds to the book (R16, docs/verifier.md): the CPCV of its daily
train P&L after regression on the book's members (`channels.marginal`), or the change in the equal-weight
book's train Sharpe when it joins. Measured on the simulator's planted edges, train window only: the first
half of the edges is the book; the candidates are the other edges (new bets) and forms of the members
written another way (the same bet: a member's windows scaled, or its signal ranked). A statistic that pays
for new alpha ranks every new edge above every other form of a member (AUC 1) and pays a new edge about
what it earns on its own.

    python tools/marginal_choice.py --seeds 7,5,11
"""

from __future__ import annotations

import argparse
import re

import numpy as np

from alphagym.runtime import configure_runtime

configure_runtime()

from alphagym.books.metrics import sharpe  # noqa: E402
from alphagym.config import load_params  # noqa: E402
from alphagym.data.build_panel import build_panel  # noqa: E402
from alphagym.data.simulator import simulate_market  # noqa: E402
from alphagym.params import Marginal  # noqa: E402
from alphagym.verifier import channels as ch  # noqa: E402
from alphagym.verifier.verifier import Verifier  # noqa: E402

_WINDOW = re.compile(r",\s*(\d+)\s*\)")


def _scaled(formula: str, factor: float) -> str:
    return _WINDOW.sub(lambda m: f", {max(2, round(int(m.group(1)) * factor))})", formula)


def _auc(pos: list[float], neg: list[float]) -> float:
    return float(np.mean([(p > n) + 0.5 * (p == n) for p in pos for n in neg])) if pos and neg else float("nan")


def measure(params, seed: int) -> dict:
    d = params.data
    m = simulate_market(params.simulator, calendar=d.calendar, start=d.start, end=d.end, seed=seed)
    train, _, _ = build_panel(m.prices, m.sectors, params)
    v = Verifier(train, params)
    edges = [(n, e["formula"]) for n, e in m.ground_truth["effects"].items() if e["kind"] == "edge"]
    cards = {n: v.score(f) for n, f in edges}
    edges = [(n, f) for n, f in edges if cards[n].valid]
    half = len(edges) // 2
    members = np.stack([cards[n].pnl for n, _ in edges[:half]])
    base = sharpe(members.mean(axis=0))
    cfg = Marginal(size=20, max_corr=0.5)
    rows = []
    for kind, cands in (("new edge", [(n, f) for n, f in edges[half:]]),
                        ("member, written again", [(f"{n} x1.5", _scaled(f, 1.5)) for n, f in edges[:half]]
                         + [(f"rank({n})", f"rank({f})") for n, f in edges[:half]])):
        for name, formula in cands:
            c = v.score(formula)
            if not c.valid:
                continue
            own = float(c.channels["cpcv"])
            resid = ch.marginal(c.pnl, members, own, True, v.scorer.cpcv_of_net, cfg)
            gain = sharpe(np.vstack([members, c.pnl]).mean(axis=0)) - base
            rows.append({"kind": kind, "candidate": name, "own_cpcv": own, "residual_cpcv": resid,
                         "book_sharpe_gain": gain})
    new = [r for r in rows if r["kind"] == "new edge"]
    old = [r for r in rows if r["kind"] != "new edge"]
    return {"rows": rows, "auc": {s: _auc([r[s] for r in new], [r[s] for r in old])
                                  for s in ("own_cpcv", "residual_cpcv", "book_sharpe_gain")},
            "paid_share_new": float(np.mean([r["residual_cpcv"] / r["own_cpcv"] for r in new if r["own_cpcv"] > 0]))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="7", help="simulator seeds, comma-separated")
    params = load_params("params.yaml")
    for seed in (int(s) for s in ap.parse_args().seeds.split(",")):
        out = measure(params, seed)
        print(f"seed {seed}: AUC new edge vs a member written again: "
              + ", ".join(f"{k} {v:.2f}" for k, v in out["auc"].items())
              + f"; residual CPCV / own CPCV of the new edges: {out['paid_share_new']:.2f}")
        for r in out["rows"]:
            print(f"  {r['kind']:22s} {r['candidate']:34s} own {r['own_cpcv']:+.2f}  residual {r['residual_cpcv']:+.2f}"
                  f"  book Sharpe gain {r['book_sharpe_gain']:+.3f}")


if __name__ == "__main__":
    main()
