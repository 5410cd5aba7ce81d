"""The pipeline machinery: Snakemake == DVC == stage table, the holdout boundary, MLflow, end-to-end runs."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from alphagym.config import load_params
from alphagym.dsl.parser import parse
from alphagym.dsl.printer import plain
from alphagym.pipeline import HOLDOUT_READERS, SPECS, dvc_yaml, specs_yaml, stage_table
from alphagym.tracking import git_commit, stage_run, with_lock_retry
from cfg_helpers import updated

BIN = Path(sys.executable).parent


def _env() -> dict[str, str]:
    return {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "MLFLOW_DISABLE_TELEMETRY": "true",
            "DVC_NO_ANALYTICS": "1"}


# two rungs of the ladder in the end-to-end tests (every kind of stage runs; `make smoke` runs every rung of rl.ladder)
SMOKE_LADDER = ("dapo_all", "cispo_repo")


def _copy_workflow(root: Path, dest: Path, profile: str | None = None, ladder: list[str] | None = None) -> Path:
    """A copy of the workflow; `profile` selected in its params.yaml; `ladder` (fewer rungs, to keep the
    end-to-end tests short) written into its params.yaml and its dvc.yaml rendered for it."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("Snakefile", "params.yaml", "dvc.yaml", ".dvcignore"):
        shutil.copy(root / name, dest / name)
    shutil.copytree(root / "workflow", dest / "workflow")
    # numba's on-disk cache comes along (its index is keyed by each source file's mtime and size, which
    # copy2 keeps, and an edited file recompiles): every stage process would otherwise compile every kernel
    shutil.copytree(root / "src", dest / "src", ignore=shutil.ignore_patterns("*.pyc", "*.egg-info"))
    text = (dest / "params.yaml").read_text()
    if profile:
        text = re.sub(r"^profile: \w+", f"profile: {profile}", text, flags=re.M)
    if ladder:
        text, n = re.subn(r"^  ladder: \[[^\]]*\]", f"  ladder: [{', '.join(ladder)}]", text, flags=re.M)
        assert n == 1
    (dest / "params.yaml").write_text(text)
    if ladder:
        (dest / "dvc.yaml").write_text(dvc_yaml(load_params(dest / "params.yaml"), params_file=dest / "params.yaml"))
    return dest


def _snakemake_jobs(workdir: Path, *extra: str) -> dict[str, dict]:
    """Parse `snakemake -n -p --forceall`: job key (rule, or rule@wildcard value) -> input, output, shell."""
    out = subprocess.run([str(BIN / "snakemake"), "-n", "-p", "--forceall", "--cores", "1", *extra],
                         cwd=workdir, capture_output=True, text=True, env=_env(), check=True).stdout
    jobs: dict[str, dict] = {}
    current = None
    for line in out.splitlines():
        m = re.match(r"^rule (\w+):", line)
        if m:
            current = {"rule": m.group(1), "input": set(), "output": set(), "shell": None, "item": None,
                       "priority": 0, "threads": 1}
            jobs[str(len(jobs))] = current
        elif current is not None and re.match(r"^\s+(input|output): ", line):
            key, vals = line.strip().split(": ", 1)
            current[key] = {v.strip() for v in vals.split(",")}
        elif current is not None and re.match(r"^\s+priority: \d+$", line):
            current["priority"] = int(line.split(": ", 1)[1])
        elif current is not None and re.match(r"^\s+threads: \d+$", line):
            current["threads"] = int(line.split(": ", 1)[1])
        elif current is not None and re.match(r"^\s+wildcards: ", line):
            current["item"] = line.split("=", 1)[1].strip()
        elif current is not None and line.startswith("Shell command: "):
            current["shell"] = re.sub(r" > ('[^']*'|\S+) 2>&1$", "", line[len("Shell command: "):])
    return {(j["rule"] if j["item"] is None else f"{j['rule']}@{j['item']}"): j for j in jobs.values()}


def _dvc_stages(workdir: Path) -> dict[str, dict]:
    """DVC's own reading of dvc.yaml (foreach expanded): stage -> data deps, outs, cmd."""
    from dvc.dependency.param import ParamsDependency
    from dvc.repo import Repo

    if not (workdir / ".dvc").is_dir():
        subprocess.run([str(BIN / "dvc"), "init", "--no-scm", "-q"], cwd=workdir, check=True, env=_env())
    with Repo(str(workdir)) as repo:
        return {st.name: {"deps": {d.def_path for d in st.deps if not isinstance(d, ParamsDependency)
                                         and not d.def_path.startswith("src/")},
                                "outs": {o.def_path for o in st.outs}, "cmd": st.cmd,
                                "params": sorted(k for d in st.deps if isinstance(d, ParamsDependency)
                                                 for k in (d.params or []))}
                for st in repo.index.stages}


def _same_dag(smk: dict[str, dict], dvc: dict[str, dict]) -> None:
    assert set(smk) - {"all"} == set(dvc)
    for name, stage in dvc.items():
        assert smk[name]["input"] == stage["deps"], name
        assert smk[name]["output"] == stage["outs"], name
        assert smk[name]["shell"] == stage["cmd"], name


def test_dvc_yaml_is_rendered_from_the_stage_table(root):
    assert (root / "dvc.yaml").read_text() == dvc_yaml(load_params(root / "params.yaml")), \
        "dvc.yaml drifted: run `alphagym dag --write-dvc dvc.yaml`"
    assert (root / SPECS).read_text() == specs_yaml(), f"{SPECS} drifted: run `alphagym dag --write-dvc dvc.yaml`"


