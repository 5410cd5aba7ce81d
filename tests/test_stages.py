"""run_stage: outputs are all-or-nothing, staged per run, and a stage must write every declared output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from alphagym.errors import DataError
from alphagym.pipeline import Stage
from alphagym.stages import run_stage

BIN = Path(sys.executable).parent


def half_then_fail(params, deps, outs, run):
    outs["first"].write_text("new")
    raise RuntimeError("killed between two outputs")


def writes_one(params, deps, outs, run):
    outs["first"].write_text("new")
    return {}


def writes_both(params, deps, outs, run):
    outs["first"].write_text(f"seed {params['seed']}")
    (outs["folder"] / "a.txt").write_text("a")
    return {"ok": True}


def writes_its_code(params, deps, outs, run):
    outs["first"].write_text(run.code)
    (outs["folder"] / "a.txt").write_text("a")
    return {}


def _rows(tmp_path: Path, func: str) -> list[Stage]:
    outs = {"first": f"{tmp_path}/r/first.txt", "folder": f"{tmp_path}/r/folder"}
    return [Stage("demo", f"test_stages:{func}", {}, outs, ("seed",), (), directories=("folder",))]


@pytest.fixture(autouse=True)
def _importable():
    sys.path.insert(0, str(Path(__file__).parent))
    yield
    sys.path.remove(str(Path(__file__).parent))


def test_outputs_appear_only_when_the_stage_completes(params, tmp_path):
    out = run_stage(params, "demo", _rows(tmp_path, "writes_both"))
    assert out["ok"] and (tmp_path / "r/first.txt").read_text() == f"seed {params['seed']}"
    assert (tmp_path / "r/folder/a.txt").read_text() == "a"
    assert not any((Path(params["paths"]["results"]) / ".staging").iterdir())     # staging cleaned up


def test_an_output_rewritten_with_the_same_bytes_keeps_its_mtime(params, tmp_path):
    """A rerun that writes what was there (the DVC sentinel after a profile edit that does not reach it) leaves
    the file's mtime, so Snakemake does not plan every stage below it; new bytes get a new mtime."""
    rows = _rows(tmp_path, "writes_both")
    first = tmp_path / "r/first.txt"
    run_stage(params, "demo", rows)
    old = first.stat().st_mtime_ns - 10**9                 # as if written a second ago
    os.utime(first, ns=(old, old))
    run_stage(params, "demo", rows)
    assert first.stat().st_mtime_ns == old and first.read_text() == f"seed {params['seed']}"
    run_stage(params.model_copy(update={"seed": params.seed + 1}), "demo", rows)
    assert first.stat().st_mtime_ns != old and first.read_text() == f"seed {params.seed + 1}"


def test_a_stage_is_handed_the_digest_of_the_code_it_declares(params, tmp_path, monkeypatch):
    """`StageRun.code` is the sha256 of the stage's declared code (what a rung's checkpoints must match to be
    continued, `rl.stage.run_context`): it changes when that code changes."""
    from alphagym.pipeline import COMMON_CODE, code_hash

    monkeypatch.chdir(tmp_path)
    mod = Path("src/mod.py")
    mod.parent.mkdir()
    mod.write_text("x = 1\n")
    rows = [Stage("demo", "test_stages:writes_its_code", {}, {"first": f"{tmp_path}/r/first.txt",
                  "folder": f"{tmp_path}/r/folder"}, ("seed",), ("src/mod.py",), directories=("folder",))]
    run_stage(params, "demo", rows)
    first = (tmp_path / "r/first.txt").read_text()
    assert first == code_hash((*COMMON_CODE, "src/mod.py"), ".") and len(first) == 16
    mod.write_text("x = 2\n")
    code_hash.cache_clear()
    run_stage(params, "demo", rows)
    assert (tmp_path / "r/first.txt").read_text() not in ("", first)


def test_a_stage_killed_between_two_outputs_leaves_neither_old_nor_new(params, tmp_path):
    run_stage(params, "demo", _rows(tmp_path, "writes_both"))
    with pytest.raises(RuntimeError, match="killed between"):
        run_stage(params, "demo", _rows(tmp_path, "half_then_fail"))
    assert not (tmp_path / "r/first.txt").exists() and not (tmp_path / "r/folder").exists()


def test_a_stage_must_write_every_declared_output(params, tmp_path):
    with pytest.raises(DataError, match=r"stage 'demo' returned without writing \['folder'\]"):
        run_stage(params, "demo", _rows(tmp_path, "writes_one"))
    assert not (tmp_path / "r/first.txt").exists()


