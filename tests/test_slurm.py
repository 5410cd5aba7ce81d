"""The `slurm` Snakemake profile against real SLURM daemons: a one-node cluster on this machine
(tests/slurm/local_cluster.sh) runs the smoke DAG (two rungs) through snakemake-executor-plugin-slurm, one
cluster job per stage. It takes about 6 minutes on 2 cores, so it runs only when asked:
`ALPHAGYM_SLURM=1 pytest tests/test_slurm.py` (as root, with SLURM installed). The run has a hard timeout, so
a status query that never answers fails the test instead of hanging it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from test_pipeline import BIN, SMOKE_LADDER, _copy_workflow, _env

HERE = Path(__file__).resolve().parent


@pytest.mark.slow(minutes=6)
def test_the_smoke_dag_runs_on_a_one_node_slurm_cluster(root, tmp_path):
    if os.environ.get("ALPHAGYM_SLURM") != "1":
        pytest.skip("the one-node SLURM run (6 min) runs with ALPHAGYM_SLURM=1")
    missing = [b for b in ("slurmctld", "slurmd", "munged", "sbatch") if shutil.which(b) is None]
    if missing:
        pytest.skip(f"SLURM not installed ({', '.join(missing)} not found; apt-get install slurm-wlm munge)")
    if os.geteuid() != 0:
        pytest.skip("starting the SLURM daemons needs root")
    setup = subprocess.run(["bash", str(HERE / "slurm" / "local_cluster.sh")], capture_output=True, text=True,
                           timeout=120)
    assert setup.returncode == 0, setup.stderr
    work = _copy_workflow(root, tmp_path / "w", profile="smoke", ladder=list(SMOKE_LADDER))
    try:
        run = subprocess.run([str(BIN / "snakemake"), "--profile", "workflow/profiles/slurm", "--slurm-no-account"],
                             cwd=work, env=_env(), capture_output=True, text=True, timeout=1800)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"the SLURM run did not finish in 30 minutes: {str(exc.stderr)[-3000:]}")
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-4000:]
    assert "executor plugin: slurm" in log.lower() or "slurm" in log.lower()
    submitted = [line for line in log.splitlines() if "submitted" in line.lower() and "slurm" in line.lower()]
    assert len(submitted) >= 10, log[-4000:]        # one cluster job per stage, not a local run
    logs = list((work / ".snakemake" / "slurm_logs").rglob("*.log"))
    assert logs, "no SLURM job logs kept"
    assert (work / "results/smoke/report/tiny/report.md").is_file()
    (tmp_path / "slurm_run.log").write_text(log)