def _specs_after(root: Path, tmp_path: Path, edit: tuple[str, str, str]) -> dict[str, str]:
    """The stage specs' hashes computed from a copy of the package with one edit (file, old, new)."""
    src = tmp_path / "src"
    shutil.copytree(root / "src", src, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    path, old, new = edit
    text = (src / path).read_text()
    assert text.count(old) == 1, old
    (src / path).write_text(text.replace(old, new))
    out = subprocess.run([sys.executable, "-c", "from alphagym.pipeline import specs_yaml; print(specs_yaml())"],
                         env={**_env(), "PYTHONPATH": str(src)}, capture_output=True, text=True, check=True)
    return yaml.safe_load(out.stdout)


def test_a_stage_depends_on_its_own_spec_not_on_all_of_params_py(root, tmp_path):
    """Editing the description of a `Probe` field changes the probe's spec alone; adding a recipe field changes
    the specs of the stages that declare `rl.recipe` (or all of `rl`) and no other: a stage reruns for what it
    runs, not for every edit of params.py (the stage table's hashing; Snakemake and DVC both read the spec)."""
    before = yaml.safe_load(specs_yaml())
    after = _specs_after(root, tmp_path / "a", ("alphagym/params.py", 'description="sampled answers per holdout brief '
                                                "for pass@k (0: none)\")",
                                                'description="sampled answers per holdout brief (pass@k)")'))
    assert {k for k in before if before[k] != after[k]} == {"probe"}
    recipe_field = ('    reward_weights: dict[str, NonNeg] = Field(',
                    '    new_knob: float = Field(default=0.0, description="a new knob")\n'
                    '    reward_weights: dict[str, NonNeg] = Field(')
    after = _specs_after(root, tmp_path / "b", ("alphagym/params.py", *recipe_field))
    readers = {s.name for s in stage_table(load_params(root / "params.yaml")).values()
               if any(k in ("rl", "rl.recipe") for k in s.params)}
    assert readers == {"train", "probe", "report"}
    assert {k for k in before if before[k] != after[k]} == readers
    # the negative control: a change to the stage table's own row of one stage changes that stage's spec only
    after = _specs_after(root, tmp_path / "c", ("alphagym/pipeline.py", 'help="draw the training and holdout',
                                                'help="draw the training and the holdout'))
    assert after == before       # help text is not part of a spec
    row = '("seed", "briefs"), ("src/alphagym/briefs", *engine[1:]'
    after = _specs_after(root, tmp_path / "d", ("alphagym/pipeline.py", row + ")", row + ', "src/alphagym/rungs.py")'))
    assert {k for k in before if before[k] != after[k]} == {"briefs"}


def test_a_profile_s_dvc_yaml_depends_on_what_each_stage_reads_of_its_block(root, tmp_path):
    """dvc.yaml rendered for a profile: each stage depends on the parts of the profile's block on the paths
    of the keys it declares (an edit of the smoke profile's recipe reruns train, probe and report, not the
    world model); the first stage depends on the whole block, and a stage command run by DVC refuses a
    rendering that is no longer current (a block that gained a section), naming the command that renders it."""
    from alphagym.errors import ConfigError
    from alphagym.pipeline import check_rendering

    work = _copy_workflow(root, tmp_path / "w", profile="smoke")
    params = load_params(work / "params.yaml")
    rendered = yaml.safe_load(dvc_yaml(params, params_file=work / "params.yaml"))["stages"]

    def profile_deps(name: str) -> list[str]:
        body = rendered[name].get("do", rendered[name])
        return [k for k in body["params"] if isinstance(k, str) and k.startswith("profiles.")]

    assert profile_deps("download") == ["profiles.smoke"]
    reads_rl = {n for n in rendered if any(k.startswith("profiles.smoke.rl") for k in profile_deps(n))}
    assert reads_rl == {"train", "probe", "report"}
    assert "profiles.smoke.worldmodel" in profile_deps("world_model") and "profiles.smoke.books" not in str(rendered)
    (work / "dvc.yaml").write_text(dvc_yaml(params, params_file=work / "params.yaml"))
    check_rendering(params, work / "params.yaml", work)
    # the smoke block gains a books section: books@* do not depend on it in the old rendering, so DVC alone
    # would skip them; the first stage reruns (it depends on the whole block) and its command refuses
    _edit(work / "params.yaml", "    filter: {samples: 2, min_kept: 10}\n",
          "    filter: {samples: 2, min_kept: 10}\n    books: {down_day: -0.02}\n")
    with pytest.raises(ConfigError, match="alphagym dag --write-dvc dvc.yaml --set profile=smoke"):
        check_rendering(load_params(work / "params.yaml"), work / "params.yaml", work)


def test_dvc_status_ignores_bytecode_and_caches(root, tmp_path):
    """The repo's .dvcignore keeps `__pycache__` (and other caches) out of code dependencies: a stage whose
    code dep is a package folder stays up to date after an import writes bytecode; without the .dvcignore
    the same bytecode makes it changed (the negative control)."""
    def status(repo: Path) -> str:
        return subprocess.run([str(BIN / "dvc"), "status", "--json"], cwd=repo, env=_env(), capture_output=True,
                              text=True, check=True).stdout.strip()

    for ignore in (True, False):
        repo = tmp_path / f"r{int(ignore)}"
        (repo / "src/pkg").mkdir(parents=True)
        (repo / "src/pkg/mod.py").write_text("X = 1\n")
        if ignore:
            shutil.copy(root / ".dvcignore", repo / ".dvcignore")
        (repo / "dvc.yaml").write_text("stages:\n  s:\n    cmd: python -c \"open('out.txt', 'w').write('x')\"\n"
                                       "    deps: [src/pkg]\n    outs: [out.txt]\n")
        subprocess.run([str(BIN / "dvc"), "init", "--no-scm", "-q"], cwd=repo, check=True, env=_env())
        subprocess.run([str(BIN / "dvc"), "repro", "-q"], cwd=repo, check=True, env=_env(), capture_output=True)
        assert status(repo) in ("", "{}")
        subprocess.run([sys.executable, "-m", "compileall", "-q", "src"], cwd=repo, check=True)
        assert (repo / "src/pkg/__pycache__").is_dir()
        assert (status(repo) in ("", "{}")) is ignore, status(repo)
        if ignore:
            shutil.rmtree(repo / "src/pkg/__pycache__")
            assert status(repo) in ("", "{}")


def test_snakemake_and_dvc_describe_the_same_dag(root, tmp_path):
    work = _copy_workflow(root, tmp_path / "w")
    _same_dag(_snakemake_jobs(work), _dvc_stages(work))


def test_a_results_folder_with_a_space_is_quoted_in_every_shell_line(root, tmp_path):
    """`paths.results` with a space: each generated shell line quotes its log path (unquoted, the shell
    redirected into `results/a` and passed `b/logs/...` to the command), and both tools still agree."""
    work = _copy_workflow(root, tmp_path / "w")
    _edit(work / "params.yaml", "\n  results: results\n", "\n  results: my results\n")
    (work / "dvc.yaml").write_text(dvc_yaml(load_params(work / "params.yaml"), params_file=work / "params.yaml"))
    out = subprocess.run([str(BIN / "snakemake"), "-n", "-p", "--forceall", "--cores", "1"], cwd=work,
                         capture_output=True, text=True, env=_env(), check=True).stdout
    shells = [line for line in out.splitlines() if line.startswith("Shell command: ") and line != "Shell command: None"]
    assert shells and all(line.endswith("2>&1") for line in shells)
    assert all(re.search(r" > 'my results/logs/[\w@-]+\.log' 2>&1$", line) for line in shells), shells[:3]
    _same_dag(_snakemake_jobs(work), _dvc_stages(work))



def test_snakemake_refuses_a_config_key_the_stages_would_not_read(root, tmp_path):
    """The stages read params.yaml, so `--config rl=...` would be dropped without a word (and `--config
    "rl={...}"` with `--profile` planned the full default run): every key but `profile` is refused, by name;
    `profile=smoke` still plans."""
    work = _copy_workflow(root, tmp_path / "w")
    for extra in (["--config", 'rl={"ladder": ["cispo_repo_idea"]}'], ["--config", "profile=smoke", "seed=3"]):
        out = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", *extra], cwd=work, capture_output=True,
                             text=True, env=_env())
        assert out.returncode != 0
        assert "this workflow takes only profile=NAME" in out.stdout + out.stderr, out.stderr[-500:]
    assert "--config/--configfile set seed:" in out.stdout + out.stderr
    ok = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", "--config", "profile=smoke"], cwd=work,
                        capture_output=True, text=True, env=_env())
    assert ok.returncode == 0, ok.stderr[-500:]

