import pytest

from alphagym.config import load_params
from alphagym.errors import ConfigError


def test_profile_merges_over_base(root):
    base = load_params(root / "params.yaml")
    real = load_params(root / "params.yaml", ["profile=real"])
    assert base["data"]["source"] == "synthetic"
    assert real["data"]["source"] == "csv" and real["data"]["holdout_start"] == "2020-04-22"
    assert real["data"]["universe"] == base["data"]["universe"]  # untouched keys survive the merge
    assert "profiles" not in real


def test_override_wins_over_profile(root):
    p = load_params(root / "params.yaml", ["profile=real", "data.source=yfinance", "seed=11"])
    assert p["data"]["source"] == "yfinance" and p["seed"] == 11


@pytest.mark.parametrize("item, message", [
    ("data.nosuch=1", "unknown key 'data.nosuch'"),
    ("nosuch.key=1", "unknown key 'nosuch'"),
    ("seedless", "must look like key.sub=value"),
    ("profile=nosuch", "profile 'nosuch' not defined"),
])
def test_bad_overrides_are_named(root, item, message):
    with pytest.raises(ConfigError, match=message):
        load_params(root / "params.yaml", [item])


def test_missing_params_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_params(tmp_path / "nope.yaml")


def test_exponent_floats_are_floats(root, tmp_path):
    p = load_params(root / "params.yaml", ["verifier.costs.holdout.book_usd=1e6", "worldmodel.lr=3.0e-4"])
    assert p["verifier"]["costs"]["holdout"]["book_usd"] == 1e6
    assert p["worldmodel"]["lr"] == 3e-4
    base = load_params(root / "params.yaml")
    assert isinstance(base["worldmodel"]["lr"], float) and isinstance(base["worldmodel"]["weight_decay"], float)
    assert isinstance(base["verifier"]["costs"]["holdout"]["book_usd"], float)
    assert load_params(root / "params.yaml", ["data.start=2012-06-29"])["data"]["start"] != 2012.0
