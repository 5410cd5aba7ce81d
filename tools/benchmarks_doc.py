"""BENCHMARKS.md's table, generated from `benchmarks/results/`: one row per measured figure, its target, its
numbers as the benchmark printed them in its results file, and the command that reproduces it. The table
lives between `<!-- figures -->` and `<!-- /figures -->`; the rest of BENCHMARKS.md is prose. A new
measurement replaces its figure's results file (or appends a run to it: the last run in the file is the
current one), and this script rewrites the row; older rows and VM history are in
`docs/notes/benchmarks-history.md`.

    python tools/benchmarks_doc.py            # rewrite BENCHMARKS.md's table
    python tools/benchmarks_doc.py --check    # exit 1 if the table differs from what the results say

A figure whose file or numbers are missing is an error naming the figure and the file.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DOC = ROOT / "BENCHMARKS.md"
BLOCK = re.compile(r"(<!-- figures -->\n)(.*?)(<!-- /figures -->)", re.S)


class Missing(LookupError):
    pass


def _section(text: str, start: str | None, end: str | None) -> str:
    if start is not None:
        if start not in text:
            raise Missing(f"no line {start!r}")
        text = text[text.index(start):]
    if end is not None and end in text:
        text = text[:text.index(end)]
    return text


def kv(key: str, start: str | None = None, end: str | None = None) -> Callable[[str], str]:
    """The last `key=value` of the file (or of its section from the line `start` to the line `end`)."""
    def get(text: str) -> str:
        found = re.findall(rf"^{re.escape(key)}=(\S+)", _section(text, start, end), re.M)
        if not found:
            raise Missing(f"no {key}=")
        return found[-1]
    return get


def rx(pattern: str, start: str | None = None, end: str | None = None) -> Callable[[str], tuple[str, ...]]:
    """The groups of the last match of `pattern` (in the section `start`..`end`)."""
    def get(text: str) -> tuple[str, ...]:
        found = list(re.finditer(pattern, _section(text, start, end), re.M))
        if not found:
            raise Missing(f"no line matching {pattern!r}")
        return found[-1].groups()
    return get


def ratio(median: Callable[[str], str], p90: Callable[[str], str]) -> Callable[[str], str]:
    return lambda t: f"{float(median(t)):.2f}× ({float(p90(t)):.2f}×)"


def secs(median: Callable[[str], str], p90: Callable[[str], str]) -> Callable[[str], str]:
    return lambda t: f"{float(median(t)):.2f} s ({float(p90(t)):.2f} s)"


def _over(text: str, top: str, bottom: str) -> float:
    """The ratio of two of the file's values, from the values themselves (not from a rounded ratio)."""
    return float(kv(top)(text)) / float(kv(bottom)(text))


def pair(get: Callable[[str], tuple[str, ...]], fmt: str) -> Callable[[str], str]:
    return lambda t: fmt.format(*get(t))


@dataclass(frozen=True)
class Figure:
    what: str
    target: str
    file: str
    command: str
    idle: Callable[[str], str] | None = None
    load: Callable[[str], str] | None = None     # under a competing CPU-bound load (the benchmark's own, or named)


# verifier_vm5.txt holds runs 0-4 of the R3-on command (run 4 is the benchmark as committed), each but the
# first followed by the R3-off command after a line "==R3off"
_R3 = ("python benchmarks/bench_verifier.py --stress-worlds results/world_model/worlds "
       "--kept-only results/world_model/gates.json")


def _brief_decoding(text: str) -> str:
    over = ratio(kv("brief_decoding_over_grammar_median"), kv("brief_decoding_over_grammar_p90"))(text)
    traced = ratio(kv("brief_decoding_over_grammar_traced_median"),
                   kv("brief_decoding_over_grammar_traced_p90"))(text)
    brief = secs(kv("brief_decoding_brief_median"), kv("brief_decoding_brief_p90"))(text)
    parseable = [rx(rf"^brief_decoding_{side}_compliant_share=\S+\s+\((\d+) parseable answers\)")(text)[0]
                 for side in ("brief", "grammar")]
    return (f"{over}; {traced} against the traced grammar; brief {brief}; parseable answers {parseable[0]} "
            f"(grammar {parseable[1]})")


