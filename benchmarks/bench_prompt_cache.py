"""What running a repeated prompt once buys the two torch phases of an RL step, measured in one process
against the reference in that process: sampling a group's answers (`Policy._prefill`: each distinct
prompt's forward once, every answer decoded from its cache) and one update pass, forward and backward
(`Policy._grouped_logits`), each with `Policy.share_prompts` on (the default) and off (every answer runs its
whole prompt; the update still shares the system turn), alternating on/off every round so a drifting VM or a
competing process weighs on both alike.

Runs on the pipeline's own outputs through the rung's own trainer (`--rung`, default the LoRA `cispo_repo`;
the tiny SFT policy with the rung's adapter, the filtered briefs, 1 torch thread as the ladder runs it): each
round draws the step's briefs (`briefs_per_step` × `answers_per_brief`), samples them under the grammar,
then times the update pass on those answers. Each condition has its own grammar checker (and so its own
cache of prefixes, as a rung has). `--rounds` rounds after one untimed; medians and p90s, never
best-of, and the median of the rounds' paired ratios (a round's two conditions draw the same answers up
to float rounding, so the pair differs by the change alone; the count of rounds where they did is printed).
Last lines: `prompt_cache_<phase>_<on|off>_median=<s>` and the speedups.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from alphagym.config import load_params
from alphagym.dsl.prefix import PrefixChecker
from alphagym.pipeline import stage_table
from alphagym.policy.model import Policy
from alphagym.rl.stage import build_trainer
from common import ROOT


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rung", default="cispo_repo")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args()
    params = load_params(ROOT / "params.yaml", args.set)
    trainer = build_trainer(params, stage_table(params)[f"train@{args.rung}"].paths("deps"), args.rung, None)
    pol, k = trainer.policy, trainer.cfg.answers_per_brief
    # one grammar checker per condition, warmed by that condition's own rounds as a rung's is by its steps:
    # with one shared checker the second condition of a round would find the first's answers all cached
    checkers = {share: PrefixChecker(pol.grammar.limits) for share in (True, False)}
    times: dict[tuple[str, bool], list[float]] = {}
    drawn: dict[bool, list[list[str]]] = {}
    same = 0                        # rounds whose two conditions drew the same answers (float rounding aside)
    for r in range(args.rounds + 1):
        briefs = trainer._draw(r, trainer.cfg.briefs_per_step, 0)
        for share in ((True, False) if r % 2 else (False, True)):
            Policy.share_prompts = share
            pol.grammar = checkers[share]
            t0 = time.perf_counter()
            answers = pol.generate(briefs, n=k, temperature=1.0, seed=r)
            t1 = time.perf_counter()
            drawn[share] = answers
            flat_b = [b["text"] for b in briefs for _ in range(k)]
            flat_a = [a for g in answers for a in g]
            pol.model.train()
            lp, _, mask, _, _ = pol.answer_forward(flat_b, flat_a, grad=True, entropy=True)
            (lp * mask).sum().backward()
            pol.model.zero_grad(set_to_none=True)
            pol.model.eval()
            t2 = time.perf_counter()
            if r:
                times.setdefault(("generation", share), []).append(t1 - t0)
                times.setdefault(("update_pass", share), []).append(t2 - t1)
        if r:
            same += drawn[True] == drawn[False]
            print(f"round {r}: " + " ".join(f"{p}/{'on' if s else 'off'}={v[-1]:.3f}"
                                            for (p, s), v in times.items()), flush=True)
    Policy.share_prompts = True
    print(f"the two conditions drew the same answers in {same} of {args.rounds} rounds")
    print("| phase | share_prompts on: median (p90) | off: median (p90) | speed-up (median, p90) "
          "| paired speed-up, median over rounds |")
    print("|---|---|---|---|---|")
    for phase in ("generation", "update_pass"):
        on, off = np.array(times[(phase, True)]), np.array(times[(phase, False)])
        print(f"| {phase} | {np.median(on):.3f} s ({np.percentile(on, 90):.3f}) | {np.median(off):.3f} s "
              f"({np.percentile(off, 90):.3f}) | {np.median(off) / np.median(on):.2f}× "
              f"({np.percentile(off, 90) / np.percentile(on, 90):.2f}×) | {np.median(off / on):.2f}× |")
    for phase in ("generation", "update_pass"):
        for s in (True, False):
            print(f"prompt_cache_{phase}_{'on' if s else 'off'}_median={np.median(times[(phase, s)]):.3f}")
        print(f"prompt_cache_{phase}_speedup_median="
              f"{np.median(times[(phase, False)]) / np.median(times[(phase, True)]):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
