"""Run one stage of the stage table: the only caller of stage functions.

A stage function has the signature `fn(params, deps, outs, run) -> dict`: `params` is a view holding only
the keys its row declares, `deps` and `outs` map roles to paths, `run` logs to MLflow. It returns a small
summary for the CLI to print. Stage functions live in each area's `stage.py`.

Outputs are all-or-nothing. The stage's previous outputs are removed before it starts, so a stage that
fails (or is killed) leaves none, and nothing downstream can run on stale files. The stage writes into a
staging folder of its own (unique per run, inside the results folder), and its outputs are moved to the
paths of the stage table only once the function has returned and every declared output exists.
A stage with a `work` folder (RL rungs) keeps its resumable state there across runs; it is handed to the
stage among its outputs, is not removed here, and the stage empties it once it has finished.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alphagym.config import ParamsView, get, results_dir
from alphagym.errors import ConfigError, DataError
from alphagym.pipeline import Stage, stage_table
from alphagym.tracking import stage_run


def resolve(func: str) -> Any:
    module, name = func.split(":")
    return vars(importlib.import_module(module))[name]


def find_stage(params: Mapping[str, Any], key: str, rows: list[Stage] | None = None) -> tuple[Stage, dict]:
    table = stage_table(params, rows)
    if key not in table:
        raise ConfigError(f"no stage {key!r} in the stage table (known: {sorted(table)})")
    return table[key], table


def run_stage(params: Mapping[str, Any], key: str, rows: list[Stage] | None = None,
              reads: set[str] | None = None) -> dict[str, Any]:
    stage, table = find_stage(params, key, rows)
    producer = {p: s for s in table.values() for p in s.outs.values()}
    for role, path in stage.deps.items():
        if stage.gather is not None and "@" in role:
            continue              # a gathering stage (the report) marks a family member whose files are missing
        if not Path(path).exists():
            hint = f"; run `alphagym {producer[path].command}` first" if path in producer else ""
            raise DataError("missing_input", f"stage {key!r} needs its input {role!r}, not found{hint}", file=path)
    for path in stage.outs.values():
        _remove(Path(path))
    staging_root = results_dir(params) / ".staging"
    staging_root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f"{key.replace('@', '_')}-", dir=staging_root))
    staged = {role: staging / role / Path(p).name for role, p in stage.outs.items()}
    for role, p in staged.items():
        (p if role in stage.directories else p.parent).mkdir(parents=True)
    view = ParamsView(params, stage.params, key, reads=reads)
    logged = {k: get(params, k) for k in stage.params}
    try:
        with stage_run(key, params, logged) as run:
            item = {"item": stage.item} if stage.item is not None else {}     # a family member learns its item
            work = {role: Path(p) for role, p in (stage.work or {}).items()}
            for w in work.values():
                w.mkdir(parents=True, exist_ok=True)
            summary = resolve(stage.func)(view, stage.paths("deps"), {**staged, **work}, run, **item)
        missing = [role for role, p in staged.items()
                   if not p.exists() or (role in stage.directories and not any(p.iterdir()))]
        if missing:
            raise DataError("missing_output", f"stage {key!r} returned without writing {missing}",
                            file=str(staging))
        for role, path in stage.outs.items():
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            staged[role].replace(path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {**summary, "outputs": dict(stage.outs)}


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
