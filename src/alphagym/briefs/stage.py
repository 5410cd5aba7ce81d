"""The `briefs` stage: seeded training and holdout briefs, and a summary of what they cover."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from alphagym.briefs.catalogue import load_catalogue
from alphagym.briefs.generate import generate, write_briefs
from alphagym.params import Params
from alphagym.tracking import StageRun


def briefs(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun) -> dict[str, Any]:
    cat = load_catalogue()
    train, holdout, held = generate(cat, params.briefs, params.seed)
    write_briefs(outs["train"], train)
    write_briefs(outs["holdout"], holdout)
    summary = {
        "train": len(train), "holdout": len(holdout),
        "families": len(cat.ids("mechanisms")) * len(cat.ids("structures")), "holdout_families": held,
        "train_families_used": len({b["family"] for b in train}),
        "holdout_families_used": len({b["family"] for b in holdout}),
        "catalogue": {part: len(cat.ids(part)) for part in cat.rows} | {"horizons": len(cat.horizons)},
        "train_by_mechanism": dict(sorted(Counter(b["mechanism"] for b in train).items())),
    }
    outs["summary"].write_text(json.dumps(summary, indent=1))
    run.log_metrics({"train_briefs": len(train), "holdout_briefs": len(holdout),
                     "holdout_families": len(held)})
    run.log_artifact(outs["summary"])
    return {k: summary[k] for k in ("train", "holdout", "train_families_used", "holdout_families_used")}
