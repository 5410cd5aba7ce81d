"""The docs' tables that are rendered from the code's one table of each list, between `<!-- NAME -->` and
`<!-- /NAME -->` markers:

- docs/verifier.md `channels`: the reward channels (`alphagym.verifier.channels.REGISTRY`; each definition is
  its function's docstring's first paragraph);
- docs/ladder.md `rungs`: every rung of params.yaml with its parent and its change, computed from the recipes
  (`alphagym.rungs.change_vs_parent`), and whether the default ladder runs it.

    python tools/render_docs.py            # rewrite the blocks
    python tools/render_docs.py --check    # exit 1 if a block differs from what the code renders
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def channels() -> str:
    from alphagym.verifier.channels import markdown

    return markdown()


def rungs() -> str:
    from alphagym.config import load_params
    from alphagym.rungs import change_vs_parent, describe

    rl = load_params(ROOT / "params.yaml").rl
    lines = ["| rung | parent | change (computed from the recipes) | in `rl.ladder` |", "|---|---|---|---|"]
    for name, rung in rl.rungs.items():
        parent = "SFT policy" if rung.parent == "sft" else f"`{rung.parent}`"
        change = describe(change_vs_parent(rl, name)).replace("|", "\\|")
        lines.append(f"| `{name}` | {parent} | {change} | {'yes' if name in rl.ladder else ''} |")
    return "\n".join(lines) + "\n"


BLOCKS: dict[str, tuple[Path, Callable[[], str]]] = {
    "channels": (ROOT / "docs" / "verifier.md", channels),
    "rungs": (ROOT / "docs" / "ladder.md", rungs),
}


def render(name: str, text: str) -> str:
    """`text` with block `name` rendered anew."""
    path, fn = BLOCKS[name]
    block = re.compile(rf"(<!-- {name} -->\n)(.*?)(<!-- /{name} -->)", re.S)
    if not block.search(text):
        raise SystemExit(f"{path}: no <!-- {name} --> ... <!-- /{name} --> block")
    body = fn()
    return block.sub(lambda m: m.group(1) + body + m.group(3), text, count=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if a block differs from what the code renders")
    args = ap.parse_args()
    stale = []
    for name, (path, _) in BLOCKS.items():
        text = path.read_text()
        new = render(name, text)
        if new != text:
            stale.append(f"{path.relative_to(ROOT)} ({name})")
            if not args.check:
                path.write_text(new)
    if args.check and stale:
        print(f"stale: {', '.join(stale)}; run python tools/render_docs.py")
        sys.exit(1)


if __name__ == "__main__":
    main()
