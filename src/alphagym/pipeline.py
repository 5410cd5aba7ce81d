"""The stage table: the one description of the DAG that Snakemake and DVC both use.

Snakemake rules (workflow/rules/*.smk) read their inputs, outputs and commands from here; `alphagym dag
--write-dvc` renders dvc.yaml from here, and a test fails when the committed dvc.yaml drifts from it.
Each stage declares whether it may read the holdout; a test checks the DAG against that.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from alphagym.config import results_dir

# Stages allowed to read holdout data (directly or through any upstream output).
HOLDOUT_READERS = frozenset({"probe", "books", "report"})


@dataclass(frozen=True)
class Stage:
    name: str
    cmd: str
    deps: dict[str, str]                 # role -> data path (Snakemake input / DVC dep)
    outs: dict[str, str]                 # role -> path (Snakemake output / DVC out)
    params: tuple[str, ...]              # params.yaml keys the stage reads
    code: tuple[str, ...] = ()           # source folders: DVC deps (Snakemake reruns on code via its own tracking)
    metrics: tuple[str, ...] = field(default=())


def stage_table(params: dict[str, Any]) -> dict[str, Stage]:
    r = results_dir(params).as_posix()
    profile = params.get("profile", "default")
    suffix = "" if profile == "default" else f" --set profile={profile}"
    stages = [
        Stage("download", "alphagym download" + suffix, {},
              {"prices": f"{r}/raw/prices.parquet", "meta": f"{r}/raw/meta.json",
               "truth": f"{r}/raw/ground_truth.json"},
              ("seed", "data", "simulator", "yfinance"), ("src/alphagym/data",)),
        Stage("panel", "alphagym panel" + suffix,
              {"prices": f"{r}/raw/prices.parquet", "meta": f"{r}/raw/meta.json"},
              {"train": f"{r}/panel/train.parquet", "holdout": f"{r}/panel/holdout.parquet",
               "repairs": f"{r}/panel/repairs.json", "summary": f"{r}/panel/summary.json"},
              ("data",), ("src/alphagym/data",), (f"{r}/panel/summary.json",)),
        Stage("archive", "alphagym archive" + suffix, {"train": f"{r}/panel/train.parquet"},
              {"archive": f"{r}/verifier/archive.npz"}, ("dsl", "verifier"),
              ("src/alphagym/verifier", "src/alphagym/engine", "src/alphagym/dsl")),
        Stage("world_model", "alphagym world-model" + suffix, {"train": f"{r}/panel/train.parquet"},
              {"model": f"{r}/world_model/model.pt", "worlds": f"{r}/world_model/worlds",
               "gates": f"{r}/world_model/gates.json"}, ("seed", "worldmodel", "stylized_tolerance"),
              ("src/alphagym/worldmodel",), (f"{r}/world_model/gates.json",)),
    ]
    return {s.name: s for s in stages}


def final_targets(params: dict[str, Any]) -> list[str]:
    """What `snakemake` with no target builds: every stage's outputs."""
    return [p for s in stage_table(params).values() for p in s.outs.values()]


def dvc_yaml(params: dict[str, Any]) -> str:
    stages: dict[str, Any] = {}
    for s in stage_table(params).values():
        body: dict[str, Any] = {"cmd": s.cmd}
        deps = list(s.deps.values()) + list(s.code)
        if deps:
            body["deps"] = deps
        body["params"] = ["profile", "profiles", *s.params]   # a profile changes the effective params
        outs = [p for p in s.outs.values() if p not in s.metrics]
        body["outs"] = outs
        if s.metrics:
            body["metrics"] = [{m: {"cache": False}} for m in s.metrics]
        stages[s.name] = body
    header = "# Generated from src/alphagym/pipeline.py by `alphagym dag --write-dvc`; do not edit by hand.\n"
    return header + yaml.safe_dump({"stages": stages}, sort_keys=False, width=110)


def upstream_outputs(table: dict[str, Stage]) -> dict[str, set[str]]:
    """For each stage, every path it reads directly or through any upstream stage."""
    producer = {p: s.name for s in table.values() for p in s.outs.values()}
    memo: dict[str, set[str]] = {}

    def reads(name: str) -> set[str]:
        if name not in memo:
            direct = set(table[name].deps.values())
            memo[name] = set(direct)
            for p in direct:
                if p in producer:
                    memo[name] |= reads(producer[p])
        return memo[name]

    return {name: reads(name) for name in table}
