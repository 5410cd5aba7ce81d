"""The stage table: the one description of the DAG. Snakemake, DVC, the CLI and the stage dispatcher read it;
the areas below them take the paths they are handed (an import-linter layer keeps them from reading it).

Each row declares a stage: the function that runs it, its inputs and outputs (by role), the params keys it
reads and the package code it runs. Nothing else builds a result path:
- `alphagym.stages.run_stage` hands the stage function its paths from here and a view of the params that
  holds only the declared keys (reading any other key is an error);
- `workflow/rules/stages.smk` defines one Snakemake rule per row, with the declared params' values, a hash of
  the declared code and the row's spec hash as rule `params`, so `snakemake` reruns a stage whose params,
  code or spec changed;
- `dvc_yaml` renders dvc.yaml and `specs_yaml` workflow/stage_specs.yaml (`alphagym dag --write-dvc
  dvc.yaml` writes both); a test fails when either drifts.

A stage reruns only for what it runs. Its code deps are its own modules (and the dispatcher's, COMMON_CODE),
not the whole of params.py and pipeline.py: what it depends on in those two files is its spec
(`stage_spec`), its own row of this table and the JSON schema of the params sections it declares. The spec's
hash is a DVC params dependency on its own key of workflow/stage_specs.yaml and part of the Snakemake rule's
code param, so editing the description of a `Probe` field reruns the probe (and what reads its outputs),
and adding a recipe field reruns the stages that declare `rl.recipe`, nothing upstream of them.
A family of stages (one per item of a params list, e.g. the ladder's rungs) is one row with `family` set:
Snakemake expands it through a wildcard, DVC through `foreach`.

Each stage declares whether it may read the holdout; tests derive the holdout boundary from both DAGs.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from alphagym.config import get, results_dir, to_builtin
from alphagym.rungs import REPLICA, chain, resolve_rung, split_replica

__all__ = ["REPLICA", "split_replica"]      # the ladder's item names, re-exported for the stage table's users

# Stages allowed to read holdout data (directly or through any upstream output).
HOLDOUT_READERS = frozenset({"probe", "books", "report"})

# Code every stage runs through `alphagym.stages.run_stage`, besides its own: the loader and the dispatcher.
# params.py and pipeline.py are not here: a stage depends on them through its spec (`stage_spec`).
COMMON_CODE = ("src/alphagym/config.py", "src/alphagym/stages.py", "src/alphagym/artifacts.py",
               "src/alphagym/runtime.py")
# Each row's spec hash, keyed by the row's name: a DVC params file (rendered with dvc.yaml, kept in git).
SPECS = "workflow/stage_specs.yaml"
RUNGS_CODE = "src/alphagym/rungs.py"      # rung resolution: declared by the stages that resolve rungs


@dataclass(frozen=True)
class Family:
    """A stage repeated over the items of a params list; `{item}` in paths and the command is the item."""

    key: str                 # dotted params key of the list of items (names) or of a mapping name -> block
    wildcard: str            # Snakemake wildcard name and CLI option, e.g. "rung" (-> `--rung NAME`)
    replicas: str | None = None   # dotted key of a default replica count (seeds); an item's block's own
                                  # `seeds` overrides it. Replica k > 0 of item NAME is the item `NAME-sK`.
    blocks: str | None = None     # dotted key of the mapping name -> block when `key` is a list of names
    # `{chain}` in a params key: one key per block on the item's chain of `parent`s (itself first, then its
    # parent, ... while the parent is a block): a rung's recipe folds its ancestors' `set`s


RUNGS = Family("rl.ladder", "rung", replicas="rl.seeds", blocks="rl.rungs")   # the ladder's rungs and replicas


@dataclass(frozen=True)
class Stage:
    name: str
    func: str                            # "module:function" of the stage function
    deps: dict[str, str]                 # role -> data path (Snakemake input / DVC dep)
    outs: dict[str, str]                 # role -> path (Snakemake output / DVC out)
    params: tuple[str, ...]              # dotted params keys the stage reads (nothing else is visible to it)
    code: tuple[str, ...]                # source files and folders it runs (DVC deps; a Snakemake params hash)
    metrics: tuple[str, ...] = ()        # roles of small JSON outputs: DVC metrics, kept in git, not cached
    directories: tuple[str, ...] = ()    # roles of outputs that are folders
    threads: int = 1                     # cores the stage uses (Snakemake schedules by it)
    threads_key: str | None = None       # dotted params key holding the stage's cores (replaces `threads`)
    threads_of_rung: bool = False        # a rung family member: its cores are its recipe's thread budget
                                         # (`rung_threads`), so Snakemake runs as many rungs at once as the
                                         # cores hold
    priority: int = 0                    # Snakemake starts the ready job of highest priority first: a finished
                                         # rung's probe and books (minutes) before the next rung's training
                                         # (most of an hour), so each rung's results appear when it ends
    priority_of_rung: bool = False       # a rung's training: `rung_priority`, the longest rungs first (below
                                         # every probe and books priority)
    work: dict[str, str] | None = None   # role -> folder kept between runs for resumable state (checkpoints of a
                                         # killed run): not an output, never removed by run_stage; the stage
                                         # checks what it finds there and discards what does not match
    family: Family | None = None
    gather: Family | None = None         # a stage that reads every member of a family: `{item}` in its deps
                                         # is expanded over the items, the role becoming `role@item`
    item: str | None = None              # the item of an expanded family member
    profile_arg: str = ""                # " --set profile=NAME" when a profile is selected
    help: str = ""                       # one line for `alphagym --help`

    @property
    def command(self) -> str:
        """The CLI subcommand: the stage name with dashes."""
        return self.name.replace("_", "-")

    @property
    def cmd(self) -> str:
        opt = f" --{self.family.wildcard} {self.item}" if self.family and self.item is not None else ""
        return f"alphagym {self.command}{opt}{self.profile_arg}"

    @property
    def key(self) -> str:
        """Unique name of a stage or a family member (DVC's `name@item`)."""
        return f"{self.name}@{self.item}" if self.item is not None else self.name

    def paths(self, which: str) -> dict[str, Path]:
        return {role: Path(p) for role, p in {"deps": self.deps, "outs": self.outs}[which].items()}


def table_rows(r: str = "results", profile_arg: str = "", rl_policy: str = "tiny") -> list[Stage]:
    """The rows, with result paths under `r` (families unexpanded); the RL rungs start from the SFT policy
    of backend `rl_policy` (`rl.policy`)."""
    data = ("src/alphagym/data", "src/alphagym/panel.py")
    engine = ("src/alphagym/engine", "src/alphagym/dsl", "src/alphagym/kernels.py", "src/alphagym/panel.py")
    policy = ("src/alphagym/policy", "src/alphagym/briefs", "src/alphagym/verifier", "src/alphagym/plotting.py",
              *engine)
    rl = f"{r}/rl/{rl_policy}"           # rungs of each backend apart: the smollm2 profile keeps the tiny rungs
    probe, books, rep = f"{r}/probe/{rl_policy}", f"{r}/books/{rl_policy}", f"{r}/report/{rl_policy}"
    rows = [
        Stage("download", "alphagym.data.stage:download", {},
              {"prices": f"{r}/raw/prices.parquet", "meta": f"{r}/raw/meta.json",
               "truth": f"{r}/raw/ground_truth.json"},
              ("seed", "data", "simulator", "yfinance"), data,
              help="fetch or simulate raw daily prices (data.source)"),
        Stage("panel", "alphagym.data.stage:panel",
              {"prices": f"{r}/raw/prices.parquet", "meta": f"{r}/raw/meta.json"},
              {"train": f"{r}/panel/train.parquet", "holdout": f"{r}/panel/holdout.parquet",
               "repairs": f"{r}/panel/repairs.json", "summary": f"{r}/panel/summary.json"},
              ("data",), data, metrics=("summary",),
              help="validate, adjust and split the raw prices into train and holdout panels"),
        Stage("archive", "alphagym.verifier.stage:archive", {"train": f"{r}/panel/train.parquet"},
              {"archive": f"{r}/verifier/archive.npz"},
              ("dsl.limits", "verifier.book", "verifier.costs.train", "verifier.cpcv", "verifier.novelty_pnl"),
              ("src/alphagym/verifier", *engine),
              help="seed the novelty archive with the Alpha101 books on the train panel"),
        Stage("world_model", "alphagym.worldmodel.stage:world_model", {"train": f"{r}/panel/train.parquet"},
              {"model": f"{r}/world_model/model.pt", "worlds": f"{r}/world_model/worlds",
               "gates": f"{r}/world_model/gates.json"},
              ("seed", "worldmodel", "stylized_tolerance", "dsl.limits", "verifier.book", "verifier.costs.train",
               "verifier.cpcv", "verifier.jepa_stress.enabled", "verifier.jepa_stress.sessions"),
              ("src/alphagym/worldmodel", "src/alphagym/data/stylized.py", *engine),
              metrics=("gates",), directories=("worlds",), threads_key="worldmodel.threads",
              help="train the JEPA world model, write stress worlds and the gate report"),
        Stage("briefs", "alphagym.briefs.stage:briefs", {},
              {"train": f"{r}/briefs/train.jsonl", "holdout": f"{r}/briefs/holdout.jsonl",
               "summary": f"{r}/briefs/summary.json"},
              # the formula language (the catalogue is validated against its operator and field names, and a
              # drawn brief refused when its contract has a `contradiction`) but not the engine
              ("seed", "briefs"), ("src/alphagym/briefs", *engine[1:]), metrics=("summary",),
              help="draw the training and holdout design briefs from the catalogue"),
        Stage("corpus", "alphagym.policy.stage:corpus",
              {"train": f"{r}/panel/train.parquet", "briefs_summary": f"{r}/briefs/summary.json"},
              {"corpus": f"{r}/sft/corpus.parquet", "summary": f"{r}/sft/corpus_summary.json"},
              ("seed", "dsl", "verifier", "briefs.horizon_tolerance", "sft.corpus"),
              policy, metrics=("summary",),
              help="score sampled and mutated formulas and pair each valid one with a training brief it satisfies"),
        Stage("sft", "alphagym.policy.stage:sft",
              {"train": f"{r}/panel/train.parquet", "corpus": f"{r}/sft/corpus.parquet",
               "briefs_train": f"{r}/briefs/train.jsonl", "briefs_holdout": f"{r}/briefs/holdout.jsonl"},
              {"policy": f"{r}/sft/{{item}}/policy", "report": f"{r}/sft/{{item}}/report.json",
               "answers": f"{r}/sft/{{item}}/holdout_answers.parquet", "curve": f"{r}/sft/{{item}}/curve.png"},
              ("seed", "dsl", "verifier", "briefs.horizon_tolerance", "policy", "sft.eval", "sft.{item}"),
              policy,
              metrics=("report",), directories=("policy",), threads_key="policy.threads",
              family=Family("sft.policies", "policy"),
              help="warm a policy up on the corpus (one stage per backend in sft.policies)"),
        Stage("filter", "alphagym.policy.stage:filter_briefs",
              {"train": f"{r}/panel/train.parquet", "briefs_train": f"{r}/briefs/train.jsonl",
               "policy": f"{r}/sft/tiny/policy"},
              {"kept": f"{r}/filter/briefs.jsonl", "table": f"{r}/filter/solve_rates.parquet",
               "report": f"{r}/filter/report.json", "plot": f"{r}/filter/solve_rates.png"},
              ("seed", "dsl", "verifier", "briefs.horizon_tolerance", "policy", "filter"),
              policy,
              metrics=("report",), threads_key="policy.threads",
              help="keep the training briefs the SFT policy solves in some but not all tries"),
        Stage("train", "alphagym.rl.stage:train",
              {"train": f"{r}/panel/train.parquet", "archive": f"{r}/verifier/archive.npz",
               "gates": f"{r}/world_model/gates.json", "worlds": f"{r}/world_model/worlds",
               "briefs_train": f"{r}/briefs/train.jsonl", "briefs_filtered": f"{r}/filter/briefs.jsonl",
               "policy": f"{r}/sft/{rl_policy}/policy"},
              {"checkpoints": f"{rl}/{{item}}/checkpoints", "log": f"{rl}/{{item}}/log.jsonl",
               "summary": f"{rl}/{{item}}/summary.json", "curves": f"{rl}/{{item}}/curves.png"},
              ("seed", "dsl", "verifier", "briefs.horizon_tolerance", "policy", "rl.policy", "rl.recipe",
               "rl.rungs.{chain}"),
              ("src/alphagym/rl", RUNGS_CODE, *policy),
              metrics=("summary",), directories=("checkpoints",), threads_of_rung=True, family=RUNGS,
              priority_of_rung=True, work={"work": f"{rl}/{{item}}/work"},
              help="train one rung of the RL ladder from the SFT policy (one stage per rung in rl.ladder)"),
        Stage("probe", "alphagym.probe.stage:probe",
              {"train": f"{r}/panel/train.parquet", "holdout": f"{r}/panel/holdout.parquet",
               "truth": f"{r}/raw/ground_truth.json",
               "briefs_holdout": f"{r}/briefs/holdout.jsonl", "policy": f"{r}/sft/{rl_policy}/policy",
               "checkpoints": f"{rl}/{{item}}/checkpoints"},
              {"answers": f"{probe}/{{item}}/answers.parquet", "table": f"{probe}/{{item}}/checkpoints.parquet",
               "summary": f"{probe}/{{item}}/summary.json"},
              ("seed", "dsl", "verifier", "briefs.horizon_tolerance", "policy", "rl.policy", "rl.recipe",
               "rl.rungs.{chain}", "probe", "books.min_turnover", "books.max_corr"),
              ("src/alphagym/probe", "src/alphagym/rl/checkpoints.py", RUNGS_CODE, "src/alphagym/books", *policy),
              metrics=("summary",), threads_of_rung=True, family=RUNGS, priority=RUNG_PRIORITY + 1,
              help="answer the holdout briefs greedily at every checkpoint of a rung; select on train CPCV, "
                   "then score the holdout year"),
        Stage("books", "alphagym.books.stage:books",
              {"train": f"{r}/panel/train.parquet", "holdout": f"{r}/panel/holdout.parquet",
               "answers": f"{probe}/{{item}}/answers.parquet", "probe": f"{probe}/{{item}}/summary.json",
               "checkpoints": f"{rl}/{{item}}/checkpoints"},
              {"books": f"{books}/{{item}}/books.json", "daily": f"{books}/{{item}}/daily.parquet"},
              ("dsl", "verifier", "books"),
              ("src/alphagym/books", *engine, "src/alphagym/verifier"),
              metrics=("books",), family=RUNGS, priority=RUNG_PRIORITY + 2,
              help="the shipped checkpoint's equal-weight and correlation-capped books, and the rung's archive "
                   "book, on the holdout year"),
        Stage("report", "alphagym.report.stage:report",
              {"gates": f"{r}/world_model/gates.json", "briefs_holdout": f"{r}/briefs/holdout.jsonl",
               "sft_report": f"{r}/sft/{rl_policy}/report.json",
               "log": f"{rl}/{{item}}/log.jsonl", "train": f"{rl}/{{item}}/summary.json",
               "checkpoints": f"{rl}/{{item}}/checkpoints",
               "answers": f"{probe}/{{item}}/answers.parquet", "table": f"{probe}/{{item}}/checkpoints.parquet",
               "probe": f"{probe}/{{item}}/summary.json",
               "books": f"{books}/{{item}}/books.json", "daily": f"{books}/{{item}}/daily.parquet"},
              {"report": f"{rep}/report.md", "json": f"{rep}/report.json", "pairs": f"{rep}/pairs.parquet",
               "figures": f"{rep}/figures", "adapter": f"{rep}/shipped_adapter", "summary": f"{rep}/summary.json"},
              ("seed", "verifier.priorities", "verifier.jepa_stress", "worldmodel", "rl", "books", "policy.decoding",
               "probe.reading_samples", "probe.selector"),
              ("src/alphagym/report", "src/alphagym/rl/plots.py", RUNGS_CODE, "src/alphagym/plotting.py",
               "src/alphagym/books/ship.py", "src/alphagym/books/metrics.py", "src/alphagym/books/columns.py",
               "src/alphagym/briefs", "src/alphagym/verifier/channels.py", *engine),
              metrics=("summary",), directories=("figures", "adapter"), gather=RUNGS,
              help="the ladder report: tables, plots, JSON export, verified pairs and the shipped adapter"),
    ]
    return [Stage(**{**s.__dict__, "profile_arg": profile_arg}) for s in rows]


def _items(params: Mapping[str, Any], family: Family) -> list[str]:
    value = get(params, family.key)
    names = [str(v) for v in (list(value) if isinstance(value, Mapping) else value)]
    if family.replicas is None:
        return names
    default = int(get(params, family.replicas))
    blocks = value if isinstance(value, Mapping) else (get(params, family.blocks) if family.blocks else {})
    out = []
    for n in names:
        block = blocks.get(n, {})
        count = int(block.get("seeds") or default)
        out += [n, *(f"{n}-s{k}" for k in range(1, count))]
    return out


def stage_rows(params: Mapping[str, Any], rows: list[Stage] | None = None) -> list[Stage]:
    """The table's rows as declared (families unexpanded, `{item}` still in their paths)."""
    profile = params.get("profile", "default")
    arg = "" if profile == "default" else f" --set profile={profile}"
    rl_policy = str(get(params, "rl.policy")) if "rl" in params else "tiny"
    rows = rows if rows is not None else table_rows(results_dir(params).as_posix(), arg, rl_policy)
    rows = [Stage(**{**s.__dict__, "threads": int(get(params, s.threads_key))}) if s.threads_key else s
            for s in rows]
    return [_gathered(s, params) if s.gather else s for s in rows]


def _gathered(stage: Stage, params: Mapping[str, Any]) -> Stage:
    assert stage.gather is not None
    deps: dict[str, str] = {}
    for role, path in stage.deps.items():
        if "{item}" not in path:
            deps[role] = path
            continue
        for i in _items(params, stage.gather):
            deps[f"{role}@{i}"] = path.replace("{item}", i)
    return Stage(**{**stage.__dict__, "deps": deps})


RUNG_PRIORITY = 10          # training priorities lie in 0..RUNG_PRIORITY; probe and books lie above them


def rung_threads(params: Mapping[str, Any], item: str) -> int:
    """Cores a rung (or its replica `RUNG-sK`) uses (`ResolvedRung.threads`)."""
    return resolve_rung(params, item).threads


# Under brief decoding a step of a rung that samples under the grammar alone costs about 0.55 of one under the
# brief decoder (median step 1.49-1.71 s against 2.85-3.62 s, two runs side by side in the `make run` of
# d640287, docs/notes/runs.md). Here, not in `rungs.py`: only the order of the rungs depends on it, and
# `rungs.py` is code of the stages that train.
GRAMMAR_STEP_COST = 0.55


def rung_cost(params: Mapping[str, Any], item: str) -> float:
    """A rung's expected training time in LoRA steps under the brief decoder (`ResolvedRung.cost`), times
    GRAMMAR_STEP_COST when it samples under the grammar alone while `policy.decoding` is `brief`."""
    rung = resolve_rung(params, item)
    cheap = rung.recipe.decoding == "grammar" and get(params, "policy.decoding") == "brief"
    return rung.cost * (GRAMMAR_STEP_COST if cheap else 1.0)


def rung_priority(params: Mapping[str, Any], item: str) -> int:
    """A rung's training priority, 0..RUNG_PRIORITY, in proportion to its expected time (`rung_cost`): the
    longest rungs start first. Snakemake fills the free cores with the ready rungs in this order, so a long
    (DoRA, brief-decoded) rung does not end up running alone at the end of the ladder while a short
    grammar-only one could have (longest-processing-time-first scheduling)."""
    costs = [rung_cost(params, i) for i in _items(params, RUNGS)]
    return round(RUNG_PRIORITY * rung_cost(params, item) / max(costs, default=1.0))


def chain_of(params: Mapping[str, Any] | None, family: Family | None, item: str) -> list[str]:
    """`item` and the blocks on its chain of `parent`s (`Family.blocks`; `rungs.chain`), nearest first: the
    rungs whose `set` a rung's recipe folds (`rungs.recipe_of`)."""
    if params is None or family is None or family.blocks is None:
        return [item]
    return chain(get(params, family.blocks), item)


def expand(stage: Stage, item: str, params_item: str | None = None,
           params: Mapping[str, Any] | None = None, chain: list[str] | None = None) -> Stage:
    """A family member: `{item}` in paths and the command is the member, in params keys the item it
    replicates (`params_item`; by default the member's item without its replica suffix); a key with `{chain}`
    is one key per name of `chain` (by default the item's chain of parents, `chain_of`)."""
    sub = {k: v.replace("{item}", item) for k, v in stage.deps.items()}
    out = {k: v.replace("{item}", item) for k, v in stage.outs.items()}
    work = {k: v.replace("{item}", item) for k, v in stage.work.items()} if stage.work else None
    if params_item is None:
        params_item = split_replica(item)[0] if stage.family and stage.family.replicas else item
    if chain is None:
        chain = chain_of(params, stage.family, params_item)
    keys = tuple(dict.fromkeys(k.replace("{item}", params_item).replace("{chain}", c)
                               for k in stage.params for c in (chain if "{chain}" in k else [""])))
    threads = rung_threads(params, item) if stage.threads_of_rung and params is not None else stage.threads
    priority = rung_priority(params, item) if stage.priority_of_rung and params is not None else stage.priority
    return Stage(**{**stage.__dict__, "deps": sub, "outs": out, "params": keys, "item": item, "work": work,
                    "threads": threads, "priority": priority})


def stage_table(params: Mapping[str, Any], rows: list[Stage] | None = None) -> dict[str, Stage]:
    """Every stage and every family member, by key (`name` or `name@item`)."""
    out: dict[str, Stage] = {}
    for s in stage_rows(params, rows):
        members = [expand(s, i, params=params) for i in _items(params, s.family)] if s.family else [s]
        out.update({m.key: m for m in members})
    return out


def verifier_inputs(params: Mapping[str, Any], window: str) -> dict[str, Path]:
    """The files a verifier of `window` reads (`verifier.loading.load_verifier`; the worlds as their folder),
    from the rows that write them. The tools that score outside a stage (`score`, `serve`, `propose`) pass
    these down, and whatever caches a verifier (`alphagym serve`) watches exactly these."""
    table = stage_table(params)
    if window == "holdout":
        return {"panel": Path(table["panel"].outs[window])}
    wm = table["world_model"].paths("outs")
    return {"panel": Path(table["panel"].outs[window]), "gates": Path(wm["gates"]), "worlds": Path(wm["worlds"]),
            "archive": Path(table["archive"].paths("outs")["archive"])}


def final_targets(params: Mapping[str, Any], rows: list[Stage] | None = None) -> list[str]:
    """What `snakemake` with no target builds: every stage's outputs."""
    return [p for s in stage_table(params, rows).values() for p in s.outs.values()]


def params_values(params: Mapping[str, Any], keys: tuple[str, ...]) -> dict[str, str]:
    """The declared keys' values as canonical JSON-like text (Snakemake compares rule params as text)."""
    import json

    return {k: json.dumps(to_builtin(get(params, k)), sort_keys=True) for k in ("profile", *keys)}


@lru_cache(maxsize=64)
def code_hash(paths: tuple[str, ...], root: str = ".") -> str:
    """sha256 over the declared code's .py files (path and content): a content hash, like DVC's."""
    h = hashlib.sha256()
    base = Path(root)
    for p in paths:
        target = base / p
        files = sorted(target.rglob("*.py")) if target.is_dir() else [target]
        for f in files:
            if f.is_file() and "__pycache__" not in f.parts:
                h.update(f.relative_to(base).as_posix().encode())
                h.update(f.read_bytes())
    return h.hexdigest()[:16]


def params_schema(key: str) -> dict[str, Any]:
    """The JSON schema of the params at a dotted key of `Params` (its type, range and description, and every
    field below it). A key under a mapping field (`rl.rungs.{chain}`, `sft.{item}`) has the schema of the
    mapping or model that holds it: every item's schema is in there."""
    from typing import Annotated

    from pydantic import BaseModel, TypeAdapter

    from alphagym.errors import ConfigError
    from alphagym.params import Params

    model: type[BaseModel] | None = Params
    field = None
    for part in key.split("."):
        if model is None or part in ("{item}", "{chain}"):
            break
        if part not in model.model_fields:
            raise ConfigError(f"the stage table declares the parameter {key!r}, which params.py does not define")
        field = model.model_fields[part]
        ann = field.annotation
        model = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    if field is None:
        return Params.model_json_schema()
    return TypeAdapter(Annotated[field.annotation, field]).json_schema()


def stage_spec(s: Stage) -> dict[str, Any]:
    """What a stage's outputs depend on in params.py and in this table, besides the values of its params, its
    code and its data (which DVC and Snakemake track themselves): its function, its roles, its declared
    params keys and code, and the schema of each declared params key. The same for every profile (paths are
    not in it) and for every member of a family (the row, unexpanded)."""
    deps = sorted({role.split("@")[0] for role in s.deps})      # a gathering stage's roles, per family member
    return {"func": s.func, "deps": deps, "outs": sorted(s.outs), "directories": sorted(s.directories),
            "work": sorted(s.work or {}), "params": list(s.params), "code": [*COMMON_CODE, *s.code],
            "schema": {k: params_schema(k) for k in s.params}}


def spec_hash(s: Stage) -> str:
    """sha256 of the stage's spec as canonical JSON (16 hex digits)."""
    import json

    return hashlib.sha256(json.dumps(stage_spec(s), sort_keys=True).encode()).hexdigest()[:16]


def specs_yaml(rows: list[Stage] | None = None) -> str:
    """workflow/stage_specs.yaml: each row's spec hash under its name (DVC reads its own key per stage)."""
    rows = rows if rows is not None else table_rows()
    header = ("# Generated from src/alphagym/pipeline.py by `alphagym dag --write-dvc`; do not edit by hand.\n"
              "# Each stage's spec hash (pipeline.stage_spec: its row of the stage table and the schema of the params\n"
              "# it declares); each DVC stage depends on its own key.\n")
    return header + yaml.safe_dump({s.name: spec_hash(s) for s in rows}, sort_keys=False)


def profile_block(params_file: str | Path, profile: str) -> dict[str, Any]:
    """The block of `profiles.<profile>` as params.yaml holds it (the default profile has none)."""
    from alphagym.config import yaml_load

    if profile == "default":
        return {}
    raw = yaml_load(Path(params_file).read_text()) or {}
    return dict((raw.get("profiles") or {}).get(profile) or {})


def _profile_deps(s: Stage, profile: str, block: Mapping[str, Any], sentinel: bool) -> list[str]:
    """The keys of the selected profile's block that a stage depends on under DVC. The first stage of the
    table (the sentinel, seconds to run and deterministic) depends on the whole block, so any edit of it runs
    that stage, whose command checks that dvc.yaml is still this rendering (`check_rendering`): a key the
    block gains in a section it did not have is then an error that says to render again, not a stale stage.
    Every other stage depends on the deepest part of the block on the path of each key it declares (the
    section `profiles.smoke.rl` for `rl.rungs.${item.of}`), so a profile edit reruns the stages that read it."""
    if profile == "default":
        return []
    if sentinel:
        return [f"profiles.{profile}"]
    out: list[str] = []
    for key in s.params:
        node: Any = block
        path: list[str] = []
        for part in key.split("."):
            if "${" in part or not isinstance(node, Mapping) or part not in node:
                break
            node, path = node[part], [*path, part]
        if path:
            out.append(".".join(path))
    kept = [k for k in dict.fromkeys(out) if not any(k.startswith(o + ".") for o in out)]
    return [f"profiles.{profile}.{k}" for k in kept]


def _dvc_body(s: Stage, profile: str, block: Mapping[str, Any], sentinel: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"cmd": s.cmd}
    deps = list(s.deps.values()) + list(COMMON_CODE) + list(s.code)
    body["deps"] = deps
    # the selected profile's block changes the effective params; the default profile reads no profile block
    body["params"] = ["profile", *_profile_deps(s, profile, block, sentinel), *s.params, {SPECS: [s.name]}]
    body["outs"] = [p for role, p in s.outs.items() if role not in s.metrics]
    if s.metrics:             # cached like every output: the remote carries what a downstream stage reads
        body["metrics"] = [s.outs[m] for m in s.metrics]
    if sentinel:
        # the sentinel reruns on any edit of the profile block; DVC keeps its outputs in place (`persist`) so
        # that the stage, writing the same bytes again, leaves their mtimes as they were (`stages._run_locked`)
        # and Snakemake, which plans by mtime, does not see every stage below it as out of date
        for key in ("outs", "metrics"):
            if key in body:
                body[key] = [{p: {"persist": True}} for p in body[key]]
    return body


def dvc_yaml(params: Mapping[str, Any], rows: list[Stage] | None = None,
             params_file: str | Path = "params.yaml") -> str:
    """dvc.yaml for the selected profile of `params` (read from `params_file`, whose profile block it names)."""
    stages: dict[str, Any] = {}
    profile = str(params.get("profile", "default"))
    block = profile_block(params_file, profile)
    for i, s in enumerate(stage_rows(params, rows)):
        if s.family is None:
            stages[s.name] = _dvc_body(s, profile, block, i == 0)
            continue
        members = _items(params, s.family)
        if s.family.replicas is None:
            stages[s.name] = {"foreach": members, "do": _dvc_body(expand(s, "${item}"), profile, block, i == 0)}
        else:        # a dict: the member names the paths (${key}), the item it replicates the params
            # `of` is the item it replicates; `up1`, `up2`, ... its chain of parents, padded with `of` to one
            # length (DVC's params list is one template for every member; a repeated key counts once)
            chains = {m: chain_of(params, s.family, split_replica(m)[0]) for m in members}
            depth = max((len(c) for c in chains.values()), default=1)
            foreach = {m: _Flow(of=c[0], **{f"up{k}": (c + [c[0]] * depth)[k] for k in range(1, depth)})
                       for m, c in chains.items()}
            names = ["${item.of}", *(f"${{item.up{k}}}" for k in range(1, depth))]
            stages[s.name] = {"foreach": foreach,
                              "do": _dvc_body(expand(s, "${key}", "${item.of}", chain=names), profile, block, i == 0)}
    header = "# Generated from src/alphagym/pipeline.py by `alphagym dag --write-dvc`; do not edit by hand.\n"
    return header + yaml.dump({"stages": stages}, Dumper=_Dumper, sort_keys=False, width=110)


class _Flow(dict):
    """A mapping dvc.yaml writes on one line (a family member's names)."""


class _Dumper(yaml.SafeDumper):
    pass


_Dumper.add_representer(_Flow, lambda d, v: d.represent_mapping("tag:yaml.org,2002:map", v, flow_style=True))


def check_rendering(params: Mapping[str, Any], params_file: str | Path, root: str | Path) -> None:
    """Under DVC (a stage command `dvc repro` runs): refuse to run when the repository's dvc.yaml or
    workflow/stage_specs.yaml is not what `alphagym dag --write-dvc` renders now from `params_file` for this
    profile. DVC decides what to rerun from the rendered deps; a stale rendering (a profile block that gained
    a section, a stage table or params.py edited without rendering) would let a stage that should rerun
    keep its old outputs."""
    from alphagym.errors import ConfigError

    base = Path(root)
    profile = str(params.get("profile", "default"))
    how = "`alphagym dag --write-dvc dvc.yaml" + ("" if profile == "default" else f" --set profile={profile}") + "`"
    for path, want in ((base / "dvc.yaml", dvc_yaml(params, params_file=params_file)),
                       (base / SPECS, specs_yaml())):
        if not path.is_file() or path.read_text() != want:
            raise ConfigError(f"{path} is not the current rendering of {params_file} (profile {profile!r}) and the "
                              f"stage table, so DVC may have skipped a stage that should rerun: render it with {how}, "
                              "then run `dvc repro` (or `dvc exp run`) again")


def lock_mismatch(params: Mapping[str, Any], lock: str | Path) -> str | None:
    """Why `lock` (a dvc.lock) does not record this profile's outputs, or None when its stages' outputs are the
    stage table's: a lock recorded for another profile names other paths (`results/smoke/...`), so `dvc pull`
    would fetch nothing for this one and every stage would still be planned. The lock's profile is read from
    the params it recorded."""
    from alphagym.config import yaml_load

    path = Path(lock)
    if not path.is_file():
        return f"{path} is missing: nothing was recorded to pull (run the pipeline, or check out a dvc.lock)"
    stages = (yaml_load(path.read_text()) or {}).get("stages") or {}
    table = stage_table(params)

    def recorded_profile(rec: Mapping[str, Any]) -> str:
        # a profile's dvc.yaml runs each stage with `--set profile=NAME`; params.yaml's own key stays `default`
        m = re.search(r"--set\s+profile=(\S+)", str(rec.get("cmd", "")))
        return m.group(1) if m else str(((rec.get("params") or {}).get("params.yaml") or {}).get("profile", "?"))

    mine = str(params.get("profile", "default"))
    for key, stage in table.items():
        rec = stages.get(key)
        if rec is None:
            continue
        got = sorted(str(o.get("path")) for o in rec.get("outs") or [])
        want = sorted(stage.outs.values())
        if got != want:
            theirs = recorded_profile(rec)
            return (f"{path} records the outputs of profile {theirs!r} ({', '.join(got[:2])}, ...), not those of "
                    f"profile {mine!r} ({', '.join(want[:2])}, ...): run `make pull PROFILE={theirs}`, or check out "
                    f"a dvc.lock recorded for {mine!r}")
        return None
    return f"{path} records none of the stages of profile {mine!r}: nothing to pull"


def upstream_outputs(table: dict[str, Stage]) -> dict[str, set[str]]:
    """For each stage, every path it reads directly or through any upstream stage."""
    producer = {p: key for key, s in table.items() for p in s.outs.values()}
    memo: dict[str, set[str]] = {}

    def reads(key: str) -> set[str]:
        if key not in memo:
            direct = set(table[key].deps.values())
            memo[key] = set(direct)
            for p in direct:
                if p in producer:
                    memo[key] |= reads(producer[p])
        return memo[key]

    return {key: reads(key) for key in table}