def _gpu_load_and_sft(text: str) -> str:
    load = rx(r"model load \(NF4 \+ LoRA\) ([\d.]+) s")(text)[0]
    sft = rx(r"^sft: \d+ steps of \d+ pairs in ([\d.]+) s")(text)[0]
    return f"load {load} s, SFT {sft} s"


FIGURES = (
    Figure("evaluator vs pandas, geomean over 105 formulas, 2 numba threads", "≥ 10×", "eval_vm5.txt",
           "python benchmarks/bench_eval.py",
           ratio(kv("geomean_speedup_idle_2t_median"), kv("geomean_speedup_idle_2t_p90")),
           ratio(kv("geomean_speedup_load_2t_median"), kv("geomean_speedup_load_2t_p90"))),
    Figure("the same, 1 numba thread", "", "eval_vm5.txt", "python benchmarks/bench_eval.py",
           ratio(kv("geomean_speedup_idle_1t_median"), kv("geomean_speedup_idle_1t_p90")),
           ratio(kv("geomean_speedup_load_1t_median"), kv("geomean_speedup_load_1t_p90"))),
    Figure("full scoring of 110 answers, R3 on (3 worlds scored whole), vs pandas evaluation alone, one core",
           "≥ 5×", "verifier_vm5.txt", _R3,
           ratio(kv("full_scoring_vs_pandas_eval_idle_median", "# run 4", "==R3off"),
                 kv("full_scoring_vs_pandas_eval_idle_p90", "# run 4", "==R3off")),
           ratio(kv("full_scoring_vs_pandas_eval_load_median", "# run 4", "==R3off"),
                 kv("full_scoring_vs_pandas_eval_load_p90", "# run 4", "==R3off"))),
    Figure("the same, R3 off", "≥ 5×", "verifier_vm5.txt", "python benchmarks/bench_verifier.py",
           ratio(kv("full_scoring_vs_pandas_eval_idle_median", "# run 4"),
                 kv("full_scoring_vs_pandas_eval_idle_p90", "# run 4")),
           ratio(kv("full_scoring_vs_pandas_eval_load_median", "# run 4"),
                 kv("full_scoring_vs_pandas_eval_load_p90", "# run 4"))),
    Figure("R3-on scoring with numpy's BLAS on two threads against one (> 1: two are slower)", "",
           "blas_threads.txt", _R3.replace("bench_verifier", "bench_blas_threads"),
           ratio(kv("blas2_vs_blas1_idle_median"), kv("blas2_vs_blas1_idle_p90")),
           ratio(kv("blas2_vs_blas1_load_median"), kv("blas2_vs_blas1_load_p90"))),
    Figure("`alphagym score --no-server FORMULA`, a fresh process, wall time", "< 1.5 s", "cli_score_vm5.txt",
           "python benchmarks/bench_cli_score.py --repeats 7",
           pair(rx(r"^idle\s+alphagym score --no-server\s+median ([\d.]+) s\s+p90 ([\d.]+) s"), "{} s ({} s)"),
           pair(rx(r"^under load\s+alphagym score --no-server\s+median ([\d.]+) s\s+p90 ([\d.]+) s"), "{} s ({} s)")),
    Figure("`alphagym score FORMULA` answered by the server the first call started", "< 1.5 s", "cli_score_vm5.txt",
           "python benchmarks/bench_cli_score.py --repeats 7",
           pair(rx(r"^idle\s+alphagym score \(the server it started\)\s+median ([\d.]+) s\s+p90 ([\d.]+) s"),
                "{} s ({} s)"),
           pair(rx(r"^under load\s+alphagym score \(the server it started\)\s+median ([\d.]+) s\s+p90 ([\d.]+) s"),
                "{} s ({} s)")),
    Figure("RL step, the default recipe (`cispo_repo`: `rl.recipe` unchanged), two rungs side by side at 1:1 "
           "threads, machine otherwise idle", "≤ 2.0 s", "rung_concurrency_default.txt",
           "python benchmarks/bench_rung_concurrency.py --rung cispo_repo --steps 40 --rounds 1",
           pair(rx(r"^pair: ([\d.]+) s a step each \(p90 ([\d.]+)\)", end="# the same command"), "{} s ({} s)")),
    Figure("that step's generation and scoring (the first rung of the pair)", "≤ 0.5 s, ≤ 0.6 s",
           "rung_concurrency_default.txt",
           "python benchmarks/bench_rung_concurrency.py --rung cispo_repo --steps 40 --rounds 1",
           pair(rx(r"pair 1 phases, median \(p90\) s: generation ([\d.]+) \(([\d.]+)\), scoring ([\d.]+) "
                   r"\(([\d.]+)\)", end="# the same command"), "{} s ({} s), {} s ({} s)")),
    Figure("two rungs side by side at 1:1 against one rung at 2:2, rung steps a minute", "",
           "rung_concurrency_default.txt",
           "python benchmarks/bench_rung_concurrency.py --rung cispo_repo --steps 40 --rounds 1",
           ratio(kv("pair_vs_alone_throughput_median", end="# the same command"),
                 kv("pair_vs_alone_throughput_p90", end="# the same command"))),
    Figure("the same pair on all briefs (`cispo_repo_all`, the rung the step target was set on); its generation "
           "and scoring", "≤ 2.0 s; ≤ 0.5 s, ≤ 0.6 s", "rung_concurrency_decode.txt",
           "python benchmarks/bench_rung_concurrency.py --rung cispo_repo_all --steps 40 --rounds 1",
           lambda t: (pair(rx(r"^pair: ([\d.]+) s a step each \(p90 ([\d.]+)\)"), "{} s ({} s)")(t) + "; "
                      + pair(rx(r"pair 1 phases, median \(p90\) s: generation ([\d.]+) \(([\d.]+)\), scoring "
                                r"([\d.]+) \(([\d.]+)\)"), "{} s ({} s), {} s ({} s)")(t))),
    Figure("an RL step's scoring (default rung, 32 answers, R3 on, 1 numba thread): the verifier against its "
           "reference (leg names in numpy, brief checks parsing again, skew and kurt by the two-pass scan at "
           "every window, ts_rank by a float select), alternating in one process; seconds a step, then the ratio", "",
           "step_scoring.txt", "python benchmarks/bench_step_scoring.py --steps 8 --rounds 3",
           lambda t: (f"{secs(kv('step_scoring_ours_median'), kv('step_scoring_ours_p90'))(t)} against "
                      f"{secs(kv('step_scoring_reference_median'), kv('step_scoring_reference_p90'))(t)}: "
                      f"{ratio(kv('step_scoring_speedup_median'), kv('step_scoring_speedup_p90'))(t)}")),
    Figure("RL step, a DoRA rung (`cispo_repo_dora`), two side by side at 1:1", "≤ 3.0 s",
           "rung_concurrency_dora.txt",
           "python benchmarks/bench_rung_concurrency.py --rung cispo_repo_dora --steps 40 --rounds 1",
           pair(rx(r"^pair: ([\d.]+) s a step each \(p90 ([\d.]+)\)"), "{} s ({} s)")),
    Figure("a rung pair's step with numpy's BLAS on two threads against one (> 1: two are slower)", "",
           "rung_blas.txt", "python benchmarks/bench_rung_blas.py", None,
           ratio(kv("blas2_vs_blas1_pair_step_median"), kv("blas2_vs_blas1_pair_step_p90"))),
    Figure("grammar-constrained sampling of one default batch (32 answers, 1 torch thread): the checker reusing "
           "finished calls vs parsing every text from scratch; generation, then the grammar sampler's part",
           "generation ≤ 0.5 s", "grammar.txt",
           "python benchmarks/bench_grammar.py --rounds 12",
           lambda t: (f"{float(kv('grammar_ours_generate_median')(t)):.2f} s "
                      f"({float(kv('grammar_ours_generate_p90')(t)):.2f} s), "
                      f"{ratio(kv('grammar_speedup_generate_median'), kv('grammar_speedup_generate_p90'))(t)}; "
                      f"grammar {ratio(kv('grammar_speedup_pick_median'), kv('grammar_speedup_pick_p90'))(t)}")),
    Figure("brief-constrained sampling of one default batch (32 answers, 1 torch thread, traced as the RL trainer "
           "samples) against the grammar-only sampler (untraced, then traced), alternating in one process (under "
           "load: a DAG stage on the same 2 cores)",
           "≤ 1.3×", "brief_decoding.txt", "python benchmarks/bench_brief_decoding.py --rounds 12", None,
           _brief_decoding),
    Figure("the brief decoder's judging of one candidate token at a prefix of 60 tokens against one of 10, fresh "
           "checker each round (under load: a DAG's RL trainings and a test suite on the same 2 cores)", "≤ 1.2×",
           "token_judge.txt",
           "python benchmarks/bench_token_judge.py --rounds 12", None,
           lambda t: f"{ratio(kv('token_judge_ratio_median'), kv('token_judge_ratio_p90'))(t)}; "
                     f"{float(kv('token_judge_10_median_us')(t)):.0f} µs against "
                     f"{float(kv('token_judge_60_median_us')(t)):.0f} µs a candidate"),
    Figure("sampling one default batch: the own decode loop vs the model's forward over its cache", "",
           "decode.txt", "python benchmarks/bench_decode.py --rounds 12",
           ratio(kv("decode_speedup_median"), kv("decode_speedup_p90"))),
    Figure("each group's prompt run once when sampling and in an update pass, on vs off (update pass)", "",
           "prompt_cache.txt", "python benchmarks/bench_prompt_cache.py --rounds 16", None,
           lambda t: f"{float(kv('prompt_cache_update_pass_speedup_median')(t)):.2f}×; sampling "
                     f"{float(kv('prompt_cache_generation_speedup_median')(t)):.2f}×"),
    Figure("RL step of the SmolLM2-135M + LoRA rung (profile `smollm2`), 2 threads, from the base model with a "
           "fresh LoRA (no SFT: answers of 17 tokens, against 41 after SFT; the file says why this is not a gain)",
           "", "rl_step_smollm2.txt",
           "python benchmarks/bench_rl_step.py --rung cispo_repo --set profile=smollm2 --steps 4 --warmup 1 "
           "--budgets 2:2",
           secs(kv("rl_step_step_time_median"), kv("rl_step_step_time_p90"))),
    Figure("RL step of a brief rung (`cispo_repo`) against its grammar-only control (`cispo_repo_grammar`), one "
           "process at 1:1 threads, the `marginal` run's SFT policy and inputs; then each one's generation",
           "≤ 1.2×", "rl_step_brief_grammar.txt",
           "python benchmarks/bench_rl_step.py --set profile=marginal --rungs cispo_repo,cispo_repo_grammar,"
           "cispo_repo --budgets 1:1",
           lambda t: f"{_over(t, 'rl_step_side0_step_time_median', 'rl_step_side1_step_time_median'):.2f}×: "
                     f"{float(kv('rl_step_side0_step_time_median')(t)):.2f} s "
                     f"({float(kv('rl_step_side0_step_time_p90')(t)):.2f} s) against "
                     f"{float(kv('rl_step_side1_step_time_median')(t)):.2f} s "
                     f"({float(kv('rl_step_side1_step_time_p90')(t)):.2f} s); generation "
                     f"{float(kv('rl_step_side0_generation_median')(t)):.2f} s against "
                     f"{float(kv('rl_step_side1_generation_median')(t)):.2f} s"),
    Figure("RL step of the default recipe from the `capacity` profile's SFT policy (hidden 192, 6 layers) against "
           "the default size's (128, 4), one process at 1:1 threads", "about 3 s (the default size is at 3.4 s)",
           "rl_step_capacity.txt",
           "python benchmarks/bench_rl_step.py --set profile=marginal --rung cispo_repo "
           "--sft results/sft/tiny/policy "
           "--sft results/capacity/sft/tiny/policy --sft results/sft/tiny/policy --budgets 1:1",
           lambda t: f"{float(kv('rl_step_side1_over_side0_median')(t)):.2f}×: "
                     f"{float(kv('rl_step_side1_step_time_median')(t)):.2f} s "
                     f"({float(kv('rl_step_side1_step_time_p90')(t)):.2f} s) against "
                     f"{float(kv('rl_step_side0_step_time_median')(t)):.2f} s "
                     f"({float(kv('rl_step_side0_step_time_p90')(t)):.2f} s)"),
    Figure("the GPU check's path on the CPU, shrunk (`--cpu-smoke`): RL step", "",
           "gpu_check_cpu_smoke.txt", "bash benchmarks/gpu_check.sh --cpu-smoke",
           secs(kv("gpu_check_step_s_median"), kv("gpu_check_step_s_p90"))),
    Figure("the GPU check on one H200, one run (NF4 SmolLM2 + LoRA): model load and 20 SFT steps of 16 pairs; "
           "its RL steps not yet seen on a GPU (the file says why)", "the whole check < 8 min", "gpu_check_h200.txt",
           "bash benchmarks/gpu_check.sh",
           _gpu_load_and_sft),
    Figure("SmolLM2 in NF4 against fp32 on the CPU: rollout (> 1: NF4 slower), beside a `make run`", "",
           "nf4_cpu.txt", "python benchmarks/bench_nf4_cpu.py --repeats 3", None,
           pair(rx(r"^rollout_nf4_over_fp32 median=([\d.]+) p90=([\d.]+)"), "rollout {}× ({}×)")),
)


