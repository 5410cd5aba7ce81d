"""MLflow tracking under what a pipeline does to it: failures, signals, kills, parallel starts, moved folders."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from alphagym.config import load_params
from alphagym.stages import run_stage
from alphagym.tracking import stage_run

BIN = Path(sys.executable).parent
ENV = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}


def _params(root: Path, results: Path, *extra: str):
    return load_params(root / "params.yaml", ["profile=smoke", f"paths.results={results}",
                                              f"tracking.uri={results}/mlflow/mlflow.db", *extra])


def _runs(results: Path) -> list[tuple[str, str]]:
    db = sqlite3.connect(results / "mlflow/mlflow.db")
    try:
        return db.execute("select name, status from runs order by start_time").fetchall()
    finally:
        db.close()


def test_failed_and_interrupted_stages_end_their_runs(root, tmp_path):
    p = _params(root, tmp_path)
    with stage_run("a", p):
        pass
    with pytest.raises(RuntimeError), stage_run("b", p):
        raise RuntimeError("boom")
    with pytest.raises(KeyboardInterrupt), stage_run("c", p):
        raise KeyboardInterrupt
    assert _runs(tmp_path) == [("a", "FINISHED"), ("b", "FAILED"), ("c", "KILLED")]


def _wait_running(results: Path, name: str, proc: subprocess.Popen, timeout: float = 120) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        assert proc.poll() is None, proc.communicate()
        if (results / "mlflow/mlflow.db").is_file():
            try:
                if (name, "RUNNING") in _runs(results):
                    return
            except sqlite3.OperationalError:
                pass
        time.sleep(0.1)
    raise AssertionError("the stage never started its run")


def test_a_signal_while_the_run_is_being_written_still_ends_it_killed(root, tmp_path, monkeypatch):
    """SIGTERM that lands while the store is writing the run's params (between the run's creation and the
    stage's body) waits until the run can end: the run ends KILLED, not left RUNNING by an exit raised in the
    middle of a store write."""
    from mlflow.tracking import MlflowClient

    from alphagym.cli import _exit_on_signal

    real = MlflowClient.log_batch

    def log_batch_then_term(self, *a, **k):
        os.kill(os.getpid(), signal.SIGTERM)
        return real(self, *a, **k)

    monkeypatch.setattr(MlflowClient, "log_batch", log_batch_then_term)
    old = signal.signal(signal.SIGTERM, _exit_on_signal)
    try:
        with pytest.raises(SystemExit) as exc, stage_run("world_model", _params(root, tmp_path)):
            raise AssertionError("the stage's body ran after a SIGTERM")
    finally:
        signal.signal(signal.SIGTERM, old)
    assert exc.value.code == 128 + signal.SIGTERM
    assert _runs(tmp_path) == [("world_model", "KILLED")]


def test_a_run_that_fails_to_start_gives_the_signal_handlers_back(root, tmp_path, monkeypatch):
    """The handlers held while the run is written are restored when the run cannot be created, and after a
    run ends: the process stops on SIGTERM as before."""
    import alphagym.tracking as tracking

    mine = lambda num, frame: None      # noqa: E731
    old = signal.signal(signal.SIGTERM, mine)
    try:
        with stage_run("a", _params(root, tmp_path)):
            assert signal.getsignal(signal.SIGTERM) is mine
        assert signal.getsignal(signal.SIGTERM) is mine

        from mlflow.tracking import MlflowClient

        def broken(*a, **k):
            raise OSError("no store")

        monkeypatch.setattr(MlflowClient, "create_run", broken)
        monkeypatch.setattr(tracking, "with_lock_retry", lambda fn, *a: fn())
        with pytest.raises(OSError, match="no store"), stage_run("b", _params(root, tmp_path)):
            pass
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, old)


@pytest.mark.slow(minutes=1)
def test_terminated_stage_ends_killed_and_a_hard_kill_is_cleaned_up_next_time(root, tmp_path):
    """SIGTERM: the run ends KILLED and the stage leaves no outputs. SIGKILL: the run stays RUNNING
    (nothing can run in a killed process) until the same stage starts again and marks it KILLED."""
    p = _params(root, tmp_path, "tracking.enabled=false")
    run_stage(p, "download")
    run_stage(p, "panel")
    cmd = [str(BIN / "alphagym"), "world-model", "--params", str(root / "params.yaml"), "--set", "profile=smoke",
           "--set", f"paths.results={tmp_path}", "--set", f"tracking.uri={tmp_path}/mlflow/mlflow.db"]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_running(tmp_path, "world_model", proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM
    assert _runs(tmp_path) == [("world_model", "KILLED")]
    assert not (tmp_path / "world_model/gates.json").exists()

    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_running(tmp_path, "world_model", proc)
    proc.kill()
    proc.wait(timeout=60)
    assert _runs(tmp_path)[-1] == ("world_model", "RUNNING")
    with stage_run("world_model", _params(root, tmp_path)):
        pass
    assert _runs(tmp_path) == [("world_model", "KILLED"), ("world_model", "KILLED"), ("world_model", "FINISHED")]


SNIPPET = """
import sys
from alphagym.config import load_params
from alphagym.tracking import stage_run
p = load_params(sys.argv[1], ["profile=smoke", "paths.results=" + sys.argv[2],
                              "tracking.uri=" + sys.argv[2] + "/mlflow/mlflow.db"])
with stage_run(sys.argv[3], p) as run:
    run.log_metrics({"x": 1.0})
"""


def test_stages_started_at_once_on_a_new_store(root, tmp_path):
    """Four processes creating the same new store at once all succeed (the store is created once, under a
    file lock; table-creation races are retried)."""
    for attempt in range(1):
        results = tmp_path / f"r{attempt}"
        procs = [subprocess.Popen([sys.executable, "-c", SNIPPET, str(root / "params.yaml"), str(results), f"s{i}"],
                                  env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for i in range(4)]
        outs = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0] * 4, [o[1][-2000:] for o in outs]
        assert sorted(_runs(results)) == [(f"s{i}", "FINISHED") for i in range(4)]


def test_a_copied_results_folder_keeps_its_artifacts_to_itself(root, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    note = tmp_path / "note.txt"
    note.write_text("hello")
    with stage_run("first", _params(root, a)) as run:
        run.log_artifact(note)
    shutil.copytree(a, b)
    with pytest.warns(UserWarning, match="moved or copied"), stage_run("second", _params(root, b)) as run:
        run.log_artifact(note)
    in_a = sorted(f.relative_to(a) for f in a.rglob("note.txt"))
    in_b = sorted(f.relative_to(b) for f in b.rglob("note.txt"))
    assert len(in_a) == 1 and len(in_b) == 2                     # the copy's new run wrote into the copy
    db = sqlite3.connect(b / "mlflow/mlflow.db")
    uris = [u for (u,) in db.execute("select artifact_uri from runs")]
    db.close()
    assert all(u.startswith(str(b / "mlflow/artifacts")) for u in uris), uris
