"""Splice the current run's report into docs/results.md: every block between `<!-- report:NAME -->` and
`<!-- /report:NAME -->` is replaced by the section of the report stage's `report.md` whose heading is NAME
(`## NAME` or `### NAME`, down to the next heading of the same or a higher level), and the figures it shows
are copied to `docs/img/report/` with their links rewritten. The tables in docs/results.md are then the
report's own output, never retyped. A marker naming a section the report lacks is an error that names it.

    python tools/results_doc.py results/report/tiny [--doc docs/results.md] [--label "commit 758adae"]
    python tools/results_doc.py results/report/tiny --doc docs/results-by-seed.md    # every seed's rows

`--label` replaces the text of a `<!-- run-label -->...<!-- /run-label -->` block (which run the tables come
from). `--marker real` splices another profile's report into its own blocks, `<!-- real:NAME -->` ...
`<!-- /real:NAME -->` and `<!-- real-label -->`, with its figures in `docs/img/real/`:

    python tools/results_doc.py results/real/report/tiny --marker real --label "..."
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def block(marker: str) -> re.Pattern:
    """`<!-- MARKER:NAME -->` ... `<!-- /MARKER:NAME -->`."""
    return re.compile(rf"(<!-- {marker}:(?P<name>[^>]+?) -->\n)(?P<body>.*?)(<!-- /{marker}:(?P=name) -->)", re.S)


def label_block(marker: str) -> re.Pattern:
    """The run label's block: `run-label` for the default marker `report`, `MARKER-label` for another."""
    tag = "run-label" if marker == "report" else f"{marker}-label"
    return re.compile(rf"(<!-- {tag} -->)(.*?)(<!-- /{tag} -->)", re.S)

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


def splice(doc: str, report_dir: Path, img_dir: Path, label: str | None,
           marker: str = "report") -> tuple[str, list[str]]:
    found = sections((report_dir / "report.md").read_text())
    pattern = block(marker)
    missing = [m.group("name") for m in pattern.finditer(doc) if m.group("name") not in found]
    if missing:
        raise SystemExit(f"{report_dir / 'report.md'} has no section {missing[0]!r} (it has: {', '.join(found)})")
    figures: list[str] = []

    def body(m: re.Match) -> str:
        text = found[m.group("name")]

        def image(im: re.Match) -> str:
            figures.append(im.group(2))
            return f"![{im.group(1)}](img/{marker}/{im.group(2)})"

        return f"{m.group(1)}{IMAGE.sub(image, text)}\n{m.group(4)}"

    doc = pattern.sub(body, doc)
    if label is not None:
        doc = label_block(marker).sub(lambda m: f"{m.group(1)}{label}{m.group(3)}", doc)
    img_dir.mkdir(parents=True, exist_ok=True)
    for name in figures:
        shutil.copyfile(report_dir / "figures" / name, img_dir / name)
    return doc, figures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report_dir", type=Path, help="the report stage's folder (holds report.md and figures/)")
    ap.add_argument("--doc", type=Path, default=ROOT / "docs" / "results.md")
    ap.add_argument("--label", default=None, help="which run the tables come from")
    ap.add_argument("--marker", default="report", help="the blocks' marker (another profile's: e.g. real)")
    args = ap.parse_args()
    if not (args.report_dir / "report.md").is_file():
        raise SystemExit(f"{args.report_dir / 'report.md'} not found: run the report stage first")
    doc, figures = splice(args.doc.read_text(), args.report_dir, args.doc.parent / "img" / args.marker, args.label,
                          args.marker)
    args.doc.write_text(doc)
    print(f"{args.doc}: {len(block(args.marker).findall(doc))} {args.marker} blocks, {len(figures)} figures copied")
    return 0


if __name__ == "__main__":
    sys.exit(main())
