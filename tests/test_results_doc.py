"""`tools/results_doc.py` splices the report's sections into docs/results.md: the marked blocks take the
report's text (figures copied, links rewritten), text outside the markers is kept, and a marker naming a
section the report lacks is an error naming it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("results_doc", ROOT / "tools" / "results_doc.py")
results_doc = importlib.util.module_from_spec(spec)
assert spec.loader is not None
spec.loader.exec_module(results_doc)

REPORT = """# alphagym ladder report

## Ladder

| rung | holdout_score |
|---|---|
| a | 1.5 |

### Per-rung detail

deep text

## Shipped

The ladder ships rung `a`.

![growth](figures/growth.png)

## Training
"""

DOC = """# Results

From <!-- run-label -->an old run<!-- /run-label -->.

## Does it learn?

Prose kept as written.

<!-- report:Ladder -->
| rung | holdout_score |
|---|---|
| a | 0.1 |
<!-- /report:Ladder -->

<!-- report:Shipped -->
stale
<!-- /report:Shipped -->
"""


@pytest.fixture
def report_dir(tmp_path: Path) -> Path:
    d = tmp_path / "report"
    (d / "figures").mkdir(parents=True)
    (d / "report.md").write_text(REPORT)
    (d / "figures" / "growth.png").write_bytes(b"png")
    return d


def test_blocks_take_the_report_sections_and_the_rest_is_kept(report_dir, tmp_path):
    doc, figures = results_doc.splice(DOC, report_dir, tmp_path / "img", "commit abc")
    assert "| a | 1.5 |" in doc and "| a | 0.1 |" not in doc and "stale" not in doc
    assert "### Per-rung detail\n\ndeep text" in doc               # a subsection goes with its section
    assert "The ladder ships rung `a`." in doc and "## Training" not in doc
    assert "![growth](img/report/growth.png)" in doc and figures == ["growth.png"]
    assert (tmp_path / "img" / "growth.png").read_bytes() == b"png"
    assert "Prose kept as written." in doc and "<!-- run-label -->commit abc<!-- /run-label -->" in doc
    again, _ = results_doc.splice(doc, report_dir, tmp_path / "img", "commit abc")
    assert again == doc                                              # splicing twice changes nothing


def test_a_marker_for_a_missing_section_names_it(report_dir, tmp_path):
    with pytest.raises(SystemExit, match="no section 'Seeds'"):
        results_doc.splice(DOC + "<!-- report:Seeds -->\n<!-- /report:Seeds -->\n", report_dir, tmp_path / "img", None)


def test_another_profiles_marker_splices_only_its_own_blocks(report_dir, tmp_path):
    """`marker="real"`: the `<!-- real:NAME -->` blocks and the `real-label` take this report; the default
    profile's `report:` blocks and run label stay as they were."""
    doc = DOC + ("\nFrom <!-- real-label -->x<!-- /real-label -->.\n"
                 "<!-- real:Shipped -->\nreal stale\n<!-- /real:Shipped -->\n")
    out, figures = results_doc.splice(doc, report_dir, tmp_path / "img", "real run", marker="real")
    assert "<!-- real:Shipped -->\nThe ladder ships rung `a`." in out and "real stale" not in out
    assert "![growth](img/real/growth.png)" in out and figures == ["growth.png"]
    assert "<!-- real-label -->real run<!-- /real-label -->" in out
    assert "| a | 0.1 |" in out and "stale" in out and "<!-- run-label -->an old run" in out
