"""Should R14 (brief compliance) be gated on validity? The tiny SFT policy's answers to 48 filtered training
briefs (8 each, T = 1, grammar decoding), scored as groups: how compliant valid and invalid answers are, and
what R14 at priority 0.5 changes in the GDPO advantages after the validity projection, gated and ungated.

    python tools/compliance_gate.py          # reads results/ of the default profile (`make run` first)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from alphagym.runtime import configure_runtime

configure_runtime()

from alphagym.briefs.catalogue import load_catalogue  # noqa: E402
from alphagym.briefs.generate import read_briefs  # noqa: E402
from alphagym.config import load_params, results_dir  # noqa: E402
from alphagym.panel import Panel  # noqa: E402
from alphagym.params import Compliance  # noqa: E402
from alphagym.policy.evaluate import scored_answers  # noqa: E402
from alphagym.policy.model import load_policy, set_decoding  # noqa: E402
from alphagym.rl.advantages import gdpo, project  # noqa: E402
from alphagym.verifier import channels as ch  # noqa: E402
from alphagym.verifier.verifier import Verifier  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def effect_of_r14(groups, priorities, gated: bool) -> dict[str, float]:
    """Mean within-group corr(R14, R1) and the share of answers whose advantage changes sign when R14 is added."""
    flips, corr = [], []
    for g in groups:
        valid = np.array([c.valid for c in g])
        chans = {k: [c.channels[k] for c in g] for k in g[0].channels if k != "compliance"}
        base = project(gdpo(chans, priorities), valid)
        chans["compliance"] = [ch.compliance(c.metrics["compliance"], c.valid, Compliance(gated=gated)) for c in g]
        comp, r1 = np.array(chans["compliance"]), np.array(chans["cpcv"])
        if comp.std() > 0 and r1.std() > 0:
            corr.append(float(np.corrcoef(comp, r1)[0, 1]))
        flips.append(float(np.mean(np.sign(base) != np.sign(project(gdpo(chans, priorities), valid)))))
    return {"mean_corr_r14_r1": float(np.mean(corr)), "share_sign_changes": float(np.mean(flips))}


def main() -> int:
    p = load_params(ROOT / "params.yaml", ["verifier.jepa_stress.enabled=false"])
    r, cat = results_dir(p), load_catalogue()
    briefs = read_briefs(r / "filter" / "briefs.jsonl", cat)[:48]
    verifier = Verifier(Panel.read_parquet(r / "panel" / "train.parquet"), p)
    policy = load_policy(r / "sft" / "tiny" / "policy", p.policy.hf.nf4)
    set_decoding(policy, p.policy.decoding, p.dsl.limits, p.briefs.horizon_tolerance, p.policy.witness_variants)
    groups = scored_answers(policy, briefs, verifier, cat, float(p.briefs.horizon_tolerance), 8, 1.0, 11,
                            "R14 gate")
    cards = [c for g in groups for c in g]
    valid = np.array([c.valid for c in cards])
    share = np.array([c.metrics["compliance"] for c in cards])
    parsed = np.array([c.formula is not None for c in cards])
    print(json.dumps({"answers": len(cards), "valid": float(valid.mean()),
                      "invalid_parsed": float(parsed[~valid].mean()) if (~valid).any() else None,
                      "compliance_valid": float(share[valid].mean()),
                      "compliance_invalid": float(share[~valid].mean()) if (~valid).any() else None,
                      "fully_compliant_valid": float((share[valid] == 1).mean())}))
    priorities = {**dict(p.verifier.priorities), "compliance": 0.5}
    print(json.dumps({("gated" if g else "ungated"): effect_of_r14(groups, priorities, g) for g in (True, False)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