def test_a_bad_parameter_under_snakemake_is_its_message_without_frames(root, tmp_path):
    """A params error planning the DAG (`snakemake -n`) prints the parameter and the rule it breaks, not
    Snakemake's traceback frames through the Snakefile and alphagym.config."""
    work = _copy_workflow(root, tmp_path / "w")
    _edit(work / "params.yaml", "\n    steps: 600\n", "\n    steps: -5\n")
    out = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1"], cwd=work, capture_output=True, text=True,
                         env=_env())
    said = out.stdout + out.stderr
    assert out.returncode != 0 and "rl.recipe.steps = -5: Input should be greater than or equal to 1" in said, said
    assert 'File "' not in said, said


FAMILY_ROWS = '''
from alphagym.config import load_params
from alphagym.dsl.parser import parse
from alphagym.dsl.printer import plain
from alphagym.pipeline import stage_rows


def params():
    # two rungs: one seed by default, the second with three seed replicas of its own
    return load_params("params.yaml", ["rl.ladder=[cispo_all, cispo_repo]", "rl.seeds=1",
                                       "rl.rungs.cispo_repo={parent: cispo_repo_all, set: {briefs: filtered}, "
                                       "seeds: 3}"])


def rows():
    return stage_rows(params())
'''

FAMILY_SNAKEFILE = '''
import sys
sys.path.insert(0, ".")
from alphagym.pipeline import final_targets
from family_rows import params, rows

PARAMS = params()
STAGE_ROWS = rows()

rule all:
    input:
        final_targets(PARAMS, STAGE_ROWS),

include: "workflow/rules/stages.smk"
'''


def test_a_stage_family_expands_alike_in_snakemake_and_dvc(root, tmp_path):
    """A family row (the ladder's rungs) is one Snakemake rule with a wildcard and one DVC `foreach`; both
    tools expand it to the same jobs, each member with its own paths, command and params."""
    work = _copy_workflow(root, tmp_path / "w")
    (work / "family_rows.py").write_text(FAMILY_ROWS)
    (work / "Snakefile").write_text(FAMILY_SNAKEFILE)
    sys.path.insert(0, str(work))
    try:
        import family_rows
    finally:
        sys.path.remove(str(work))
    text = dvc_yaml(family_rows.params(), family_rows.rows())
    rendered = yaml.safe_load(text)["stages"]
    members = ["cispo_all", "cispo_repo", "cispo_repo-s1", "cispo_repo-s2"]
    # replicas: a dict foreach, the member names the paths and the item it replicates names the params
    # and `up1`, `up2`, ... its chain of parents (padded with itself), whose `set`s its recipe folds
    up = {"cispo_all": ["dapo_all", "cispo_all", "cispo_all"],
          "cispo_repo": ["cispo_repo_all", "cispo_all", "dapo_all"]}
    assert rendered["train"]["foreach"] == {
        m: {"of": m.split("-")[0], **{f"up{k}": n for k, n in enumerate(up[m.split("-")[0]], 1)}} for m in members}
    assert rendered["train"]["do"]["cmd"] == "alphagym train --rung ${key}"
    assert rendered["train"]["do"]["params"][-5:-1] == [f"rl.rungs.${{item.{k}}}" for k in ("of", "up1", "up2", "up3")]
    (work / "dvc.yaml").write_text(text)
    smk, dvc = _snakemake_jobs(work), _dvc_stages(work)
    assert {f"{s}@{m}" for s in ("train", "probe", "books") for m in members} <= set(dvc)
    assert {f"rl.rungs.{r}" for r in ("cispo_repo", "cispo_repo_all", "cispo_all", "dapo_all")} <= \
        set(dvc["train@cispo_repo-s2"]["params"])
    assert dvc["train@cispo_repo-s2"]["params"] == dvc["train@cispo_repo"]["params"]
    _same_dag(smk, dvc)
    # a finished rung's probe and books start before the next rung's training when both are ready
    for m in members:
        assert smk[f"books@{m}"]["priority"] > smk[f"probe@{m}"]["priority"] > smk[f"train@{m}"]["priority"]
    readers = _holdout_readers(dvc)
    assert {r.split("@")[0] for r in readers} == {"probe", "books", "report"}
    assert {f"probe@{m}" for m in members} <= readers


