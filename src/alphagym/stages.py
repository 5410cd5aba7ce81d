"""Run one stage of the stage table: the only caller of stage functions.

A stage function has the signature `fn(params, deps, outs, run) -> dict`: `params` is a view holding only
the keys its row declares, `deps` and `outs` map roles to the paths the row declares, `run` logs to MLflow.
It returns a small summary for the CLI to print. Stage functions live in each area's `stage.py`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from alphagym.config import ParamsView, get
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
        if not Path(path).exists():
            hint = f"; run `alphagym {producer[path].command}` first" if path in producer else ""
            raise DataError("missing_input", f"stage {key!r} needs its input {role!r}, not found{hint}", file=path)
    for role, path in stage.outs.items():
        (Path(path) if role in stage.directories else Path(path).parent).mkdir(parents=True, exist_ok=True)
    view = ParamsView(params, stage.params, key, reads=reads)
    logged = {k: get(params, k) for k in stage.params}
    with stage_run(key, params, logged) as run:
        return resolve(stage.func)(view, stage.paths("deps"), stage.paths("outs"), run)
