"""The reading measure of one or more SFT policies as one markdown table, from their SFT stages' report.json
(`after_reading`: free-sampled answers against their own brief, a one-field swap and random corpus formulas;
docs/briefs.md, "Reading"), so that docs/results.md can set SFT policies of two profiles side by side with
the rows the pipeline wrote, never retyped:

    python tools/sft_reading.py results/sft/tiny/report.json=formula-first \\
        results/reading/sft/tiny/report.json=brief-first
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from alphagym.report.build import SFT_READING_COLUMNS, sft_reading_rows
from alphagym.report.plots import table_md


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("reports", nargs="+", metavar="REPORT=LABEL", help="an SFT report.json and its row label")
    rows = []
    for spec in ap.parse_args().reports:
        path, _, label = spec.partition("=")
        rows += sft_reading_rows(json.loads(Path(path).read_text()), label or path)
    print(table_md(rows, ("policy", "when", "answers", *SFT_READING_COLUMNS), {"answers": ".0f"}))


if __name__ == "__main__":
    main()