def test_each_rung_declares_its_recipes_thread_budget(root, tmp_path):
    """A rung's train and probe jobs take as many cores as the larger of its recipe's torch and numba
    budgets (a rung's `set` can change them), so `snakemake --cores 2` runs two one-thread rungs at once
    and never two two-thread ones; the world model, SFT and filter stages take their params' `threads`."""
    work = _copy_workflow(root, tmp_path / "w", ladder=["dapo_all", "cispo_repo"])
    text = (work / "params.yaml").read_text()
    text, n = re.subn(r"^    torch_threads: \d+", "    torch_threads: 1", text, flags=re.M)
    text, m = re.subn(r"^    numba_threads: \d+", "    numba_threads: 1", text, flags=re.M)
    text, k = re.subn(r"^(    cispo_repo: \{.*set: \{)briefs: filtered\}", r"\1briefs: filtered, numba_threads: 3}",
                      text, flags=re.M)
    assert n == m == k == 1
    wm = text.index("\nworldmodel:")                   # and the world model's own budget, apart from the policy's
    text = text[:wm] + re.sub(r"^  threads: 2$", "  threads: 1", text[wm:], count=1, flags=re.M)
    (work / "params.yaml").write_text(text)
    table = stage_table(load_params(work / "params.yaml"))
    jobs = _snakemake_jobs(work, "--cores", "4")
    for key, want in (("train@dapo_all", 1), ("probe@dapo_all", 1), ("train@cispo_repo", 3),
                      ("probe@cispo_repo", 3)):
        assert table[key].threads == want, key
        assert jobs[key]["threads"] == want, key
    params = load_params(work / "params.yaml")
    assert params["worldmodel"]["threads"] == 1 and params["policy"]["threads"] == 2
    assert jobs["world_model"]["threads"] == table["world_model"].threads == 1
    assert jobs["sft@tiny"]["threads"] == jobs["filter"]["threads"] == table["filter"].threads == 2


def test_the_longest_rungs_start_first(root, tmp_path):
    """Training priority follows a rung's expected time (steps, a DoRA step weighted 1.5), so the DoRA rungs
    start before the LoRA ones and never run alone at the end; every rung's probe and books still outrank
    every training job, so a finished rung's results appear before the next rung starts."""
    work = _copy_workflow(root, tmp_path / "w", ladder=["dapo_all", "cispo_repo", "cispo_repo_dora"])
    text = (work / "params.yaml").read_text()
    # cispo_repo at 300 steps; its child cispo_repo_dora, which would inherit them, back at 600
    text, n = re.subn(r"^(    cispo_repo: \{.*set: \{)briefs: filtered\}", r"\1briefs: filtered, steps: 300}", text,
                      flags=re.M)
    text, m = re.subn(r"^(    cispo_repo_dora: \{.*set: \{)adapter: dora\}", r"\1adapter: dora, steps: 600}", text,
                      flags=re.M)
    assert n == m == 1
    (work / "params.yaml").write_text(text)
    table = stage_table(load_params(work / "params.yaml"))
    jobs = _snakemake_jobs(work)
    prio = {k: jobs[k]["priority"] for k in jobs}
    assert prio == {k: table[k].priority for k in prio if k != "all"} | {"all": prio["all"]}
    assert prio["train@cispo_repo_dora"] > prio["train@dapo_all"] > prio["train@cispo_repo"]
    # 600 DoRA steps (900 LoRA-step equivalents), 600 and 300 LoRA steps
    assert [prio[f"train@{r}"] for r in ("cispo_repo_dora", "dapo_all", "cispo_repo")] == [10, 7, 3]
    trains = [v for k, v in prio.items() if k.startswith("train@")]
    for r in ("dapo_all", "cispo_repo", "cispo_repo_dora"):
        assert prio[f"books@{r}"] > prio[f"probe@{r}"] > max(trains)


def _holdout_readers(stages: dict[str, dict]) -> set[str]:
    producer = {out: name for name, s in stages.items() for out in s["outs"]}

    def upstream(name, seen=None):
        seen = set() if seen is None else seen
        for dep in stages[name]["deps"]:
            if dep not in seen:
                seen.add(dep)
                if dep in producer:
                    upstream(producer[dep], seen)
        return seen

    holdout = [o for s in stages.values() for o in s["outs"] if o.endswith("panel/holdout.parquet")]
    assert len(holdout) == 1
    return {name for name in stages if holdout[0] in upstream(name)}


def test_no_stage_before_the_probe_reads_the_holdout(root, tmp_path):
    """Derived from DVC's own reading of dvc.yaml: follow every dependency chain back to holdout.parquet."""
    readers = _holdout_readers(_dvc_stages(_copy_workflow(root, tmp_path / "w")))
    assert {r.split("@")[0] for r in readers} <= HOLDOUT_READERS, f"stages reading the holdout: {readers}"


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
    p = updated(params, {"tracking.enabled": True})
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


