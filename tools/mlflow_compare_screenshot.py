"""Screenshot of the MLflow UI's run-comparison view of the ladder's rungs (for the README): their probe runs,
whose `shipped/*` metrics are the shipped checkpoint's holdout score, families, effective bets, coverage and
compliance, and whose params are the rung's recipe.

Starts `mlflow server` on the project's store, finds the rungs' probe runs through the REST API, opens the
compare view in headless Chromium (Debian's `chromium`) and writes a PNG.

    .venv/bin/python tools/mlflow_compare_screenshot.py --store results/mlflow/mlflow.db \
        --experiment alphagym --out docs/img/mlflow_compare.png
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", default="results/mlflow/mlflow.db")
    ap.add_argument("--experiment", default="alphagym")
    ap.add_argument("--out", default="docs/img/mlflow_compare.png")
    ap.add_argument("--size", default="1700,1900")
    args = ap.parse_args()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        sys.exit("chromium not found (apt-get install chromium)")
    port = _free_port()
    mlflow = Path(sys.executable).parent / "mlflow"
    server = subprocess.Popen([str(mlflow), "server", "--backend-store-uri", f"sqlite:///{Path(args.store).resolve()}",
                               "--host", "127.0.0.1", "--port", str(port), "--workers", "1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(90):
            try:
                exp = _call(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name={args.experiment}")
                break
            except OSError:
                time.sleep(1)
        else:
            sys.exit("mlflow server did not answer in 90 s")
        exp_id = exp["experiment"]["experiment_id"]
        runs = _call(f"{base}/api/2.0/mlflow/runs/search",
                     {"experiment_ids": [exp_id], "filter": "tags.`alphagym.stage` LIKE 'probe@%' and "
                      "attributes.status = 'FINISHED'", "max_results": 50})["runs"]
        def steps(r: dict) -> int:
            params = {p["key"]: p["value"] for p in r["data"].get("params", [])}
            return int(params.get("rl.recipe.steps", 0))

        latest: dict[str, dict] = {}
        # per rung, the latest finished run among those with the most steps (a shortened trial run of a rung
        # does not stand in for it)
        for r in sorted(runs, key=lambda r: (steps(r), r["info"]["start_time"])):
            latest[r["info"]["run_name"]] = r
        ids = [r["info"]["run_id"] for r in latest.values()]
        if len(ids) < 2:
            sys.exit(f"fewer than two finished rungs in experiment {args.experiment!r}: {sorted(latest)}")
        query = urllib.parse.urlencode({"runs": json.dumps(ids), "experiments": json.dumps([exp_id])})
        url = f"{base}/#/compare-runs?{query}"
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--window-size={args.size}", "--virtual-time-budget=20000",
                        f"--screenshot={Path(args.out).resolve()}", url], check=True, capture_output=True, timeout=180)
        print(f"{args.out}: compare view of {sorted(latest)}")
    finally:
        server.terminate()
        server.wait(timeout=20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
