"""Shared fixtures: the repo root, the shared real data (skip when absent), small simulated panels."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from alphagym.runtime import configure_runtime

configure_runtime()          # the test session runs with the settings of every alphagym command

from alphagym.config import load_params  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data" / "sp500-daily"
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# `alphagym score` starts a background scoring server by itself; tests that want one start their own
os.environ["ALPHAGYM_SCORE_AUTOSERVE"] = "0"


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def shared_data() -> Path:
    if not (SHARED_DATA / "DA-AAPL-T-2021-04-21.csv").is_file():
        pytest.skip(f"real data not found at {SHARED_DATA} (a user's clone has no ../shared)")
    return SHARED_DATA


@pytest.fixture
def params(tmp_path: Path) -> dict:
    """Default params with results and MLflow redirected into a temporary folder."""
    return load_params(ROOT / "params.yaml", [f"paths.results={tmp_path}/results",
                                              f"tracking.uri={tmp_path}/results/mlflow/mlflow.db",
                                              "tracking.enabled=false",
                                              f"yfinance.cache_dir={tmp_path}/cache"])


@pytest.fixture(scope="session")
def sim_panels():
    """(train, holdout) panels of the default simulated market, built once per test session."""
    from alphagym.data.build_panel import build_panel
    from alphagym.data.sources import load_source

    p = load_params(ROOT / "params.yaml")
    prices, sectors, _ = load_source(p)
    train, holdout, _ = build_panel(prices, sectors, p)
    return train, holdout


def pytest_collection_modifyitems(config, items):
    """The end-to-end runs first: with the suite split over two workers (`make test`: pytest-xdist), the
    longest test started last would leave one worker idle while it runs."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