def _git_dvc_repo(repo: Path, remote: Path, root: Path) -> None:
    """A git + DVC repository as a user's clone is: the repo's .gitignore (results/ is not in git: the remote
    carries it), the remote set as `make remote URL=...` sets it (an absolute path in .dvc/config.local)."""
    shutil.copy(root / ".gitignore", repo / ".gitignore")
    shutil.copytree(root / ".dvc", repo / ".dvc", ignore=shutil.ignore_patterns("tmp", "cache", "config.local"))
    for cmd in (["git", "init", "-q"], ["git", "config", "user.email", "t@t"], ["git", "config", "user.name", "t"]):
        subprocess.run(cmd, cwd=repo, check=True, env=_env(), capture_output=True)
    _set_remote(repo, remote)


def _set_remote(repo: Path, remote: Path) -> None:
    """What `make remote URL=...` runs (Makefile), in a clone."""
    subprocess.run([str(BIN / "dvc"), "remote", "add", "--local", "--default", "--force", "shared",
                    str(remote.resolve())], cwd=repo, check=True, env=_env(), capture_output=True)


def _wenv(work: Path) -> dict[str, str]:
    """The environment of a user in the copy `work`: its own code is what Snakemake, DVC and alphagym run (the
    tests edit it), with the venv's tools."""
    return {**_env(), "PYTHONPATH": str(work / "src")}


def _changed_outputs(cwd: Path) -> set[str]:
    """Outputs `snakemake --summary` would rebuild, whatever the reason (own change or upstream)."""
    out = subprocess.run([str(BIN / "snakemake"), "--summary"], cwd=cwd, capture_output=True, text=True,
                         env=_wenv(cwd), check=True).stdout
    return {cols[0] for line in out.splitlines()[1:] if len(cols := line.split("\t")) >= 6
            and cols[-1] != "no update"}


def _changed(cwd: Path) -> tuple[set[str], set[str]]:
    """(stages `snakemake --summary` marks changed themselves, stages `dvc status` reports changed).

    Not `snakemake --list-changes params`: in Snakemake 9.27 it lists every output with recorded params,
    changed or not (its ParamsChange iterates its files even when it is empty); `--summary` is right. Both
    tools only read, so they run side by side."""
    summary = subprocess.Popen([str(BIN / "snakemake"), "--summary"], cwd=cwd, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, text=True, env=_wenv(cwd))
    dvc = _dvc_changed(cwd)
    out = summary.communicate()[0]
    assert summary.returncode == 0, out[-3000:]
    smk = set()
    for line in out.splitlines()[1:]:
        cols = line.split("\t")
        # status "ok" with an update pending: downstream of a changed stage, which `dvc status` does not list
        # until the upstream outputs change; both tools name the stages changed themselves
        if len(cols) >= 6 and cols[-1] != "no update" and cols[-2] != "ok":
            smk.add((cols[2], cols[-2]))
    reasons = {r for _, r in smk}
    assert reasons <= {"params changed"}, reasons
    return {rule for rule, _ in smk}, dvc


def _dvc_changed(cwd: Path) -> set[str]:
    status = subprocess.run([str(BIN / "dvc"), "status", "--json"], cwd=cwd, capture_output=True, text=True,
                            env=_wenv(cwd), check=True).stdout
    return set(json.loads(status or "{}"))


def _planned(cwd: Path, *extra: str) -> set[str]:
    """The jobs `snakemake -n` plans (rule, or rule@wildcard), as a user sees them before running."""
    out = subprocess.run([str(BIN / "snakemake"), "-n", "--cores", "1", *extra], cwd=cwd, capture_output=True,
                         text=True, env=_wenv(cwd), check=True).stdout
    jobs, rule = set(), None
    for line in out.splitlines():
        if m := re.match(r"^(?:local)?rule (\w+):", line):
            rule = m.group(1)
            if rule != "all":
                jobs.add(rule)
        elif rule and (m := re.match(r"^\s+wildcards: \w+=(\S+)", line)):
            jobs.discard(rule)
            jobs.add(f"{rule}@{m.group(1)}")
    return jobs


def _edit(path: Path, old: str, new: str) -> str:
    text = path.read_text()
    assert text.count(old) == 1, old
    path.write_text(text.replace(old, new))
    return text


