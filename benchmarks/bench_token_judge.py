"""The brief decoder's cost of judging one candidate token against the answer written so far, at a prefix of
10 tokens and at one of 60: a decoder that keeps a per-token state judges both alike; one that re-reads the
prefix pays more at 60.

Each round takes a fresh brief checker (`briefs.checker.BriefContracts`, as a rung meets new answers every
step), judges the answer's prefix one token short (what the sampler did the step before, so the checker's
resumable walk holds it), then times judging each candidate token (every single-token ASCII piece of the
tokenizer's vocabulary) appended to the prefix, for prefixes of 10 and 60 tokens of the same answer, in an
alternating order. The answers are open, compliant-so-far formulas written from the brief's own witnesses
(`briefs.witnesses`), long enough for 60 tokens. Reported: the median and p90 over rounds of the microseconds
a candidate, and their ratio, 60 tokens against 10.

    python benchmarks/bench_token_judge.py --rounds 12
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from alphagym.briefs.catalogue import load_catalogue  # noqa: E402
from alphagym.briefs.checker import BriefContracts, compile_brief  # noqa: E402
from alphagym.briefs.generate import render  # noqa: E402
from alphagym.briefs.witnesses import witnesses  # noqa: E402
from alphagym.config import load_params  # noqa: E402
from alphagym.dsl.parser import Limits  # noqa: E402
from alphagym.policy.model import load_policy  # noqa: E402
from common import ROOT

BRIEF = {"mechanism": "volume_surge", "horizon": 21, "input_rule": "use_volume", "structure": "ranked",
         "forbidden": "no_argext", "risk": "vol_regime"}
LENGTHS = (10, 60)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--policy", default=None, help="a saved policy whose tokenizer to use "
                                                    "(default: results/sft/tiny/policy)")
    args = ap.parse_args()
    params = load_params(ROOT / "params.yaml")
    cat, tol = load_catalogue(), params.briefs.horizon_tolerance
    tok = load_policy(args.policy or ROOT / params.paths.results / "sft" / "tiny" / "policy").tokenizer
    brief = {**BRIEF, "text": render(cat, BRIEF)}
    limits = Limits.from_params(params.dsl.limits)
    w = witnesses(compile_brief(brief, cat, tol, limits), limits)[0]
    # an open answer: the witness's terms added up inside one rank( ... ), never closed
    inner = w[len("rank("):-1] if w.startswith("rank(") else w
    body = "<alpha>rank(" + " + ".join([inner] * 12)
    ids = tok(body, add_special_tokens=False)["input_ids"]
    assert len(ids) > max(LENGTHS), len(ids)
    pieces = sorted({p for t in range(len(tok)) if (p := tok.decode([t])) and p.isascii() and p.strip()})
    times: dict[int, list[float]] = {n: [] for n in LENGTHS}
    for r in range(args.rounds):
        contracts = BriefContracts(cat, tol, limits, variants=params.policy.witness_variants)
        checker = contracts.checker(brief)
        for n in LENGTHS if r % 2 == 0 else tuple(reversed(LENGTHS)):
            text = tok.decode(ids[:n])
            assert checker.state(tok.decode(ids[:n - 1])) == "open" and checker.state(text) == "open", text
            t0 = time.perf_counter()
            for p in pieces:
                checker.state(text + p)
            times[n].append((time.perf_counter() - t0) / len(pieces) * 1e6)
        print(f"round {r + 1}: " + ", ".join(f"{n} tokens {times[n][-1]:.1f} us" for n in LENGTHS), flush=True)
    ratio = np.array(times[LENGTHS[1]]) / np.array(times[LENGTHS[0]])
    print(f"candidates a prefix: {len(pieces)}; answer: {tok.decode(ids[:LENGTHS[1]])!r}")
    for n in LENGTHS:
        print(f"token_judge_{n}_median_us={np.median(times[n]):.1f}")
        print(f"token_judge_{n}_p90_us={np.percentile(times[n], 90):.1f}")
    print(f"token_judge_ratio_median={np.median(ratio):.2f}")
    print(f"token_judge_ratio_p90={np.percentile(ratio, 90):.2f}")


if __name__ == "__main__":
    main()
