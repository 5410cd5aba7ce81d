"""The pipeline machinery: Snakemake == DVC == stage table, the holdout boundary, MLflow, end-to-end runs."""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from alphagym.config import load_params
from alphagym.pipeline import HOLDOUT_READERS, dvc_yaml, stage_table
from alphagym.tracking import git_commit, stage_run, with_lock_retry

BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "MLFLOW_DISABLE_TELEMETRY": "true",
            "DVC_NO_ANALYTICS": "1"}


def _copy_workflow(root: Path, dest: Path, profile: str | None = None) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "params.yaml", "dvc.yaml", ".dvcignore"):
        shutil.copy(root / name, dest / name)
    shutil.copytree(root / "workflow", dest / "workflow")
    shutil.copytree(root / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    if profile:
        text = (dest / "params.yaml").read_text()
        (dest / "params.yaml").write_text(re.sub(r"^profile: \w+", f"profile: {profile}", text, flags=re.M))
    return dest


def _snakemake_rules(workdir: Path, *extra: str) -> dict[str, dict]:
    """Parse `snakemake -n -p --forceall`: rule -> {input, output, shell}."""
    out = subprocess.run([str(BIN / "snakemake"), "-n", "-p", "--forceall", "--cores", "1", *extra],
                         cwd=workdir, capture_output=True, text=True, env=_env(), check=True).stdout
    rules: dict[str, dict] = {}
    current = None
    for line in out.splitlines():
        m = re.match(r"^rule (\w+):", line)
        if m:
            current = rules.setdefault(m.group(1), {"input": set(), "output": set(), "shell": None})
        elif current is not None and re.match(r"^\s+(input|output): ", line):
            key, vals = line.strip().split(": ", 1)
            current[key] = {v.strip() for v in vals.split(",")}
        elif current is not None and line.startswith("Shell command: "):
            current["shell"] = re.sub(r" > \S+ 2>&1$", "", line[len("Shell command: "):])
    return rules


def test_dvc_yaml_is_rendered_from_the_stage_table(root):
    assert (root / "dvc.yaml").read_text() == dvc_yaml(load_params(root / "params.yaml")), \
        "dvc.yaml drifted: run `alphagym dag --write-dvc dvc.yaml`"


def test_snakemake_and_dvc_describe_the_same_dag(root, tmp_path):
    work = _copy_workflow(root, tmp_path / "w")
    smk = _snakemake_rules(work)
    dvc = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    assert set(smk) - {"all"} == set(dvc)
    for name, stage in dvc.items():
        code = {d for d in stage.get("deps", []) if d.startswith("src/")}
        assert smk[name]["input"] == set(stage.get("deps", [])) - code, name
        metrics = {next(iter(m)) for m in stage.get("metrics", [])}
        assert smk[name]["output"] == set(stage["outs"]) | metrics, name
        assert smk[name]["shell"] == stage["cmd"], name


def test_no_stage_before_the_probe_reads_the_holdout(root):
    """Derived from dvc.yaml itself: follow every dependency chain back to holdout.parquet."""
    stages = yaml.safe_load((root / "dvc.yaml").read_text())["stages"]
    producer = {out: name for name, s in stages.items()
                for out in s.get("outs", []) + [next(iter(m)) for m in s.get("metrics", [])]}

    def upstream(name, seen=None):
        seen = set() if seen is None else seen
        for dep in stages[name].get("deps", []):
            if dep not in seen:
                seen.add(dep)
                if dep in producer:
                    upstream(producer[dep], seen)
        return seen

    holdout = stage_table(load_params(root / "params.yaml"))["panel"].outs["holdout"]
    readers = {name for name in stages if holdout in upstream(name)}
    assert readers <= HOLDOUT_READERS, f"stages reading the holdout before the probe: {readers - HOLDOUT_READERS}"


def test_lock_retry_retries_only_locks():
    calls = []

    def locked_twice():
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("(sqlite3.OperationalError) database is locked")
        return "ok"

    assert with_lock_retry(locked_twice, retries=5, backoff=0.0) == "ok" and len(calls) == 3
    with pytest.raises(ValueError):
        with_lock_retry(lambda: (_ for _ in ()).throw(ValueError("other")), retries=5, backoff=0.0)


def test_stage_run_logs_params_metrics_tags(params, tmp_path):
    p = dict(params, tracking=dict(params["tracking"], enabled=True))
    with stage_run("panel", p) as run:
        run.log_metrics({"rows": 12.0})
    with pytest.raises(RuntimeError), stage_run("download", p):
        raise RuntimeError("boom")
    db = sqlite3.connect(p["tracking"]["uri"])
    runs = dict(db.execute("select name, status from runs").fetchall())
    assert runs == {"panel": "FINISHED", "download": "FAILED"}
    tags = dict(db.execute("select key, value from tags t join runs r on t.run_uuid=r.run_uuid "
                           "where r.name='panel'").fetchall())
    assert tags["dvc.stage"] == "panel" and tags["mlflow.source.git.commit"] == git_commit()
    assert db.execute("select value from metrics where key='rows'").fetchone()[0] == 12.0
    assert db.execute("select value from params where key='data.source'").fetchone()[0] == "synthetic"


@pytest.mark.slow
def test_snakemake_smoke_profile_end_to_end(root, tmp_path):
    work = _copy_workflow(root, tmp_path / "w")
    subprocess.run([str(BIN / "snakemake"), "--profile", "workflow/profiles/smoke"], cwd=work, check=True,
                   env=_env(), capture_output=True, text=True)
    summary = yaml.safe_load((work / "results/panel/summary.json").read_text())
    assert summary["train_first"] == "2023-01-03" and summary["holdout_sessions"] == 252
    db = sqlite3.connect(work / "results/mlflow/mlflow.db")
    names = sorted(r[0] for r in db.execute("select name from runs where status='FINISHED'"))
    assert names == sorted(stage_table(load_params(work / "params.yaml")))
    profile = dict(db.execute("select key, value from tags where key='alphagym.profile'").fetchall())
    assert profile["alphagym.profile"] == "smoke"


@pytest.mark.slow
def test_dvc_repro_push_pull_gives_identical_bytes(root, tmp_path):
    repo = _copy_workflow(root, tmp_path / "repo", profile="smoke")
    remote = tmp_path / "remote"
    (repo / "results").mkdir()

    def run(*cmd, cwd=repo):
        return subprocess.run(list(cmd), cwd=cwd, check=True, env=_env(), capture_output=True, text=True)

    run("git", "init", "-q")
    run("git", "config", "user.email", "t@t")
    run("git", "config", "user.name", "t")
    run(str(BIN / "dvc"), "init", "-q")
    run(str(BIN / "dvc"), "remote", "add", "-d", "store", str(remote))
    run(str(BIN / "dvc"), "config", "core.analytics", "false")
    (repo / ".gitignore").write_text("/results/mlflow\n/results/cache\n")
    run(str(BIN / "dvc"), "repro")
    run(str(BIN / "dvc"), "push")
    run("git", "add", "-A")
    run("git", "commit", "-qm", "repro")
    clone = tmp_path / "clone"
    run("git", "clone", "-q", str(repo), str(clone), cwd=tmp_path)
    run(str(BIN / "dvc"), "pull", cwd=clone)
    outs = [o for s in yaml.safe_load((repo / "dvc.yaml").read_text())["stages"].values() for o in s["outs"]]
    assert outs
    for out in outs:
        if (repo / out).is_dir():
            files = sorted(f.relative_to(repo) for f in (repo / out).rglob("*") if f.is_file())
            assert files and files == sorted(f.relative_to(clone) for f in (clone / out).rglob("*") if f.is_file())
            for f in files:
                assert (clone / f).read_bytes() == (repo / f).read_bytes(), f
        else:
            assert (clone / out).read_bytes() == (repo / out).read_bytes(), out
    status = run(str(BIN / "dvc"), "status", cwd=clone).stdout
    assert "up to date" in status.lower() or status.strip() == "", status
