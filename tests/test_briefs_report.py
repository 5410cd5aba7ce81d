"""`tools/briefs_report.py` counts a split's briefs by what their mechanism carries in the simulated market
(edge, decoy, none) and names the edges no brief asks for; a mechanism the ground truth does not know is
an error, not a silent `none`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from alphagym.briefs.generate import write_briefs

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("briefs_report", ROOT / "tools" / "briefs_report.py")
briefs_report = importlib.util.module_from_spec(spec)
assert spec.loader is not None
spec.loader.exec_module(briefs_report)

TRUTH = {"effects": {"lagged_reversal": {"kind": "edge", "mechanism": "reversal"},
                     "overnight_gap": {"kind": "edge", "mechanism": "overnight_gap"},
                     "trend_persistence": {"kind": "decoy", "mechanism": "trend_persistence"},
                     "high_beta_trap": {"kind": "trap", "formula": "rank(beta)"}},
         "mechanisms_without_effect": ["tail_risk"]}


def test_mechanism_kinds_map_edges_decoys_and_mechanisms_without_effect():
    assert briefs_report.mechanism_kinds(TRUTH) == {"reversal": "edge", "overnight_gap": "edge",
                                                    "trend_persistence": "decoy", "tail_risk": "none"}


def test_asked_counts_briefs_by_kind_and_names_the_edges_never_asked():
    kinds = briefs_report.mechanism_kinds(TRUTH)
    briefs = [{"mechanism": m} for m in ("tail_risk", "tail_risk", "tail_risk", "reversal", "trend_persistence")]
    out = briefs_report.asked(briefs, kinds)
    assert out["briefs"] == 5
    assert out["by_kind"] == {"none": 3, "edge": 1, "decoy": 1}
    assert out["by_mechanism"]["none"] == {"tail_risk": 3}
    assert out["edges_asked"] == ["reversal"] and out["edges_not_asked"] == ["overnight_gap"]


def test_a_mechanism_unknown_to_the_ground_truth_is_an_error_naming_it():
    with pytest.raises(SystemExit, match="volume_surge"):
        briefs_report.asked([{"mechanism": "volume_surge"}], briefs_report.mechanism_kinds(TRUTH))


def test_main_reads_a_results_folder(tmp_path, capsys):
    from alphagym.briefs.catalogue import load_catalogue
    from alphagym.briefs.generate import generate
    from alphagym.params import Briefs

    cat = load_catalogue()
    train, holdout, held = generate(cat, Briefs(train=40, holdout=10, holdout_family_share=0.15,
                                                horizon_tolerance=0.5), 7)
    (tmp_path / "briefs").mkdir()
    (tmp_path / "raw").mkdir()
    write_briefs(tmp_path / "briefs" / "train.jsonl", train)
    write_briefs(tmp_path / "briefs" / "holdout.jsonl", holdout)
    (tmp_path / "briefs" / "summary.json").write_text(json.dumps({"holdout_families": held}))
    truth = {"effects": {}, "mechanisms_without_effect": cat.ids("mechanisms")}
    (tmp_path / "raw" / "ground_truth.json").write_text(json.dumps(truth))
    assert briefs_report.main([str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["holdout"]["by_kind"] == {"none": 10} and out["train"]["briefs"] == 40
    assert out["holdout_families"] == held