def test_two_runs_in_one_results_folder_do_not_race(root, tmp_path):
    """Two downloads at once into one results folder: each either finishes, or (when the other holds the
    stage's lock longer than the lock's wait, as on a loaded machine) stops with the clear "already running"
    error; at least one finishes, and the outputs are complete, never a mix of the two."""
    env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
    cmd = [str(BIN / "alphagym"), "download", "--params", str(root / "params.yaml"), "--set", "profile=smoke",
           "--set", f"paths.results={tmp_path}/results", "--set", "tracking.enabled=false"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    results = [p.communicate(timeout=300) for p in procs]
    codes = [p.returncode for p in procs]
    assert 0 in codes and set(codes) <= {0, 2}, results
    assert all("already running" in err for code, (_, err) in zip(codes, results) if code == 2), results
    meta = json.loads((tmp_path / "results/raw/meta.json").read_text())
    assert len(pd.read_parquet(tmp_path / "results/raw/prices.parquet")) == meta["rows"]


def _read_only_message(capsys, root, results: Path) -> tuple[int, str]:
    from alphagym.cli import main

    code = main(["briefs", "--params", str(root / "params.yaml"), "--set", f"paths.results={results}",
                 "--set", "tracking.enabled=false"])
    return code, capsys.readouterr().err


def test_a_read_only_results_folder_is_one_clear_line(root, tmp_path, capsys, monkeypatch):
    """A results folder that cannot be written (a read-only mount, here simulated: tests may run as root,
    whom chmod does not stop) is one line naming the folder and the reason, exit 2, not a traceback."""
    import errno

    results = tmp_path / "ro"
    results.mkdir()
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self == results or results in self.parents:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    code, err = _read_only_message(capsys, root, results)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert err.startswith(f"alphagym briefs: error: the results folder {results} cannot be written")
    assert "Read-only file system" in err and "paths.results" in err
    monkeypatch.undo()

    # .locks there from an earlier run, but no lock file can be created in it (its mode was changed)
    import filelock

    def denied(self, *args, **kwargs):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), self.lock_file)

    monkeypatch.setattr(filelock.FileLock, "acquire", denied)
    code, err = _read_only_message(capsys, root, results)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"the results folder {results} cannot be written (Permission denied: {results}/.locks/" in err
    monkeypatch.undo()

    # a stage that meets a read-only file system elsewhere (an output folder mounted read-only)
    import alphagym.stages

    def writes_nowhere(params, key):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), "/mnt/ro/out.json")

    monkeypatch.setattr(alphagym.stages, "run_stage", writes_nowhere)
    code, err = _read_only_message(capsys, root, results)
    assert (code, err) == (2, "alphagym briefs: error: Read-only file system: /mnt/ro/out.json\n")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a chmod 0o555 folder: the monkeypatched test "
                                               "above covers the read-only case there")
def test_a_chmod_read_only_results_folder_is_one_clear_line(root, tmp_path, capsys):
    results = tmp_path / "ro"
    results.mkdir()
    results.chmod(0o555)
    try:
        code, err = _read_only_message(capsys, root, results)
    finally:
        results.chmod(0o755)
    assert code == 2 and len(err.splitlines()) == 1, err
    assert f"the results folder {results} cannot be written" in err and "Permission denied" in err


def reads_its_input(params, deps, outs, run):
    """A stage that reads its input through the typed readers (as every stage does) and writes both outputs."""
    from alphagym.artifacts import read_json, read_jsonl, read_npz, read_parquet

    path = deps["data"]
    read = {".parquet": read_parquet, ".json": read_json, ".jsonl": read_jsonl, ".npz": read_npz}[path.suffix]
    read(path)
    outs["first"].write_text(f"from {path.name}")
    (outs["folder"] / "a.txt").write_text("a")
    return {}


def _write_input(path: Path) -> None:
    import numpy as np

    from alphagym.artifacts import write_parquet

    if path.suffix == ".parquet":
        write_parquet(pd.DataFrame({"x": np.arange(200.0), "y": np.arange(200) % 7}), path)
    elif path.suffix == ".json":
        path.write_text(json.dumps({"rows": list(range(50))}))
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps({"id": f"b{i}", "text": "t" * 20}) + "\n" for i in range(20)))
    else:
        np.savez(path, a=np.arange(500.0), b=np.ones((10, 10)))


@pytest.mark.parametrize("name", ["train.parquet", "books.json", "briefs.jsonl", "archive.npz"])
def test_a_stage_checks_its_inputs_before_it_removes_its_previous_outputs(params, tmp_path, name):
    """An input cut short (a corrupt panel, a garbled books.json) stops the stage before it removes
    anything: the error names the input and its role, and the outputs of the last good run are still there.
    (A stage that fails once it has started still leaves no outputs: see the tests above.)"""
    from alphagym.errors import ArtifactError

    data = tmp_path / "in" / name
    data.parent.mkdir()
    _write_input(data)
    outs = {"first": f"{tmp_path}/r/first.txt", "folder": f"{tmp_path}/r/folder"}
    rows = [Stage("demo", "test_stages:reads_its_input", {"data": str(data)}, outs, ("seed",), (),
                  directories=("folder",))]
    run_stage(params, "demo", rows)
    assert (tmp_path / "r/first.txt").read_text() == f"from {name}"

    data.write_bytes(data.read_bytes()[: len(data.read_bytes()) // 2])       # cut short mid-file
    with pytest.raises(ArtifactError) as info:
        run_stage(params, "demo", rows)
    assert (tmp_path / "r/first.txt").is_file(), "the last good run's outputs were removed"
    assert (tmp_path / "r/first.txt").read_text() == f"from {name}"
    assert (tmp_path / "r/folder/a.txt").read_text() == "a"
    assert "stage 'demo' cannot read its input 'data'" in str(info.value) and f"file {data}" in str(info.value)
    assert "its outputs of the last run are kept" in str(info.value)
