"""What running a group's prompt once buys a rung (`Policy._grouped_logits`: the reference pass and the update
passes run each brief's prompt once for its 8 answers instead of once per answer), measured as the ladder runs:
a LoRA rung beside a DoRA rung, one core each, so each condition runs under the load of the other rung.

Conditions, each a pair of fresh `bench_rl_step.py` processes (`--warmup` untimed steps, `--steps` timed ones
from the SFT policy, medians and p90s, never best-of), alternating `--rounds` times:
  reference: every answer runs its whole prompt after the shared system turn (`--prompts each`);
  default:   each distinct prompt runs once, its answers on its cache (what the trainer does).
Both draw the same briefs and, up to float rounding, the same answers. Run the stages up to `filter` first.
Last lines: `<rung>_<condition>_step_median=<s>` and the speedups of `default` over `reference`.
"""

from __future__ import annotations

import sys

from bench_rl_sampling import main

CONDITIONS = {
    "reference": (["--prompts", "each"], []),
    "default": (["--prompts", "grouped"], []),
}

if __name__ == "__main__":
    sys.exit(main(CONDITIONS, __doc__))
