"""Splice the current run's report into docs/results.md: every block between `<!-- report:NAME -->` and
`<!-- /report:NAME -->` is replaced by the section of the report stage's `report.md` whose heading is NAME
(`## NAME` or `### NAME`, down to the next heading of the same or a higher level), and the figures it shows
are copied to `docs/img/report/` with their links rewritten. The tables in docs/results.md are then the
report's own output, never retyped. A marker naming a section the report lacks is an error that names it.

    python tools/results_doc.py results/report/tiny [--doc docs/results.md] [--label "commit 758adae"]

`--label` replaces the text of a `<!-- run-label -->...<!-- /run-label -->` block (which run the tables come
from).
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(<!-- report:(?P<name>[^>]+?) -->\n)(?P<body>.*?)(<!-- /report:(?P=name) -->)", re.S)
LABEL = re.compile(r"(<!-- run-label -->)(.*?)(<!-- /run-label -->)", re.S)
IMAGE = re.compile(r"!\[([^\]]*)\]\(figures/([^)]+)\)")


def sections(report: str) -> dict[str, str]:
    """Heading text -> the lines under it, down to the next heading of the same or a higher level."""
    lines = report.splitlines()
    heads = [(i, len(m.group(1)), m.group(2).strip()) for i, line in enumerate(lines)
             if (m := re.match(r"^(#{2,4}) (.+)$", line))]
    out = {}
    for k, (i, level, name) in enumerate(heads):
        end = next((j for j, lv, _ in heads[k + 1:] if lv <= level), len(lines))
        out[name] = "\n".join(lines[i + 1:end]).strip("\n")
    return out


def splice(doc: str, report_dir: Path, img_dir: Path, label: str | None) -> tuple[str, list[str]]:
    found = sections((report_dir / "report.md").read_text())
    missing = [m.group("name") for m in BLOCK.finditer(doc) if m.group("name") not in found]
    if missing:
        raise SystemExit(f"{report_dir / 'report.md'} has no section {missing[0]!r} (it has: {', '.join(found)})")
    figures: list[str] = []

    def body(m: re.Match) -> str:
        text = found[m.group("name")]

        def image(im: re.Match) -> str:
            figures.append(im.group(2))
            return f"![{im.group(1)}](img/report/{im.group(2)})"

        return f"{m.group(1)}{IMAGE.sub(image, text)}\n{m.group(4)}"

    doc = BLOCK.sub(body, doc)
    if label is not None:
        doc = LABEL.sub(lambda m: f"{m.group(1)}{label}{m.group(3)}", doc)
    img_dir.mkdir(parents=True, exist_ok=True)
    for name in figures:
        shutil.copyfile(report_dir / "figures" / name, img_dir / name)
    return doc, figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report_dir", type=Path, help="the report stage's folder (holds report.md and figures/)")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "results.md")
    ap.add_argument("--label", default=None, help="which run the tables come from")
    args = ap.parse_args()
    if not (args.report_dir / "report.md").is_file():
        raise SystemExit(f"{args.report_dir / 'report.md'} not found: run the report stage first")
    doc, figures = splice(args.doc.read_text(), args.report_dir, args.doc.parent / "img" / "report", args.label)
    args.doc.write_text(doc)
    print(f"{args.doc}: {len(BLOCK.findall(doc))} report blocks, {len(figures)} figures copied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
