"""Kakushadze's 101 Formulaic Alphas: the paper's text, parsed verbatim, with canonical form or the reason.

The text lives in alpha101.txt (data, not code). An alpha "parses" when the DSL accepts its paper text
unchanged; one that cannot be expressed (it needs market cap, or breaks a limit) carries the reason.
A panel without `cap` cannot evaluate Alpha#56: that is reported as unavailable data, not a parse failure.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

from alphagym.dsl.ast import Node, walk
from alphagym.dsl.canonical import canonical, node_count
from alphagym.dsl.errors import DslError
from alphagym.dsl.parser import Limits, lookback, parse

# Alphas that parse and evaluate but say little, and why (shown by `alphagym alpha101`, docs/dsl.md).
CAVEATS = {
    7: "compares adv20 (average dollar volume) with volume (shares): adv20 > volume wherever the price is "
       "above $1, so the formula is -1 on every stock and day, a flat book the verifier rejects",
    96: "correlations over ranks that are constant for the top-ranked stock are NaN (docs/dsl.md), and the "
        "NaN spreads through its nested windows: empty on the simulated panel",
    97: "the NaN of its nested correlations and ts_ranks spreads: about 1% of cells have a value",
}


@dataclass(frozen=True)
class Alpha:
    number: int
    text: str
    ast: Node | None
    canonical: str | None
    reason: str | None        # why it cannot be used (None when usable)

    @property
    def usable(self) -> bool:
        return self.reason is None


def load_texts() -> list[tuple[int, str]]:
    raw = resources.files("alphagym.dsl").joinpath("alpha101.txt").read_text()
    out = []
    for line in raw.splitlines():
        if line.strip() and not line.startswith("#"):
            num, text = line.split("\t", 1)
            out.append((int(num), text.strip()))
    return out


def alpha101(limits: Limits | None = None, panel_fields: frozenset[str] | None = None) -> list[Alpha]:
    """All 101; `panel_fields` (if given) marks alphas needing a field the panel lacks as unusable."""
    out = []
    for number, text in load_texts():
        try:
            ast = parse(text, limits)
        except DslError as exc:
            out.append(Alpha(number, text, None, None, f"does not parse: {exc}"))
            continue
        reason = None
        needs = {n.name for n in walk(ast) if type(n).__name__ == "Field"}
        if panel_fields is not None and not needs <= panel_fields:
            reason = f"needs {sorted(needs - panel_fields)} which the panel does not have"
        out.append(Alpha(number, text, ast, canonical(ast), reason))
    return out


def describe(a: Alpha) -> dict:
    d = {"number": a.number, "paper": a.text, "parses": a.ast is not None, "usable": a.usable,
         "canonical": a.canonical, "reason": a.reason, "caveat": CAVEATS.get(a.number)}
    if a.ast is not None:
        d.update(lookback=lookback(a.ast), nodes=node_count(a.ast))
    return d
