"""MLflow tracking through one small module: one run per stage execution.

sqlite backend under results/mlflow (absolute URI), params flattened, git commit and DVC stage as tags.
Parallel Snakemake jobs share one sqlite file, so every call retries on "database is locked".
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

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


def tracking_uri(params: Mapping[str, Any]) -> str:
    path = Path(params["tracking"]["uri"]).resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


def with_lock_retry(fn: Callable[[], T], retries: int, backoff: float) -> T:
    """Retry `fn` while sqlite says the database is locked (parallel stages writing at once)."""
    for attempt in range(retries):
        try:
            return fn()
        except Exception as exc:
            if "database is locked" not in str(exc) or attempt == retries - 1:
                raise
            time.sleep(backoff * (2**attempt))
    raise AssertionError("unreachable")


class StageRun:
    """Handle given to a stage: log metrics and artifacts; a no-op when tracking is disabled."""

    def __init__(self, client: Any, run_id: str | None, retries: int, backoff: float) -> None:
        self.client, self.run_id, self.retries, self.backoff = client, run_id, retries, backoff

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


@contextlib.contextmanager
def stage_run(stage: str, params: Mapping[str, Any], logged: Mapping[str, Any] | None = None) -> Iterator[StageRun]:
    """Open one MLflow run for a stage execution; marks it FAILED if the stage raises.

    `logged`: the params to record (a stage's declared keys); default every param."""
    cfg = params["tracking"]
    retries, backoff = int(cfg["lock_retries"]), float(cfg["lock_backoff_s"])
    if not cfg.get("enabled", True):
        yield StageRun(None, None, retries, backoff)
        return
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    from mlflow.entities import Param, RunTag
    from mlflow.tracking import MlflowClient

    uri = tracking_uri(params)
    client = with_lock_retry(lambda: MlflowClient(tracking_uri=uri), retries, backoff)

    def experiment_id() -> str:
        exp = client.get_experiment_by_name(cfg["experiment"])
        if exp is not None:
            return exp.experiment_id
        try:
            return client.create_experiment(cfg["experiment"])
        except Exception:  # created by a parallel stage in the meantime
            return client.get_experiment_by_name(cfg["experiment"]).experiment_id

    exp_id = with_lock_retry(experiment_id, retries, backoff)
    tags = {"alphagym.stage": stage, "dvc.stage": stage, "mlflow.source.git.commit": git_commit(),
            "alphagym.profile": str(params.get("profile", "default")), "mlflow.runName": stage}
    run = with_lock_retry(lambda: client.create_run(exp_id, tags=tags, run_name=stage), retries, backoff)
    handle = StageRun(client, run.info.run_id, retries, backoff)
    flat = flatten(logged if logged is not None else {k: v for k, v in params.items() if k != "profiles"})
    plist = [Param(k[:250], v) for k, v in flat.items()]
    for i in range(0, len(plist), 100):
        chunk = plist[i:i + 100]
        handle._call(lambda c=chunk: client.log_batch(handle.run_id, params=c,
                                                      tags=[RunTag("alphagym.n_params", str(len(plist)))]))
    status = "FAILED"
    try:
        yield handle
        status = "FINISHED"
    finally:
        handle._call(lambda: client.set_terminated(handle.run_id, status=status))
