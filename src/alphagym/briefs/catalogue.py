"""The brief catalogue (catalogue.yaml in this package): the options of each brief field, as data."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

from alphagym.errors import BriefError

PARTS = ("mechanisms", "input_rules", "structures", "forbidden", "risks")


@dataclass(frozen=True)
class Catalogue:
    preamble: str
    horizons: tuple[int, ...]
    rows: dict[str, dict[str, dict[str, Any]]]     # part -> id -> row
    idea_tau: float = 1.0           # the mechanism check's threshold (`briefs.idea`)

    def references(self, mechanism: str) -> tuple[str, ...]:
        """The formulas that express a mechanism's idea (`briefs.idea`)."""
        return tuple(self.row("mechanisms", mechanism).get("references", ()))

    def ids(self, part: str) -> list[str]:
        return list(self.rows[part])

    def text(self, part: str, key: str) -> str:
        return str(self.row(part, key)["text"])

    def spec(self, part: str, key: str) -> dict[str, Any]:
        return dict(self.row(part, key).get("check", {}))

    def row(self, part: str, key: str) -> dict[str, Any]:
        try:
            return self.rows[part][key]
        except KeyError:
            raise BriefError(f"unknown {part[:-1] if part.endswith('s') else part} id {key!r} (catalogue has "
                             f"{', '.join(self.rows.get(part, {}))})", field=part) from None


@functools.lru_cache(maxsize=1)
def load_catalogue() -> Catalogue:
    raw = yaml.safe_load(resources.files("alphagym.briefs").joinpath("catalogue.yaml").read_text())
    rows = {}
    for part in PARTS:
        seen: dict[str, dict[str, Any]] = {}
        for row in raw[part]:
            if row["id"] in seen:
                raise BriefError(f"duplicate id {row['id']!r}", file="catalogue.yaml", field=part)
            seen[row["id"]] = row
        rows[part] = seen
    return Catalogue(str(raw["preamble"]), tuple(int(h) for h in raw["horizons"]), rows, float(raw["idea_tau"]))
