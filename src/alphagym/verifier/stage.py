"""The `archive` stage: seed the novelty archive with the Alpha101 books on the train panel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alphagym.panel import Panel
from alphagym.params import Params
from alphagym.tracking import StageRun
from alphagym.verifier.loading import seed_archive


def archive(params: Params, deps: dict[str, Path], outs: dict[str, Path], run: StageRun) -> dict[str, Any]:
    built, stats = seed_archive(Panel.read_parquet(deps["train"]), params)
    built.save(outs["archive"])
    run.log_metrics({"archive_rows": len(built), **stats})
    return {"archive_rows": len(built), **stats}
