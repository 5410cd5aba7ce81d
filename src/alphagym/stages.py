"""Run one stage of the stage table: the only caller of stage functions.

A stage function has the signature `fn(params, deps, outs, run) -> dict`: `params` is a view holding only
the keys its row declares, `deps` and `outs` map roles to paths, `run` logs to MLflow. It returns a small
summary for the CLI to print. Stage functions live in each area's `stage.py`.

Outputs are all-or-nothing. The stage's previous outputs are removed before it starts, so a stage that
fails (or is killed) leaves none, and nothing downstream can run on stale files. Before that, each input is
checked to exist and to be readable (`artifacts.check_readable`: a file cut short is found by its format): a
stage whose input is missing or damaged stops at once, naming it, with its previous outputs untouched (it has
not started, and its input's producer must run again first, which makes those outputs out of date anyway).
The stage writes into a staging folder of its own (unique per run, inside the results folder), and its
outputs are moved to the paths of the stage table only once the function has returned and every declared
output exists.
A stage with a `work` folder (RL rungs) keeps its resumable state there across runs; it is handed to the
stage among its outputs, is not removed here, and the stage empties it once it has finished.

One stage runs once at a time on one results folder: `run_stage` holds an advisory lock per stage key
(`<results>/.locks/<key>.lock`, released by the kernel when the process dies), and a second run of the same
stage stops with a `StageBusyError` naming the holder's pid. Snakemake keeps a second Snakemake run off the
same outputs with lock files of its own; this lock covers the CLI as well (`alphagym train --rung X`
twice). Staging folders left by a killed run (SIGKILL, power loss) are removed by the next run of any
stage: a folder whose stage's lock is free has no living owner.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from alphagym.artifacts import check_readable, sha256
from alphagym.config import ParamsView, get, results_dir
from alphagym.errors import ArtifactError, ConfigError, DataError, StageBusyError, WriteError
from alphagym.pipeline import COMMON_CODE, RUNGS, Stage, code_hash, split_replica, stage_table
from alphagym.runtime import configure_runtime
from alphagym.tracking import stage_run


def resolve(func: str) -> Any:
    module, name = func.split(":")
    return vars(importlib.import_module(module))[name]


def find_stage(params: Mapping[str, Any], key: str, rows: list[Stage] | None = None) -> tuple[Stage, dict]:
    table = stage_table(params, rows)
    if key not in table:
        raise ConfigError(unknown_stage(params, key, table))
    return table[key], table


def unknown_stage(params: Mapping[str, Any], key: str, table: Mapping[str, Stage]) -> str:
    """Why `key` is no stage of the table, in one line: a rung that is defined but not on the ladder says so;
    a family member (`train@NAME`) gets the closest names in its option's spelling (`--rung cispo_repo`) and
    the family's items; any other key the closest stage names, then the known ones."""
    family, _, item = key.partition("@")
    assert RUNGS.blocks is not None
    try:
        rungs, ladder = get(params, RUNGS.blocks) or {}, list(get(params, RUNGS.key) or [])
    except ConfigError:                   # a table without the ladder (a test's own rows)
        rungs, ladder = {}, []
    rung = split_replica(item)[0] if item else ""
    if family in {s.name for s in table.values() if s.family == RUNGS} and rung in rungs and rung not in ladder:
        return (f"rung {rung!r} is defined in {RUNGS.blocks} but not on the ladder {RUNGS.key} = {ladder}: add it "
                f"there (params.yaml or a profile) to run it")
    members = {s.item: s.family for s in table.values() if s.name == family and s.family is not None and s.item}
    if item and members:
        option = f"--{next(iter(members.values())).wildcard}"
        close = difflib.get_close_matches(item, list(members), n=3, cutoff=0.6)
        hint = f"; did you mean {' or '.join(f'{option} {c}' for c in close)}?" if close else ""
        return f"no {option} {item!r} for stage {family!r}{hint} (known: {', '.join(members)})"
    close = difflib.get_close_matches(key, list(table), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else ""
    return f"no stage {key!r} in the stage table{hint} (known: {sorted(table)})"


def run_stage(params: Mapping[str, Any], key: str, rows: list[Stage] | None = None,
              reads: set[str] | None = None) -> dict[str, Any]:
    configure_runtime()
    stage, table = find_stage(params, key, rows)
    producer = {p: s for s in table.values() for p in s.outs.values()}
    for role, path in stage.deps.items():
        if stage.gather is not None and "@" in role:
            continue              # a gathering stage (the report) marks a family member whose files are missing
        if not Path(path).exists():
            hint = f"; run `alphagym {producer[path].command}` first" if path in producer else ""
            raise DataError("missing_input", f"stage {key!r} needs its input {role!r}, not found{hint}", file=path)
    for role, path in stage.deps.items():
        if not Path(path).exists():
            continue              # a gathered family member's missing file: the stage reports it
        try:
            check_readable(path)
        except ArtifactError as exc:
            hint = f"; rerun `alphagym {producer[path].command}`" if path in producer else ""
            raise ArtifactError(path, f"stage {key!r} cannot read its input {role!r} ({exc.detail}); its outputs of "
                                      f"the last run are kept{hint}", rule=exc.rule) from None
    root = results_dir(params)
    with stage_lock(root, key):
        return _run_locked(params, key, stage, root, reads)


def _run_locked(params: Mapping[str, Any], key: str, stage: Stage, root: Path, reads: set[str] | None
                ) -> dict[str, Any]:
    # an output file rewritten with the same bytes keeps its mtime: a rerun that changes nothing (the DVC
    # sentinel after a profile edit elsewhere) must not make every stage below it look out of date to Snakemake
    before = {p: (sha256(Path(p)), Path(p).stat().st_mtime_ns) for p in stage.outs.values()
              if Path(p).is_file() and not Path(p).is_symlink()}
    for path in stage.outs.values():
        _remove(Path(path))
    staging_root = root / ".staging"
    try:
        staging_root.mkdir(parents=True, exist_ok=True)
        sweep_staging(root, held=_safe(key))
        staging = Path(tempfile.mkdtemp(prefix=f"{_safe(key)}.", dir=staging_root))
    except OSError as exc:
        raise _unwritable(root, exc) from None
    staged = {role: staging / role / Path(p).name for role, p in stage.outs.items()}
    for role, p in staged.items():
        (p if role in stage.directories else p.parent).mkdir(parents=True)
    view = ParamsView(params, stage.params, key, reads=reads)
    # a rung's stages log its resolved recipe instead (`StageRun.log_rung`): the base `rl.recipe` and the
    # rung's `set` would show every rung with the same recipe in MLflow's compare view
    hidden = ("rl.recipe", "rl.rungs.") if stage.family == RUNGS else ()
    logged = {k: get(params, k) for k in stage.params if not k.startswith(hidden)}
    try:
        with stage_run(key, params, logged, code_hash((*COMMON_CODE, *stage.code))) as run:
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
            if path in before and Path(path).is_file() and sha256(Path(path)) == before[path][0]:
                os.utime(path, ns=(time.time_ns(), before[path][1]))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {**summary, "outputs": dict(stage.outs)}


def _safe(key: str) -> str:
    """A stage key as a file name (`train@cispo_repo-s1` -> `train_cispo_repo-s1`)."""
    return key.replace("@", "_").replace("/", "_")


def _unwritable(root: Path, exc: OSError) -> WriteError:
    """The one-line error for a results folder the stage runner cannot write into (its locks, its staging)."""
    where = f": {exc.filename}" if exc.filename else ""
    return WriteError(f"the results folder {root} cannot be written ({exc.strerror or exc}{where}); make it "
                      "writable, or point paths.results at a folder that is (--set paths.results=DIR)")


def _lock(root: Path, name: str) -> Any:
    from filelock import FileLock

    locks = root / ".locks"
    try:
        locks.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise _unwritable(root, exc) from None
    return FileLock(str(locks / f"{name}.lock"))


@contextlib.contextmanager
def stage_lock(root: Path, key: str, wait_s: float = 5.0) -> Iterator[None]:
    """Hold the stage's lock for the results folder `root`, or raise StageBusyError naming the pid that holds
    it. `wait_s` covers the moment another process's `sweep_staging` holds it to look (milliseconds)."""
    from filelock import Timeout

    name = _safe(key)
    lock, pid_file = _lock(root, name), root / ".locks" / f"{name}.pid"
    try:
        lock.acquire(timeout=wait_s)
    except Timeout:
        holder = pid_file.read_text().strip() if pid_file.is_file() else "unknown"
        raise StageBusyError(f"stage {key!r} is already running on the results folder {root} (pid {holder}); "
                             "wait for it to end, or stop it, before running it again") from None
    except OSError as exc:                # the lock file cannot be created: .locks is read-only
        raise _unwritable(root, exc) from None
    try:
        try:
            pid_file.write_text(f"{os.getpid()}\n")
        except OSError as exc:
            raise _unwritable(root, exc) from None
        yield
    finally:
        lock.release()


def sweep_staging(root: Path, held: str | None = None) -> list[Path]:
    """Remove the staging folders under `root/.staging` whose stage is not running (its lock is free): what
    a killed run left. `held`: the stage whose lock this process holds (all its staging folders are dead
    before it makes its own). Returns what it removed."""
    from filelock import Timeout

    staging_root = root / ".staging"
    dead = []
    for folder in sorted(staging_root.glob("*.*")) if staging_root.is_dir() else []:
        name = folder.name.rsplit(".", 1)[0]
        if name == held:
            dead.append(folder)
            continue
        lock = _lock(root, name)
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue                      # its stage is running: the folder may be that run's
        try:
            if folder.is_dir():
                dead.append(folder)
        finally:
            lock.release()
    for folder in dead:
        shutil.rmtree(folder, ignore_errors=True)
    return dead


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