@pytest.mark.slow(minutes=10)
def test_snakemake_run_reruns_on_params_and_code_and_agrees_with_dvc(root, tmp_path):
    """The smoke DAG under Snakemake, as a user meets it: every stage runs and logs to MLflow (each rung's resolved
    recipe); the run is recorded in dvc.lock and the DVC cache and `snakemake -n` then plans nothing, also after
    a manual `dvc commit --no-relink`; a changed param, source file or params schema makes Snakemake and DVC
    name the same stages, and only the stages that read it (with what reads their outputs); `dvc push` sends
    every output and a second clone (its own remote set-up, its own bytecode) pulls the same bytes, with `dvc
    status` clean, nothing planned by Snakemake, and the report and `score` running on the pulled artifacts;
    `dvc exp run -S` reruns exactly the stages its key reaches and `dvc exp show` lists the variant beside the
    baseline (one DAG run for all of it: the suite's longest test)."""
    work = _copy_workflow(root, tmp_path / "w", profile="smoke", ladder=list(SMOKE_LADDER))
    remote = tmp_path / "shared store"
    _git_dvc_repo(work, remote, root)
    env = _wenv(work)
    run = subprocess.run([str(BIN / "snakemake"), "--cores", "2"], cwd=work, env=env, capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr[-3000:]
    keys = list(stage_table(load_params(work / "params.yaml")))
    assert f"recorded {', '.join(keys)} in dvc.lock" in run.stdout + run.stderr
    summary = json.loads((work / "results/smoke/panel/summary.json").read_text())
    assert summary["train_first"] == "2023-01-03" and summary["holdout_sessions"] == 252
    # the smoke profile's own MLflow store, under its own results folder
    assert not (work / "results/mlflow").exists()
    db = sqlite3.connect(work / "results/smoke/mlflow/mlflow.db")
    names = sorted(r[0] for r in db.execute("select name from runs where status='FINISHED'"))
    # every stage's run, and the report's parent run of each rung (its replicas' train runs as children)
    assert [n for n in names if not n.startswith("rung@")] == sorted(stage_table(load_params(work / "params.yaml")))
    assert {n for n in names if n.startswith("rung@")} == {f"rung@{r}" for r in SMOKE_LADDER}
    assert dict(db.execute("select key, value from tags where key='alphagym.profile'").fetchall()) == \
        {"alphagym.profile": "smoke"}
    # what each rung ran, as the compare view shows it: the resolved recipe, not the base recipe
    logged = {}
    for name, key, value in db.execute("select r.name, p.key, p.value from params p join runs r "
                                       "on p.run_uuid = r.run_uuid where r.name like 'train@%'"):
        logged.setdefault(name, {})[key] = value
    assert logged["train@dapo_all"]["recipe.loss"] == "dapo" and logged["train@cispo_repo"]["recipe.loss"] == "cispo"
    assert logged["train@dapo_all"]["recipe.steps"] == "4"          # the smoke profile's, as it ran
    assert not any(k.startswith("rl.recipe") for k in logged["train@dapo_all"])
    # brief decoding through the SFT evaluation and the probe: every valid answer keeps its brief (the smoke
    # policy's greedy answers may all be cut at the smoke cap of 32 tokens: its sampled ones are not)
    sft = pd.read_parquet(work / "results/smoke/sft/tiny/holdout_answers.parquet")
    assert sft["valid"].any() and (sft.loc[sft["valid"], "compliance"] == 1.0).all()
    assert sft.loc[sft["valid"], "idea_fidelity"].between(0, 1).all()
    report = json.loads((work / "results/smoke/sft/tiny/report.json").read_text())
    # free sampling by the smoke policy may write no valid answer: its share is then undefined (nan)
    free_idea = report["after_free"]["compliance_idea"]
    assert 0 <= report["after"]["compliance_idea"] <= 1 and (math.isnan(free_idea) or 0 <= free_idea <= 1)
    # the reading measure of the free answers, beside the random formulas' baseline on the same briefs
    assert 0 <= report["after_reading"]["parse"] <= 1 and 0 <= report["after_reading"]["random_checks"] <= 1
    for rung in SMOKE_LADDER:
        answers = pd.read_parquet(work / f"results/smoke/probe/tiny/{rung}/answers.parquet")
        valid = answers[answers["valid"]]
        assert valid["compliant"].all(), valid[["brief", "answer", "compliance"]].to_string()
        checkpoints = pd.read_parquet(work / f"results/smoke/probe/tiny/{rung}/checkpoints.parquet")
        assert "compliance_idea" in checkpoints
        # the share of greedy answers whose requirement the brief decoder wrote (0 under the grammar:
        # tests/test_probe.py)
        assert checkpoints["forced_lacking"].between(0, 1).all(), checkpoints["forced_lacking"]
        by_check = checkpoints[[f"forced_lacking_{k}" for k in ("mechanism", "horizon", "input_rule", "structure")]]
        assert (by_check.le(checkpoints["forced_lacking"], axis=0)).all().all(), by_check
        assert checkpoints["reading_parse"].between(0, 1).all(), checkpoints["reading_parse"]
    assert _changed(work) == (set(), set())
    assert _planned(work) == set()
    # the commit a user runs after rendering dvc.yaml for a profile leaves the outputs' mtimes alone
    subprocess.run([str(BIN / "dvc"), "commit", "--force", "--quiet", "--no-relink"], cwd=work, env=env, check=True)
    assert _planned(work) == set() and _dvc_changed(work) == set()

    params_text = (work / "params.yaml").read_text()
    (work / "params.yaml").write_text(params_text.replace("purge: 10 ", "purge: 11 "))
    # every stage that scores with the verifier (a family member is rule `sft` in Snakemake, `sft@tiny` in DVC)
    ladder = SMOKE_LADDER
    assert _changed(work) == ({"archive", "world_model", "corpus", "sft", "filter", "train", "probe", "books"},
                              {"archive", "world_model", "corpus", "sft@tiny", "filter",
                               *(f"{s}@{r}" for s in ("train", "probe", "books") for r in ladder)})
    # a param that one late stage reads: that stage and what reads its outputs, nothing upstream
    (work / "params.yaml").write_text(params_text.replace("down_day: -0.015", "down_day: -0.02"))
    books = {f"books@{r}" for r in ladder}
    assert _changed(work) == ({"books", "report"}, {*books, "report"})
    assert _planned(work) == {*books, "report"}
    # one rung's recipe changed: that rung, its probe and the report, nothing of the other rung
    lr_changed = params_text.replace("cispo_repo: {parent: cispo_repo_all, set: {briefs: filtered}}",
                                     "cispo_repo: {parent: cispo_repo_all, set: {briefs: filtered, lr: 1.0e-4}}")
    (work / "params.yaml").write_text(lr_changed)
    assert _changed(work) == ({"train", "probe", "report"}, {"train@cispo_repo", "probe@cispo_repo", "report"})
    stale = _changed_outputs(work)
    assert stale and all("cispo_repo" in o or "/report/" in o for o in stale), stale
    # an ancestor's: cispo_repo inherits dapo_all's change through its chain of parents, so both rerun
    (work / "params.yaml").write_text(params_text.replace(
        "set: {loss: dapo, repo.enabled: false, briefs: all}}", "set: {loss: dapo, repo.enabled: false, briefs: all, "
        "lr: 1.0e-4}}"))
    both = {f"{s}@{r}" for s in ("train", "probe") for r in ladder}
    assert _changed(work) == ({"train", "probe", "report"}, {*both, "report"})
    (work / "params.yaml").write_text(params_text)
    model = work / "src/alphagym/worldmodel/model.py"
    source = model.read_text()
    model.write_text(source + "\n# a change to the world model's code\n")
    assert _changed(work) == ({"world_model"}, {"world_model"})
    model.write_text(source)
    # the schema of one params section (a Probe field's description): the probe, then what reads its outputs;
    # the stage specs are rendered with dvc.yaml, as after any edit of params.py or the stage table
    schema = _edit(work / "src/alphagym/params.py", 'description="sampled answers per holdout brief for pass@k',
                   'description="sampled answers per holdout brief, for pass@k')
    subprocess.run([str(BIN / "alphagym"), "dag", "--write-dvc", "dvc.yaml"], cwd=work, env=env, check=True,
                   capture_output=True)
    probes = {f"probe@{r}" for r in ladder}
    assert _changed(work) == ({"probe"}, probes)
    assert _planned(work) == {*probes, *books, "report"}
    (work / "src/alphagym/params.py").write_text(schema)
    subprocess.run([str(BIN / "alphagym"), "dag", "--write-dvc", "dvc.yaml"], cwd=work, env=env, check=True,
                   capture_output=True)
    assert _changed(work) == (set(), set())

    # sharing: every output travels through the remote, metrics included (results/ is not in git)
    push = subprocess.run([str(BIN / "dvc"), "push"], cwd=work, env=env, capture_output=True, text=True)
    assert push.returncode == 0 and "pushed" in push.stdout, push.stdout + push.stderr
    for cmd in (["git", "add", "-A"], ["git", "commit", "-qm", "smoke run"]):
        subprocess.run(cmd, cwd=work, check=True, env=env, capture_output=True)
    assert not subprocess.run(["git", "ls-files", "results"], cwd=work, capture_output=True, text=True).stdout
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(work), str(clone)], check=True, env=_env(), capture_output=True)
    _set_remote(clone, remote)
    cenv = _wenv(clone)
    subprocess.run([sys.executable, "-m", "compileall", "-q", "src"], cwd=clone, check=True)   # its own bytecode
    subprocess.run([str(BIN / "dvc"), "pull"], cwd=clone, check=True, env=cenv, capture_output=True)
    for st in stage_table(load_params(work / "params.yaml")).values():
        for out in st.outs.values():
            # Snakemake's marker in a directory output is .dvcignore'd: it is the sender's, not an output
            files = sorted(f.relative_to(work) for f in (work / out).rglob("*")
                           if f.is_file() and f.name != ".snakemake_timestamp") \
                if (work / out).is_dir() else [Path(out)]
            for f in files:
                assert (clone / f).read_bytes() == (work / f).read_bytes(), f
    assert _dvc_changed(clone) == set()
    # `make pull`'s last step: Snakemake records the pulled outputs as up to date, in dependency order
    touch = subprocess.run([str(BIN / "snakemake"), "--touch", "--forceall", "--cores", "1", "--quiet"], cwd=clone,
                           env=cenv, capture_output=True, text=True)
    assert touch.returncode == 0, touch.stderr[-3000:]
    assert _planned(clone) == set() and _dvc_changed(clone) == set()
    assert _changed(clone) == (set(), set())
    for cmd in (["report"], ["score", "rank(ts_delta(close, 5))", "--json", "--no-server"]):
        done = subprocess.run([str(BIN / "alphagym"), *cmd, "--set", "profile=smoke"], cwd=clone, env=cenv,
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["valid"] is True
    # `alphagym propose` answers from the pulled artifacts with the holdout panel absent (it never reads it):
    # every valid answer passes every hard check of its brief
    holdout = clone / stage_table(load_params(clone / "params.yaml", ["profile=smoke"]))["panel"].outs["holdout"]
    holdout.rename(holdout.with_name("away.parquet"))
    try:
        done = subprocess.run([str(BIN / "alphagym"), "propose", "--set", "profile=smoke", "--mechanism", "reversal",
                               "--horizon", "21", "--inputs", "price_only", "--structure", "ranked", "--forbidden",
                               "no_argext", "-k", "16", "--book", "--json"], cwd=clone, env=cenv,
                              capture_output=True, text=True)
    finally:
        holdout.with_name("away.parquet").rename(holdout)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Loading weights" not in done.stderr        # no loading bar around the answers
    [proposed] = json.loads(done.stdout)["briefs"]
    assert proposed["constrained"] == "brief" and proposed["answers"] == 16, proposed
    assert all(r["compliant"] and all(r["checks"].values()) for r in proposed["proposals"]), proposed
    # the table's form of each answer is the printer's, of the formula as written
    assert all(r["written"] == plain(parse(r["formula"])) for r in proposed["proposals"]), proposed
    # every dropped answer is accounted for by its reason
    assert proposed["valid"] + sum(proposed.get("invalid", {}).values()) == 16, proposed
    # the report rerun by hand writes the bytes the sender's Snakemake run wrote (.dvcignore: Snakemake's
    # timestamp file in a directory output is not part of it)
    assert _dvc_changed(clone) == set()
    # the receiver's params edit is seen by both tools (Snakemake recorded what it touched)
    (clone / "params.yaml").write_text((clone / "params.yaml").read_text().replace("down_day: -0.015",
                                                                                   "down_day: -0.02"))
    assert _changed(clone) == ({"books", "report"}, {*books, "report"})

    _killed_rung_resumes(work)       # on the DAG just built: the rung's upstream outputs are there
    _experiment_variant(work)


def _experiment_variant(work: Path) -> None:
    """`dvc exp run -S` on the smoke profile: DVC runs a variant without an edit of params.yaml, exactly the
    stages that read the changed key and what reads their outputs, and `dvc exp show` lists it beside the
    baseline; params.yaml as DVC rewrites it (YAML 1.2) still loads."""
    env = _wenv(work)
    subprocess.run([str(BIN / "dvc"), "checkout", "--force"], cwd=work, env=env, check=True, capture_output=True)
    subprocess.run(["git", "checkout", "--", "."], cwd=work, env=env, check=True, capture_output=True)
    exp = subprocess.run([str(BIN / "dvc"), "exp", "run", "-n", "downday", "-S", "books.down_day=-0.02"],
                         cwd=work, env=env, capture_output=True, text=True)
    assert exp.returncode == 0, exp.stdout[-3000:] + exp.stderr[-3000:]
    ran = set(re.findall(r"Running stage '([^']+)'", exp.stdout))
    assert ran == {*(f"books@{r}" for r in SMOKE_LADDER), "report"}, ran
    table = subprocess.run([str(BIN / "dvc"), "exp", "show", "--csv", "--param-deps"], cwd=work, env=env,
                           capture_output=True, text=True, check=True).stdout
    assert "downday" in table and "-0.02" in table, table[:3000]


def _killed_rung_resumes(work: Path) -> None:
    """`alphagym train --rung` killed with SIGKILL after its first checkpoint: the rerun says it resumes
    from that checkpoint, finishes, and its log equals the uninterrupted run's (the DAG's own run of the rung
    under the same recipe; timings aside). A checkpoint met by another recipe, or by fewer steps than it has
    done, is refused in tests/test_training_state.py."""
    import signal
    import time

    base = [str(BIN / "alphagym"), "train", "--rung", "cispo_repo", "--set", "tracking.enabled=false",
            "--set", "rl.recipe.steps=4", "--set", "rl.recipe.checkpoint_every=2"]
    params = load_params(work / "params.yaml")
    assert (params["rl"]["recipe"]["steps"], params["rl"]["recipe"]["checkpoint_every"]) == (4, 2)
    logged = work / "results/smoke/rl/tiny/cispo_repo/log.jsonl"
    # measurements, not results: times, and the card cache's hit rate (the cache starts empty on resume)
    drop = ("step_time", "time/generation", "time/scoring", "time/reference", "time/update",
            "verifier/cache_hit_rate")

    def steps(path: Path) -> list[dict]:
        return [{k: v for k, v in json.loads(line).items() if k not in drop} for line in path.read_text().splitlines()]

    def kill_after_first_checkpoint() -> None:
        proc = subprocess.Popen(base, cwd=work, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 300
        while not (wdir / "checkpoint-000002").is_dir() and time.time() < deadline and proc.poll() is None:
            time.sleep(0.2)
        proc.send_signal(signal.SIGKILL)
        proc.wait()

    want = steps(logged)
    assert [r["step"] for r in want] == [1, 2, 3, 4]
    # rollouts under the grammar (the default): refused candidates per token drawn, logged every step
    assert all(r["decoding/rejected_share"] >= 0 and r["decoding/dead_ends"] >= 0 for r in want)
    wdir = work / "results/smoke/rl/tiny/cispo_repo/work"
    kill_after_first_checkpoint()
    assert (wdir / "checkpoint-000002").is_dir()
    assert not (work / "results/smoke/rl/tiny/cispo_repo/summary.json").exists()
    again = subprocess.run(base, cwd=work, env=_env(), capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming from" in again.stdout and "checkpoint-000002" in again.stdout
    assert steps(logged) == want
    summary = json.loads((work / "results/smoke/rl/tiny/cispo_repo/summary.json").read_text())
    assert summary["resumed_from"] == "checkpoint-000002"
    assert not wdir.exists()


def test_make_pull_names_a_lock_recorded_for_another_profile(root, tmp_path):
    """A dvc.lock recorded for the smoke profile, pulled as the default profile: `dvc pull` would fetch
    nothing for it and Snakemake would plan every stage; the check names both profiles and the command."""
    import yaml

    from alphagym.pipeline import lock_mismatch

    smoke = load_params(root / "params.yaml", ["profile=smoke"])
    default = load_params(root / "params.yaml")

    def lock(params):
        # as DVC records it: params.yaml's own `profile` key stays `default`; the profile is in each command
        stages = {k: {"cmd": s.cmd, "params": {"params.yaml": {"profile": "default"}},
                      "outs": [{"path": p, "md5": "0"} for p in s.outs.values()]}
                  for k, s in stage_table(params).items()}
        path = tmp_path / f"{params['profile']}.lock"
        path.write_text(yaml.safe_dump({"schema": "2.0", "stages": stages}))
        return path

    said = lock_mismatch(default, lock(smoke))
    assert said is not None and "profile 'smoke'" in said and "profile 'default'" in said, said
    assert "make pull PROFILE=smoke" in said and "results/smoke/" in said
    assert lock_mismatch(smoke, lock(smoke)) is None and lock_mismatch(default, lock(default)) is None
    assert "is missing" in lock_mismatch(default, tmp_path / "none.lock")
    out = subprocess.run([str(BIN / "alphagym"), "dag", "--check-lock", str(lock(smoke))], cwd=root,
                         capture_output=True, text=True, env=_env())
    assert out.returncode != 0 and "make pull PROFILE=smoke" in out.stderr and "Traceback" not in out.stderr


def test_the_dvc_sentinel_keeps_its_outputs_in_place(root):
    """The first stage reruns on any edit of the profile block: DVC keeps its outputs (`persist`), so that
    writing the same bytes again leaves their mtimes (tests/test_stages.py) and Snakemake plans nothing below."""
    import yaml

    for extra in ([], ["profile=smoke"]):
        p = load_params(root / "params.yaml", extra)
        stages = yaml.safe_load(dvc_yaml(p, params_file=root / "params.yaml"))["stages"]
        first = next(iter(stages))
        assert all(isinstance(o, dict) and next(iter(o.values())) == {"persist": True}
                   for o in stages[first]["outs"]), stages[first]["outs"]
        assert all(isinstance(o, str) for name, body in stages.items() if name != first
                   for o in (body.get("do") or body).get("outs", []))
