"""The rung comparison as a user reads it: `mlflow server` on localhost against the project's store, and
its REST API returning the rungs' runs (each rung's resolved recipe as `recipe.*` params, its parent, change
and seed; tags rung / replica, profile and results folder; nested probe runs) and their metrics per step.
Marked slow: it starts a server process."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from alphagym.rungs import change_vs_parent, resolve_rung
from alphagym.tracking import stage_run, store_path
from cfg_helpers import updated

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:       # a loaded machine answers slowly; content is checked
        return json.loads(r.read())


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=60) as r:
        return json.loads(r.read())


@pytest.mark.slow(minutes=1)
def test_mlflow_server_serves_the_rung_comparison(params, tmp_path):
    p = updated(params, {"tracking.enabled": True})
    for rung, slope in (("dapo_all", 0.1), ("cispo_all", 0.3)):
        with stage_run(f"train@{rung}", p) as run:      # as the train and probe stages log a rung
            run.log_rung(resolve_rung(p, rung))
            for step in range(1, 6):
                run.log_metrics({"core_score/mean": slope * step}, step=step)
        with stage_run(f"probe@{rung}", p) as run:
            run.log_rung(resolve_rung(p, rung))
            assert run.nest_under(f"train@{rung}") is not None
            run.log_metrics({"probe/train_cpcv": 1.0}, step=100)
    # the report's parent run per rung, with its replicas as children (run twice: the second replaces the first)
    for mean in (0.4, 0.5):
        with stage_run("report", p) as run:
            ids = run.log_rung_parents([
                {"name": rung, "params": {k: v for k, v in resolve_rung(p, rung).tracked()[0].items()
                                          if k != "rung.seed"},
                 "metrics": {"holdout_score_mean": mean + i, "holdout_score_sd": 0.1, "vs_parent": 0.2 * i,
                             "vs_parent_low": float("nan")},
                 "items": [rung]} for i, rung in enumerate(("dapo_all", "cispo_all"))])
    port = _free_port()
    db = store_path(p)
    server = subprocess.Popen([str(BIN / "mlflow"), "server", "--backend-store-uri", f"sqlite:///{db}",
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}/api/2.0/mlflow"
    try:
        deadline = time.time() + 90
        while True:
            try:
                exp = _get(f"{base}/experiments/get-by-name?experiment_name={p['tracking']['experiment']}")
                break
            except OSError:
                if server.poll() is not None or time.time() > deadline:
                    server.kill()
                    pytest.fail(f"mlflow server did not come up: {server.stderr.read()[-2000:]}")
                time.sleep(1)
        exp_id = exp["experiment"]["experiment_id"]
        found = _post(f"{base}/runs/search", {"experiment_ids": [exp_id],
                                               "filter": "tags.`alphagym.stage` LIKE 'train@%'"})["runs"]
        tags = {r["info"]["run_name"]: {t["key"]: t["value"] for t in r["data"]["tags"]} for r in found}
        assert set(tags) == {"train@dapo_all", "train@cispo_all"}
        assert tags["train@cispo_all"]["rung"] == "cispo_all" and tags["train@cispo_all"]["replica"] == "0"
        assert tags["train@cispo_all"]["parent"] == "dapo_all"
        assert tags["train@cispo_all"]["alphagym.profile"] == "default"
        assert tags["train@cispo_all"]["alphagym.results"] == str(Path(p.paths.results).resolve())
        # what the UI's compare view shows: the two rungs' params differ exactly where their recipes differ
        logged = {r["info"]["run_name"]: {q["key"]: q["value"] for q in r["data"]["params"]} for r in found}
        a, b = logged["train@dapo_all"], logged["train@cispo_all"]
        assert set(a) == set(b)
        differ = {k for k in a if a[k] != b[k]}
        assert differ == {f"recipe.{k}" for k in change_vs_parent(p.rl, "cispo_all")} | {"rung.parent", "rung.change"}
        assert (a["recipe.loss"], b["recipe.loss"]) == ("dapo", "cispo")
        assert b["rung.parent"] == "dapo_all" and b["rung.change"] == "loss: dapo -> cispo"
        assert a["rung.seed"] == b["rung.seed"] == str(p.seed)
        assert len([k for k in a if k.startswith("recipe.")]) > 30       # the whole recipe, not only the change
        run_id = {r["info"]["run_name"]: r["info"]["run_id"] for r in found}
        hist = _get(f"{base}/metrics/get-history?run_id={run_id['train@cispo_all']}&metric_key=core_score/mean")
        assert [(m["step"], round(m["value"], 6)) for m in hist["metrics"]] == [(s, round(0.3 * s, 6))
                                                                                for s in range(1, 6)]
        probes = _post(f"{base}/runs/search", {"experiment_ids": [exp_id],
                                                "filter": "tags.`alphagym.stage` LIKE 'probe@%'"})["runs"]
        parents = {r["info"]["run_name"]: {t["key"]: t["value"] for t in r["data"]["tags"]}["mlflow.parentRunId"]
                   for r in probes}
        assert parents == {"probe@dapo_all": run_id["train@dapo_all"], "probe@cispo_all": run_id["train@cispo_all"]}
        # one parent run per rung, the latest report's: the compare view of the parents reads as the ladder table
        rungs = _post(f"{base}/runs/search", {"experiment_ids": [exp_id],
                                               "filter": "tags.`alphagym.kind` = 'rung'"})["runs"]
        assert sorted(r["info"]["run_name"] for r in rungs) == ["rung@cispo_all", "rung@dapo_all"]
        by = {r["info"]["run_name"]: r for r in rungs}
        m = {q["key"]: q["value"] for q in by["rung@cispo_all"]["data"]["metrics"]}
        assert m == {"holdout_score_mean": 1.5, "holdout_score_sd": 0.1, "vs_parent": 0.2}     # NaN left out
        prm = {q["key"]: q["value"] for q in by["rung@cispo_all"]["data"]["params"]}
        assert prm["recipe.loss"] == "cispo" and prm["rung.change"] == "loss: dapo -> cispo"
        assert {r: by[f"rung@{r}"]["info"]["run_id"] for r in ("dapo_all", "cispo_all")} == ids
        # each replica's train run is the child of its rung's parent (its probe still nested under it)
        trains = _post(f"{base}/runs/search", {"experiment_ids": [exp_id],
                                                "filter": "tags.`alphagym.stage` LIKE 'train@%'"})["runs"]
        assert {r["info"]["run_name"]: {t["key"]: t["value"] for t in r["data"]["tags"]}["mlflow.parentRunId"]
                for r in trains} == {f"train@{r}": ids[r] for r in ("dapo_all", "cispo_all")}
    finally:
        server.terminate()
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            server.kill()
