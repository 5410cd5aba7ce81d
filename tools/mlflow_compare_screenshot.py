"""Screenshot of the MLflow UI's run-comparison view of a ladder's rungs (for the README and docs): one parent
run per rung (`rung@NAME`, written by the report stage), which carries the rung's resolved recipe as
parameters and, as metrics, the mean and sd over its seed replicas of the shipped holdout score and the
headline columns, and its paired difference from its parent rung with the interval.

Starts `mlflow server` on the project's store, finds the rungs' parent runs through the REST API, opens the
compare view in headless Chromium (Debian's `chromium`) driven by Playwright, and sets the view up as a user
would: the parallel-coordinates plot on the holdout score's mean and sd and the headline columns, the
parameters table on "Show diff only" (the recipe keys in which the rungs differ), the metrics table's first
rows in view. Nothing on the page is edited; what the UI shows is what the PNG shows. `--experiment`: the
profile's MLflow experiment (`tracking.experiment`: `alphagym`, or e.g. `alphagym-marginal`).

    .venv/bin/pip install -e '.[docs]'   # playwright (no browser download: it drives /usr/bin/chromium)
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
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

# the plot's axes: metrics every parent run carries (`vs_parent` only a rung with a parent in the ladder has;
# it is in the metrics table)
METRICS = ("holdout_score_mean", "holdout_score_sd", "holdout_effective_bets_mean", "archive_effective_bets_mean",
           "families_mean", "compliance_mean")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return json.loads(r.read())


def _rung_runs(base: str, experiment: str) -> tuple[str, list[dict]]:
    """The experiment's id and its rungs' parent runs (`tags.alphagym.kind = 'rung'`, finished), by name."""
    for _ in range(90):
        try:
            exp = _call(f"{base}/api/2.0/mlflow/experiments/get-by-name?experiment_name={experiment}")
            break
        except urllib.error.HTTPError as exc:          # the server answered: no such experiment
            sys.exit(f"experiment {experiment!r}: {exc.read().decode(errors='replace')[:200]}")
        except OSError:
            time.sleep(1)
    else:
        sys.exit("mlflow server did not answer in 90 s")
    exp_id = exp["experiment"]["experiment_id"]
    runs = _call(f"{base}/api/2.0/mlflow/runs/search",
                 {"experiment_ids": [exp_id], "filter": "tags.`alphagym.kind` = 'rung' and "
                  "attributes.status = 'FINISHED'", "max_results": 200})["runs"]
    latest: dict[str, dict] = {}
    for r in sorted(runs, key=lambda r: r["info"]["start_time"]):
        latest[r["info"]["run_name"]] = r
    return exp_id, [latest[k] for k in sorted(latest)]


def _pick(page, box: int, names: list[str]) -> None:
    """Select `names` in the plot's `box`-th select (0: parameters, 1: metrics) by typing each one."""
    combo = page.get_by_role("combobox").nth(box)
    for name in names:
        combo.click()
        page.keyboard.type(name)
        page.keyboard.press("Enter")
        page.keyboard.press("Escape")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default="results/mlflow/mlflow.db")
    ap.add_argument("--experiment", default="alphagym")
    ap.add_argument("--out", default="docs/img/mlflow_compare.png")
    ap.add_argument("--size", default="1800,1500", help="viewport width,height in pixels")
    args = ap.parse_args()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sys.exit("playwright not installed: .venv/bin/pip install -e '.[docs]'")
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
        exp_id, runs = _rung_runs(base, args.experiment)
        if len(runs) < 2:
            sys.exit(f"fewer than two rung parent runs in experiment {args.experiment!r} (the report stage "
                     "writes them)")
        present = {m["key"] for r in runs for m in r["data"].get("metrics", [])}
        metrics = [m for m in METRICS if m in present]
        query = urllib.parse.urlencode({"runs": json.dumps([r["info"]["run_id"] for r in runs]),
                                        "experiments": json.dumps([exp_id])})
        width, height = (int(v) for v in args.size.split(","))
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": width, "height": height})
            page.goto(f"{base}/#/compare-runs?{query}")
            page.wait_for_selector("text=Comparing", timeout=90_000)
            page.wait_for_timeout(2000)
            close = page.get_by_role("button", name="Close")
            if close.count():
                close.first.click()                       # the assistant's side panel
            page.get_by_role("button", name="Clear All").click()
            _pick(page, 1, metrics)
            page.get_by_text("Show diff only").first.click()          # parameters: only what differs
            first = page.get_by_text(metrics[0], exact=True).last     # the metrics table's row
            first.evaluate("e => e.scrollIntoView({block: 'nearest'})")
            page.wait_for_timeout(1500)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(args.out))
            browser.close()
        print(f"{args.out}: compare view of {[r['info']['run_name'] for r in runs]}; axes {metrics}")
    finally:
        server.terminate()
        server.wait(timeout=20)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
