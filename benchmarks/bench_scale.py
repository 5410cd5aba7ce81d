"""How evaluation and scoring grow with the number of stocks: simulated panels of 46, 200 and 500 stocks
over the full 3,556 sessions (`simulator.stocks`), idle and under a competing load.

Each size runs in a fresh subprocess (so its peak resident memory is its own) that builds the panel, then
times, per formula of the workload (the five probes and every 10th usable Alpha101, 15 formulas):
- ours: the evaluator on all 3,556 sessions, `--repeats` runs with 1 and with 2 numba threads;
- pandas: the reference evaluator on the same panel, 3 runs;
- scoring: full score cards on the train window (3,304 sessions, one numba thread), R3 off and R3 on with three stand-in
  worlds (the same simulator under three other seeds: a world panel has the train panel's shape, and the
  cost of scoring in it does not depend on its content).
Medians and p90s of the per-formula timings, summed over the workload; never the best run. Memory: the
subprocess's peak resident set (`ru_maxrss`) after building the panel, and after all the timing.
Writes benchmarks/results/scale.json and docs/img/bench_scale.png; prints one table.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SIZES = (46, 200, 500)


def one(stocks: int, repeats: int, load: bool) -> dict:
    import resource

    import numba

    from alphagym.config import load_params
    from alphagym.data.build_panel import build_full_panel, build_panel
    from alphagym.data.sources import load_source
    from alphagym.dsl.alpha101 import alpha101
    from alphagym.dsl.evaluate import Evaluator
    from alphagym.dsl.parser import parse
    from alphagym.panel import DSL_FIELDS
    from alphagym.verifier.verifier import Verifier
    from common import PROBES, CompetingLoad, median_p90, times
    from reference_eval import ReferenceEvaluator

    def rss_mb() -> float:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0

    def panels(seed: int):
        p = load_params(ROOT / "params.yaml", [f"simulator.stocks={stocks}", f"seed={seed}",
                                               "verifier.jepa_stress.enabled=false"])
        prices, sectors, _ = load_source(p)
        return p, build_full_panel(prices, sectors, p)[0], build_panel(prices, sectors, p)[0]

    base_rss = rss_mb()
    params, full, train = panels(int(load_params(ROOT / "params.yaml")["seed"]))
    panel_rss = rss_mb()
    worlds = {f"seed{s}": panels(s)[2] for s in (101, 102, 103)}
    formulas = PROBES + [a.text for a in alpha101(panel_fields=frozenset(DSL_FIELDS)) if a.usable][::10]
    off = Verifier(train, params)
    on = Verifier(train, params, stress_worlds=worlds)
    asts = [parse(f) for f in formulas]
    ours, ref = Evaluator(full), ReferenceEvaluator(full)
    for ast, f in zip(asts, formulas):          # JIT warm-up, and the field ranks every evaluator keeps
        ours.evaluate(ast)
        on.score(f)
    out = {"stocks": stocks, "sessions": full.shape[0], "train_sessions": train.shape[0],
           "formulas": len(formulas), "load": load,
           "panel_mb": round(sum(a.nbytes for a in full.fields.values()) / 2**20, 1)}
    with CompetingLoad(load):
        for threads in (1, 2):
            numba.set_num_threads(threads)
            ts = [median_p90(times(lambda a=a: ours.evaluate(a), repeats)) for a in asts]
            out[f"eval_{threads}t_s"] = [sum(t[0] for t in ts), sum(t[1] for t in ts)]
        numba.set_num_threads(1)
        ts = [median_p90(times(lambda a=a: ref.evaluate(a), 3)) for a in asts]
        out["pandas_s"] = [sum(t[0] for t in ts), sum(t[1] for t in ts)]
        for name, v in (("score_r3_off_s", off), ("score_r3_on_s", on)):
            ts = [median_p90(times(lambda f=f, v=v: v.score(f), max(3, repeats // 2))) for f in formulas]
            out[name] = [sum(t[0] for t in ts), sum(t[1] for t in ts)]
    out["rss_panel_mb"] = round(panel_rss - base_rss, 1)
    out["rss_peak_mb"] = round(rss_mb() - base_rss, 1)
    return out


def plot(rows: list[dict], path: Path) -> Path:
    sys.path.insert(0, str(ROOT / "src"))
    from alphagym.plotting import pyplot, save

    plt = pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.2))
    for cond, style in ((False, "-"), (True, "--")):
        rs = [r for r in rows if r["load"] is cond]
        if not rs:
            continue
        n = [r["stocks"] for r in rs]
        tag = "under load" if cond else "idle"
        series = (("eval_1t_s", "evaluator, 1 thread", "C0"), ("eval_2t_s", "evaluator, 2 threads", "C1"),
                  ("pandas_s", "pandas reference", "C7"), ("score_r3_off_s", "scoring, R3 off", "C2"),
                  ("score_r3_on_s", "scoring, R3 on (3 worlds)", "C3"))
        for key, label, color in series:
            ax1.plot(n, [r[key][0] * 1e3 / r["formulas"] for r in rs], style, marker="o", color=color,
                     label=f"{label} ({tag})")
        if not cond:
            ax2.plot(n, [r["rss_peak_mb"] for r in rs], "-o", color="C3", label="peak RSS over start-up")
            ax2.plot(n, [r["panel_mb"] for r in rs], "-o", color="C0", label="one train panel's arrays")
    sizes = sorted({r["stocks"] for r in rows})
    ax1.set(xscale="log", yscale="log", xlabel="stocks", ylabel="ms per formula (median)",
            title="time per formula, 3,556 sessions")
    ax1.set_xticks(sizes, [str(n) for n in sizes])
    ax1.minorticks_off()
    ax1.legend(fontsize=6.5)
    ax2.set(xlabel="stocks", ylabel="MB", title="memory (idle run)")
    ax2.legend(fontsize=8)
    return save(fig, path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--load", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)))
    ap.add_argument("--plot-only", action="store_true", help="redraw the figure from benchmarks/results/scale.json")
    args = ap.parse_args()
    if args.plot_only:
        rows = json.loads((ROOT / "benchmarks" / "results" / "scale.json").read_text())
        print(f"figure: {plot(rows, ROOT / 'docs' / 'img' / 'bench_scale.png').relative_to(ROOT)}")
        return 0
    if args.one:
        print(json.dumps(one(args.one, args.repeats, args.load)))
        return 0
    rows = []
    for load in (False, True):
        for n in (int(s) for s in args.sizes.split(",")):
            cmd = [sys.executable, __file__, "--one", str(n), "--repeats", str(args.repeats)]
            cmd += ["--load"] if load else []
            res = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ, NUMBA_NUM_THREADS="2"))
            if res.returncode:
                sys.stderr.write(res.stderr)
                return res.returncode
            rows.append(json.loads(res.stdout.strip().splitlines()[-1]))
            r = rows[-1]
            print(f"{'load' if load else 'idle'} {n:4d} stocks: eval 1t {r['eval_1t_s'][0]:.3f} s, 2t "
                  f"{r['eval_2t_s'][0]:.3f} s, pandas {r['pandas_s'][0]:.2f} s, score R3 off "
                  f"{r['score_r3_off_s'][0]:.3f} s, R3 on {r['score_r3_on_s'][0]:.3f} s, peak RSS "
                  f"+{r['rss_peak_mb']:.0f} MB", flush=True)
    out = ROOT / "benchmarks" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "scale.json").write_text(json.dumps(rows, indent=1))
    print(f"figure: {plot(rows, ROOT / 'docs' / 'img' / 'bench_scale.png').relative_to(ROOT)}")
    print("\n| stocks | condition | evaluator 1 thread | evaluator 2 threads | pandas | ours (best threads) vs pandas "
          "| scoring R3 off | scoring R3 on (3 worlds) | R3 on vs pandas | peak RSS | panel arrays |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        best = min(r["eval_1t_s"][0], r["eval_2t_s"][0])
        cond = "load" if r["load"] else "idle"
        print(f"| {r['stocks']} | {cond} | {r['eval_1t_s'][0]:.3f} s ({r['eval_1t_s'][1]:.3f}) "
              f"| {r['eval_2t_s'][0]:.3f} s ({r['eval_2t_s'][1]:.3f}) | {r['pandas_s'][0]:.2f} s "
              f"| {r['pandas_s'][0] / best:.1f}× | {r['score_r3_off_s'][0]:.3f} s ({r['score_r3_off_s'][1]:.3f}) "
              f"| {r['score_r3_on_s'][0]:.3f} s ({r['score_r3_on_s'][1]:.3f}) "
              f"| {r['pandas_s'][0] / r['score_r3_on_s'][0]:.1f}× | {r['rss_peak_mb']:.0f} MB "
              f"| {r['panel_mb']:.0f} MB |")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT / "benchmarks"))
    sys.path.insert(0, str(ROOT / "tests"))
    sys.exit(main())
