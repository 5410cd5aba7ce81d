"""BENCHMARKS.md's table is what `tools/benchmarks_doc.py` renders from `benchmarks/results/`: a changed
result changes the table, and a figure whose file or numbers are missing is an error naming it."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("benchmarks_doc", ROOT / "tools" / "benchmarks_doc.py")
bd = importlib.util.module_from_spec(spec)
assert spec.loader is not None
sys.modules["benchmarks_doc"] = bd           # its dataclasses look their module up there
spec.loader.exec_module(bd)


def test_the_committed_table_is_the_generated_one():
    doc = (ROOT / "BENCHMARKS.md").read_text()
    assert bd.table() in doc, "BENCHMARKS.md's table is stale: run `python tools/benchmarks_doc.py`"


def test_a_changed_result_changes_its_row_and_a_missing_one_is_named(tmp_path, monkeypatch):
    results = tmp_path / "results"
    shutil.copytree(ROOT / "benchmarks" / "results", results)
    monkeypatch.setattr(bd, "RESULTS", results)
    before = bd.table()
    eval_file = results / "eval_vm5.txt"
    eval_file.write_text(eval_file.read_text() + "geomean_speedup_idle_2t_median=99.00\n")
    after = bd.table()
    assert "99.00×" in after and "99.00×" not in before      # the last run in a file is the current one
    eval_file.write_text("no numbers\n")
    with pytest.raises(SystemExit, match="evaluator vs pandas.*no geomean_speedup_idle_2t_median="):
        bd.table()
    eval_file.unlink()
    with pytest.raises(SystemExit, match="evaluator vs pandas.*does not exist"):
        bd.table()
