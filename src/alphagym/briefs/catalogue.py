"""The brief catalogue (catalogue.yaml in this package): the options of each brief field, as data.

Every entry is validated when the catalogue loads: its keys, the keys of its `check` (`CheckSpec`), and the
operator and field names a check reads, against the operator registry and the panel's formula fields. A
check naming an operator or field no formula can have would otherwise pass or fail every formula silently.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Annotated, Any

import yaml
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from alphagym.dsl.registry import ALIASES, OPS
from alphagym.errors import BriefError
from alphagym.panel import DSL_FIELDS

PARTS = ("mechanisms", "input_rules", "structures", "forbidden", "risks")
# a brief's fields, in the order a brief is drawn and written; the horizon is a number, every other field an id
# of its catalogue part (FIELD_PART); the checked fields are CHECKS, each read by the compliance check of its
# name (the risk preference only words the brief)
FIELDS = ("mechanism", "horizon", "input_rule", "structure", "forbidden", "risk")
FIELD_PART = {"mechanism": "mechanisms", "input_rule": "input_rules", "structure": "structures",
              "forbidden": "forbidden", "risk": "risks"}
CHECKS = ("mechanism", "horizon", "input_rule", "structure", "forbidden")


def _operator(name: str) -> str:
    # the parser reads an alias as its registry name, so a check on the alias would never see it
    if name in ALIASES and name not in OPS:
        raise ValueError(f"{name!r} is an alias: write the operator's registry name {ALIASES[name]!r}")
    if name not in OPS:
        raise ValueError(f"unknown operator {name!r} (the registry has {', '.join(OPS)})")
    return name


def _field(name: str) -> str:
    if name not in DSL_FIELDS:
        raise ValueError(f"unknown field {name!r} (a formula reads {', '.join(DSL_FIELDS)})")
    return name


Operator = Annotated[str, AfterValidator(_operator)]
FieldName = Annotated[str, AfterValidator(_field)]


class _Strict(BaseModel):
    # strict: a bare name where a list belongs would otherwise be read as a list of its letters
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Bounds(_Strict):
    min: int = Field(0, ge=0)
    max: int | None = Field(None, ge=0)


class OpCount(Bounds):
    op: Operator


class CheckSpec(_Strict):
    """What the compliance checker verifies on a formula for one catalogue entry, as a contract
    (`contract.spec_contract`, `contract.merge_specs`) judged by `contract.failure`; every key is optional."""

    require_ops: list[list[Operator]] = []        # any-of groups: each group needs one of its operators
    require_fields: list[list[FieldName]] = []    # any-of groups of fields (adv{d} reads close and volume)
    forbid_ops: list[Operator] = []               # none of these
    forbid_fields: list[FieldName] = []
    op_count: OpCount | None = None               # how many times one operator is used
    root: Operator | None = None                  # the outermost operator
    # a window: no smoother (`dsl.registry.SMOOTHERS`) of a bare price-level field (`panel.PRICE_LEVEL_FIELDS`)
    # over more sessions than this
    forbid_long_price_sums: int | None = Field(None, ge=1)
    max_ts_nesting: int | None = Field(None, ge=0)    # time-series operators nested at most this deep
    max_nodes: int | None = Field(None, ge=1)         # expression nodes at most
    distinct_fields: Bounds | None = None             # how many distinct fields the formula reads


class Entry(_Strict):
    id: str
    text: str
    check: CheckSpec = CheckSpec()
    references: list[str] = []   # formulas that express a mechanism's idea (`briefs.idea`)


@dataclass(frozen=True)
class Catalogue:
    preamble: str
    horizons: tuple[int, ...]
    rows: dict[str, dict[str, Entry]]     # part -> id -> entry
    idea_tau: float = 1.0           # the mechanism check's threshold (`briefs.idea`)

    def references(self, mechanism: str) -> tuple[str, ...]:
        """The formulas that express a mechanism's idea (`briefs.idea`)."""
        return tuple(self.row("mechanisms", mechanism).references)

    def ids(self, part: str) -> list[str]:
        return list(self.rows[part])

    def text(self, part: str, key: str) -> str:
        return self.row(part, key).text

    def spec(self, part: str, key: str) -> dict[str, Any]:
        """The entry's check as the keys the catalogue gives (a key it leaves out is not checked)."""
        return self.row(part, key).check.model_dump(exclude_unset=True)

    def row(self, part: str, key: str) -> Entry:
        try:
            return self.rows[part][key]
        except KeyError:
            field = part[:-1] if part.endswith("s") else part          # the brief's field: `mechanisms` -> mechanism
            raise BriefError(f"unknown {field} id {key!r} (catalogue has {', '.join(self.rows.get(part, {}))})",
                             field=field) from None


def _problems(e: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, err['loc'])) or 'entry'}: {err['msg'].removeprefix('Value error, ')}"
                     for err in e.errors())


def parse_catalogue(raw: Mapping[str, Any], file: str = "catalogue.yaml") -> Catalogue:
    """A catalogue from its parsed YAML; a BriefError naming the part and entry of the first bad entry."""
    rows = {}
    for part in PARTS:
        seen: dict[str, Entry] = {}
        for i, row in enumerate(raw[part]):
            name = f"{part} entry {row.get('id', i)!r}" if isinstance(row, Mapping) else f"{part} entry {i}"
            try:
                entry = Entry.model_validate(row)
            except ValidationError as e:
                raise BriefError(f"{name}: {_problems(e)}", file=file, field=part) from None
            if entry.id in seen:
                raise BriefError(f"duplicate id {entry.id!r}", file=file, field=part)
            seen[entry.id] = entry
        rows[part] = seen
    return Catalogue(str(raw["preamble"]), tuple(int(h) for h in raw["horizons"]), rows, float(raw["idea_tau"]))


@functools.lru_cache(maxsize=1)
def load_catalogue() -> Catalogue:
    return parse_catalogue(yaml.safe_load(resources.files("alphagym.briefs").joinpath("catalogue.yaml").read_text()))
