"""MLflow tracking through one small module: one run per stage execution.

sqlite backend under <paths.results>/mlflow (each results folder, so each profile, has a store of its own),
artifacts beside it, params flattened; git commit, profile, results folder and DVC stage as tags. Robust to
what a pipeline does to it:
- parallel Snakemake jobs share one sqlite file: the store and the experiment are created under a file
  lock, and every call retries on "database is locked" (and on the table-creation races of a new store);
- a stage that raises ends its run FAILED; one interrupted or terminated (Ctrl-C, SIGTERM) ends it KILLED;
  a run left RUNNING by a process that no longer exists (SIGKILL, power loss) is marked KILLED when the
  same stage next starts;
- MLflow stores absolute artifact paths; when the results folder has moved or been copied, the store's
  paths are rewritten to the folder it is in now, so a copy never writes into the original.
"""

from __future__ import annotations

import atexit
import contextlib
import math
import os
import signal
import socket
import sqlite3
import subprocess
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from alphagym.params import Params, Tracking

T = TypeVar("T")


def flatten(d: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            out.update(flatten(v, key))
        else:
            out[key] = str(v)[:6000]
    return out


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


# sqlite under concurrent writers; and MLflow's schema creation racing in two processes on a new store
RETRYABLE = ("database is locked", "already exists", "duplicate column name")


def with_lock_retry(fn: Callable[[], T], retries: int, backoff: float) -> T:
    """Retry `fn` while sqlite says the database is locked (parallel stages writing at once)."""
    for attempt in range(retries):
        try:
            return fn()
        except Exception as exc:
            if not any(m in str(exc) for m in RETRYABLE) or attempt == retries - 1:
                raise
            time.sleep(backoff * (2**attempt))
    raise AssertionError("unreachable")


class StageRun:
    """Handle given to a stage: log metrics and artifacts; a no-op when tracking is disabled."""

    def __init__(self, client: Any, run_id: str | None, retries: int, backoff: float, code: str = "") -> None:
        self.client, self.run_id, self.retries, self.backoff = client, run_id, retries, backoff
        # the sha256 of the code the stage runs (its declared code deps): a stage that continues work of an
        # earlier run (a rung's checkpoints) continues only work of the same code
        self.code = code

    def _call(self, fn: Callable[[], Any]) -> None:
        if self.run_id is not None:
            with_lock_retry(fn, self.retries, self.backoff)

    def log_metrics(self, metrics: Mapping[str, float], step: int | None = None) -> None:
        from mlflow.entities import Metric

        ts = int(time.time() * 1000)
        items = [Metric(k, float(v), ts, step or 0) for k, v in metrics.items()]
        self._call(lambda: self.client.log_batch(self.run_id, metrics=items))

    def log_artifact(self, path: str | Path) -> None:
        self._call(lambda: self.client.log_artifact(self.run_id, str(path)))

    def set_tag(self, key: str, value: str) -> None:
        self._call(lambda: self.client.set_tag(self.run_id, key, value))

    def log_params(self, params: Mapping[str, Any]) -> None:
        """Params beside the stage's declared keys (a rung's resolved recipe); values as text, as MLflow keeps
        them. A key already logged with another value is an MLflow error, so each key is logged once."""
        from mlflow.entities import Param

        items = [Param(k[:250], str(v)[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self._call(lambda c=items[i:i + 100]: self.client.log_batch(self.run_id, params=c))

    def log_rung(self, rung: Any) -> None:
        """What a ladder member ran (`alphagym.rungs.ResolvedRung.tracked`): its resolved recipe as
        `recipe.*` params, its parent, change and seed, and rung, replica, item, parent and change as tags, so
        that the MLflow UI compares two rungs' runs on what each ran."""
        params, tags = rung.tracked()
        self.log_params(params)
        for key, value in tags.items():
            self.set_tag(key, value)

    def nest_under(self, stage: str) -> str | None:
        """Make this run a child of the latest finished run of `stage` (the probe of a rung under the rung's
        training run, so the MLflow UI shows them together); returns the parent's id, None if none ran."""
        if self.run_id is None:
            return None
        run = self.client.get_run(self.run_id)
        found = self.client.search_runs([run.info.experiment_id], filter_string=f"tags.`alphagym.stage` = "
                                        f"'{stage}' and attributes.status = 'FINISHED'",
                                        order_by=["attributes.start_time DESC"], max_results=1)
        if not found:
            return None
        parent = found[0].info.run_id
        self.set_tag("mlflow.parentRunId", parent)
        return parent


    def log_rung_parents(self, rungs: Sequence[Mapping[str, Any]]) -> dict[str, str]:
        """One parent run per rung of the ladder, so that MLflow's compare view of the parents reads as the
        report's ladder table: run `rung@NAME` (tags `alphagym.kind` = rung, `rung`), with the rung's resolved
        recipe and change as params and its numbers over the replicas as metrics (each rung: `name`, `params`,
        `metrics`, `items`, its replicas). The latest finished train run of each replica becomes its child
        (its probe stays nested under it). A report run replaces the previous parent runs: they are deleted
        once their children have moved. Returns rung -> parent run id; nothing when tracking is off."""
        if self.run_id is None:
            return {}

        exp_id = self.client.get_run(self.run_id).info.experiment_id
        return {str(r["name"]): self._rung_parent(exp_id, r) for r in rungs}

    def _find(self, exp_id: str, filter_string: str) -> list[Any]:
        return list(with_lock_retry(lambda: self.client.search_runs(
            [exp_id], filter_string=filter_string, order_by=["attributes.start_time DESC"]), self.retries,
            self.backoff))

    def _rung_parent(self, exp_id: str, rung: Mapping[str, Any]) -> str:
        from mlflow.entities import Metric, Param

        name, ts = str(rung["name"]), int(time.time() * 1000)
        old = self._find(exp_id, f"tags.`alphagym.kind` = 'rung' and tags.rung = '{name}'")
        tags = {"alphagym.kind": "rung", "alphagym.stage": f"rung@{name}", "rung": name,
                "alphagym.report_run": str(self.run_id)}
        rid = with_lock_retry(lambda: self.client.create_run(exp_id, run_name=f"rung@{name}", tags=tags),
                              self.retries, self.backoff).info.run_id
        params = [Param(k, str(v)[:6000]) for k, v in rung["params"].items()]
        metrics = [Metric(k, float(v), ts, 0) for k, v in rung["metrics"].items()
                   if isinstance(v, int | float) and math.isfinite(float(v))]
        with_lock_retry(lambda: self.client.log_batch(rid, metrics=metrics, params=params), self.retries,
                        self.backoff)
        for item in rung["items"]:
            child = self._find(exp_id, f"tags.`alphagym.stage` = 'train@{item}' and attributes.status = 'FINISHED'")
            if child:
                self._call(lambda c=child[0]: self.client.set_tag(c.info.run_id, "mlflow.parentRunId", rid))
        with_lock_retry(lambda: self.client.set_terminated(rid, status="FINISHED"), self.retries, self.backoff)
        for o in old:
            self._call(lambda o=o: self.client.delete_run(o.info.run_id))
        return str(rid)


_OPEN: dict[str, StageRun] = {}


@atexit.register
def _kill_open_runs() -> None:
    """An interpreter that exits with a run still open (a signal turned into SystemExit elsewhere, a
    thread calling sys.exit) ends it KILLED rather than leaving it RUNNING."""
    for handle in list(_OPEN.values()):
        with contextlib.suppress(Exception):
            handle.client.set_terminated(handle.run_id, status="KILLED")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _relocate(db: Path, experiment: Any, root: Path) -> None:
    """Point the store's artifact paths at `root` when the results folder moved or was copied."""
    old = experiment.artifact_location.removeprefix("file://")
    if Path(old) == root:
        return
    con = sqlite3.connect(db)
    try:
        with con:
            con.execute("UPDATE experiments SET artifact_location = ? WHERE experiment_id = ?",
                        (str(root), int(experiment.experiment_id)))
            con.execute("UPDATE runs SET artifact_uri = ? || substr(artifact_uri, ?) WHERE experiment_id = ? "
                        "AND substr(artifact_uri, 1, ?) = ?",
                        (str(root), len(old) + 1, int(experiment.experiment_id), len(old), old))
    finally:
        con.close()
    warnings.warn(f"MLflow store {db} was made for artifacts in {old}; moved them to {root} (the results "
                  "folder was moved or copied)", stacklevel=3)


def store_path(params: Params) -> Path:
    """The sqlite store of a results folder: `tracking.uri` under `paths.results` (or `tracking.uri` itself
    when absolute), so each profile, and each `--set paths.results=...`, logs to a store of its own."""
    return (Path(params.paths.results) / params.tracking.uri).resolve()


def _open_store(cfg: Tracking, db: Path, retries: int, backoff: float) -> tuple[Any, str]:
    """The MLflow client and the experiment id, creating store and experiment once, under a file lock."""
    from filelock import FileLock
    from mlflow.tracking import MlflowClient

    db.parent.mkdir(parents=True, exist_ok=True)
    root = db.parent / "artifacts"
    with FileLock(str(db) + ".lock", timeout=300):
        client = with_lock_retry(lambda: MlflowClient(tracking_uri=f"sqlite:///{db}"), retries, backoff)

        def experiment() -> Any:
            exp = client.get_experiment_by_name(cfg.experiment)
            if exp is None:
                client.create_experiment(cfg.experiment, artifact_location=str(root))
                exp = client.get_experiment_by_name(cfg.experiment)
            return exp

        exp = with_lock_retry(experiment, retries, backoff)
        _relocate(db, exp, root)
    return client, exp.experiment_id


def _end_stale_runs(client: Any, exp_id: str, stage: str) -> None:
    """Runs of this stage left RUNNING by a process of this host that no longer exists: KILLED."""
    stale = client.search_runs([exp_id], filter_string=f"tags.`alphagym.stage` = '{stage}' and "
                               "attributes.status = 'RUNNING'")
    host = socket.gethostname()
    for run in stale:
        tags = run.data.tags
        if tags.get("alphagym.host") == host and not _alive(int(tags.get("alphagym.pid", "0") or 0)):
            client.set_tag(run.info.run_id, "alphagym.end", "killed: found RUNNING after its process ended")
            client.set_terminated(run.info.run_id, status="KILLED")


# the signals a stage turns into an exit (`cli._exit_on_signal`) or KeyboardInterrupt
_STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _hold_stops() -> tuple[dict[int, Any], list[int]] | None:
    """Hold the stopping signals until `_release`: one arriving while the store writes the run would raise
    its exit inside the write and leave the run RUNNING; held, it is raised again where the run can still end
    KILLED. The handlers are swapped, not the signal mask: a signal sent to the process is taken by any thread
    that does not block it (MLflow's among them), and Python runs the handler in the main thread whichever
    took it. None off the main thread, which cannot set handlers."""
    if threading.current_thread() is not threading.main_thread():
        return None
    got: list[int] = []
    saved = {s: signal.getsignal(s) for s in _STOPS}
    for s, handler in saved.items():
        if handler is not None:                       # None: a handler set outside Python, left as it is
            signal.signal(s, lambda num, frame: got.append(num))
    return saved, got


def _release(held: tuple[dict[int, Any], list[int]] | None) -> None:
    """Restore the handlers `_hold_stops` saved, then raise again each signal held meanwhile."""
    if held is None:
        return
    saved, got = held
    for s, handler in saved.items():
        if handler is not None:
            signal.signal(s, handler)
    for num in got:
        signal.raise_signal(num)


@contextlib.contextmanager
def stage_run(stage: str, params: Params, logged: Mapping[str, Any] | None = None, code: str = ""
              ) -> Iterator[StageRun]:
    """Open one MLflow run for a stage execution: FINISHED, FAILED (it raised) or KILLED (interrupted).

    `logged`: the params to record (a stage's declared keys); default every param. `code`: `StageRun.code`."""
    cfg = params.tracking
    retries, backoff = cfg.lock_retries, cfg.lock_backoff_s
    if not cfg.enabled:
        yield StageRun(None, None, retries, backoff, code)
        return
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.entities import Param, RunTag

    client, exp_id = _open_store(cfg, store_path(params), retries, backoff)
    with_lock_retry(lambda: _end_stale_runs(client, exp_id, stage), retries, backoff)
    tags = {"alphagym.stage": stage, "dvc.stage": stage, "mlflow.source.git.commit": git_commit(),
            "alphagym.profile": params.profile, "alphagym.results": str(Path(params.paths.results).resolve()),
            "mlflow.runName": stage,
            "alphagym.pid": str(os.getpid()), "alphagym.host": socket.gethostname()}
    # from the run's creation until the body starts (released inside the try below), a stopping signal is
    # held, so that it ends the run KILLED instead of leaving it RUNNING
    held = _hold_stops()
    try:
        run = with_lock_retry(lambda: client.create_run(exp_id, tags=tags, run_name=stage), retries, backoff)
        handle = StageRun(client, run.info.run_id, retries, backoff, code)
        _OPEN[handle.run_id] = handle
        flat = flatten(logged if logged is not None else {k: v for k, v in params.items() if k != "profiles"})
        plist = [Param(k[:250], v) for k, v in flat.items()]
        for i in range(0, len(plist), 100):
            chunk = plist[i:i + 100]
            handle._call(lambda c=chunk: client.log_batch(handle.run_id, params=c,
                                                          tags=[RunTag("alphagym.n_params", str(len(plist)))]))
    except BaseException:                # a failed start: the handlers back as they were
        _release(held)
        raise
    status = "FAILED"
    try:
        _release(held)
        yield handle
        status = "FINISHED"
    except (KeyboardInterrupt, SystemExit):
        status = "KILLED"
        raise
    finally:
        held = _hold_stops()
        try:
            handle._call(lambda: client.set_terminated(handle.run_id, status=status))
            _OPEN.pop(handle.run_id, None)
        finally:
            _release(held)
