"""The docs' tables rendered from the code's one table of each list (`tools/render_docs.py`) are current: the
reward channels in docs/verifier.md (from the channel registry's docstrings) and the rungs in docs/ladder.md
(their changes computed from the recipes). A hand edit of either is drift, and the check sees it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _tool():
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "tools" / "render_docs.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


@pytest.mark.parametrize("block, doc, hand_edit", [
    ("channels", "docs/verifier.md", ("−0.02 per expression node", "−0.03 per expression node")),
    ("rungs", "docs/ladder.md", ("| loss: dapo -> cispo |", "| loss DAPO -> CISPO |")),
])
def test_rendered_blocks_are_current_and_a_hand_edit_is_drift(block, doc, hand_edit):
    tool = _tool()
    text = (ROOT / doc).read_text()
    assert tool.render(block, text) == text, f"{doc}'s {block} block is stale: run python tools/render_docs.py"
    edited = text.replace(*hand_edit)
    assert edited != text and tool.render(block, edited) != edited       # negative control