def row(f: Figure) -> str:
    path = RESULTS / f.file
    if not path.is_file():
        raise SystemExit(f"figure {f.what!r}: its results file {path} does not exist")
    text = path.read_text()
    cells = []
    for get in (f.idle, f.load):
        try:
            cells.append(get(text) if get is not None else "")
        except Missing as exc:
            raise SystemExit(f"figure {f.what!r}: {path} has {exc}") from None
    return (f"| {f.what} | {f.target} | {cells[0]} | {cells[1]} | `{f.command}` | "
            f"[{f.file}](benchmarks/results/{f.file}) |")


def table() -> str:
    head = ("| figure | target | idle: median (p90) | under load: median (p90) | command | results |\n"
            "|---|---|---|---|---|---|\n")
    return head + "\n".join(row(f) for f in FIGURES) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail if BENCHMARKS.md's table is not the generated one")
    args = ap.parse_args()
    doc = DOC.read_text()
    m = BLOCK.search(doc)
    if m is None:
        raise SystemExit(f"{DOC} has no <!-- figures --> ... <!-- /figures --> block")
    new = doc[:m.start(2)] + table() + doc[m.end(2):]
    if args.check:
        if new != doc:
            print(f"{DOC}'s table differs from benchmarks/results/: run `python tools/benchmarks_doc.py`")
            return 1
        return 0
    DOC.write_text(new)
    print(f"{DOC}: {len(FIGURES)} figures")
    return 0


if __name__ == "__main__":
    sys.exit(main())
