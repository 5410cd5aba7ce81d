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


def _warm_formulas() -> list[str]:
    """Each operator of the registry, as the evaluator calls it, with a short and a long window for the
    time-series ones (long windows take the block kernels)."""
    from alphagym.dsl.registry import OPS

    out = ["-rank(close)", "power(returns, 3)", "(returns > 0) ? returns : ts_mean(returns, 5)"]
    for name, spec in OPS.items():
        if name in ("neg", "where"):
            continue
        if spec.kind == "ts":
            out += [f"{name}(returns, volume, {d})" if spec.arity == 2 else f"{name}(returns, {d})" for d in (5, 126)]
        elif name == "indneutralize":
            out.append("indneutralize(returns, IndClass.sector)")
        elif spec.infix:
            out.append(f"(returns {spec.infix} ts_mean(returns, 5))")
        else:
            out.append(f"{name}(returns)" if spec.arity == 1 else f"{name}(returns, ts_mean(returns, 5))")
    return out


def pytest_configure(config):
    """Under pytest-xdist (`make test`), the controller compiles the numba kernels into their on-disk cache
    before the workers start: in a fresh clone every worker, and every stage process the pipeline tests
    start (the end-to-end test copies `src/`, cache included), would otherwise compile them again."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    from alphagym.data.build_panel import build_panel
    from alphagym.data.sources import load_source
    from alphagym.verifier.verifier import Verifier

    p = load_params(ROOT / "params.yaml", ["profile=smoke", "tracking.enabled=false"])
    prices, sectors, _ = load_source(p)
    train, _, _ = build_panel(prices, sectors, p)
    verifier = Verifier(train, p)
    for formula in _warm_formulas():
        verifier.score(formula)


def pytest_collection_modifyitems(config, items):
    """The longest tests first, longest first (`slow(minutes=N)`): `make test` hands a test to whichever of
    its two workers has run out of work (pytest-xdist's `--dist loadgroup`), so the end-to-end run, started
    last, would keep one worker busy long after the other is done."""
    def minutes(item) -> float:
        mark = item.get_closest_marker("slow")
        return mark.kwargs.get("minutes", 1) if mark else 0
    items.sort(key=lambda item: -minutes(item))
