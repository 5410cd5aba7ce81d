"""The typed, validated parameters: one pydantic model per area, composed into `Params`.

Why pydantic (v2) rather than validated dataclasses: it reports every bad key at once with its location,
the value given and the constraint, validates nested mappings and cross-field rules in one declaration,
and rejects unknown keys (`extra="forbid"`); hand-written dataclass checks would repeat all of that.

`params.yaml` is the one place where values live: no field here has a default, so a key missing from the
file is an error, not a silently different number. Each field carries a type, a range and a one-line
description. The models are frozen. Library and stage code reads attributes (`params.verifier.cpcv`,
`cfg.lr`) and takes the typed section it needs as its argument. `[]`, `.get`, `keys`, `items` and `in` still
work as on the mapping the block was read from: `ParamsView`, `dict(section)` and the tools use them.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import CoreSchema

from alphagym.rungs import recipe_of

NonNeg = Annotated[float, Field(ge=0)]
Share = Annotated[float, Field(ge=0, le=1)]
PosInt = Annotated[int, Field(ge=1)]
NonNegInt = Annotated[int, Field(ge=0)]


def _strict_scalars(schema: Any) -> None:
    """Mark every int, bool and float schema inside a section's core schema strict (pydantic's `Strict()`)."""
    if isinstance(schema, dict):
        if schema.get("type") in ("int", "bool", "float"):
            schema["strict"] = True
        for value in schema.values():
            _strict_scalars(value)
    elif isinstance(schema, list):
        for value in schema:
            _strict_scalars(value)


class Section(BaseModel):
    """A block of params: frozen, no unknown keys, no NaN or infinity, strict numbers and bools, readable like
    a mapping.

    Strict: every int, bool and float in a section (in a list, a mapping or an optional too) takes only its
    own kind, so `steps: true` or `--set seed=true` is an error, not 1, and `enabled: 1` is an error, not
    True; an int field refuses 6.0 and "6". A float still takes an int (`lr: 1` is 1.0). pydantic's lax mode
    would convert all of these silently. Set here, once, for every section and every field added later."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, validate_default=True)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        schema = handler(source)
        _strict_scalars(schema)
        return schema

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(key)
        return self.__dict__[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.__dict__[key] if key in type(self).model_fields else default

    def __iter__(self) -> Iterator[str]:      # type: ignore[override]  # keys, as a mapping iterates
        return iter(type(self).model_fields)

    def __contains__(self, key: object) -> bool:
        return key in type(self).model_fields

    def keys(self) -> list[str]:
        return list(type(self).model_fields)

    def items(self) -> Iterator[tuple[str, Any]]:
        return ((k, self.__dict__[k]) for k in type(self).model_fields)

    def values(self) -> Iterator[Any]:
        return (self.__dict__[k] for k in type(self).model_fields)

    def __len__(self) -> int:
        return len(type(self).model_fields)


Mapping.register(Section)     # isinstance(section, Mapping) holds, as for the dict it was read from


def _iso_date(value: Any) -> str:
    if isinstance(value, dt.date):          # YAML reads an unquoted 2012-06-29 (e.g. in `--set`) as a date
        return value.isoformat()
    try:
        dt.date.fromisoformat(value)
    except (TypeError, ValueError):
        raise ValueError(f"must be a date written YYYY-MM-DD, got {value!r}") from None
    return value


# --- data -------------------------------------------------------------------------------------------------

Action = Literal["error", "repair"]


class Validation(Section):
    duplicate_dates: Action = Field(description="identical duplicate rows: keep one (repair) or fail")
    non_positive_price: Action = Field(description="a price <= 0")
    high_low: Action = Field(description="high below low")
    ohlc_bounds: Action = Field(description="open/close outside [low, high]: widen the range (repair)")
    non_positive_volume: Action = Field(description="volume <= 0: treat as missing and fill (repair)")
    zero_split_coefficient: Action = Field(description="split coefficient 0: read as 1, no split (repair)")
    missing_sessions: Action = Field(description="sessions absent from a file: forward fill (repair)")
    late_start_early_end: Action = Field(description="a ticker without data on the panel's first session, or "
                                                     "ending more than max_fill_gap sessions before its last")
    max_fill_gap: NonNegInt = Field(description="longest run of sessions a repair may fill")


class Data(Section):
    source: Literal["synthetic", "csv", "yfinance"] = Field(description="where raw prices come from")
    csv_dir: str = Field(description="folder of per-ticker CSV files (source csv)")
    csv_format: Literal["auto", "alphavantage", "plain"] = Field(description="CSV layout")
    sectors_file: str | None = Field(description="ticker,sector file inside csv_dir (optional)")
    calendar: str = Field(pattern=r"^[A-Za-z0-9_]+$", description="exchange_calendars code of the trading calendar, "
                          "e.g. XNYS (checked against exchange_calendars when the data stages first read it: "
                          "importing it costs a second every other command would pay)")
    start: str = Field(description="first train session (YYYY-MM-DD)")
    train_end: str = Field(description="last train session")
    holdout_start: str = Field(description="first holdout session")
    end: str = Field(description="last holdout session")
    holdout_warmup_sessions: NonNegInt = Field(description="train sessions copied before the holdout to fill "
                                                           "long windows (never scored)")
    universe: list[str] = Field(description="tickers; [] means every file in csv_dir")
    validation: Validation

    _dates = field_validator("start", "train_end", "holdout_start", "end", mode="before")(_iso_date)

    @model_validator(mode="after")
    def _ordered(self) -> Data:
        if not self.start < self.train_end < self.holdout_start <= self.end:
            raise ValueError(f"dates must satisfy start < train_end < holdout_start <= end; got {self.start}, "
                             f"{self.train_end}, {self.holdout_start}, {self.end}")
        return self


class YFinance(Section):
    retries: PosInt = Field(description="download attempts per ticker")
    backoff_s: NonNeg = Field(description="first wait between attempts, doubled each time")
    timeout_s: Annotated[float, Field(gt=0)] = Field(description="network timeout per request")
    cache_dir: str = Field(description="local cache of downloaded files")


# --- simulator --------------------------------------------------------------------------------------------

class Calibrated(Section):
    ann_vol_median: Annotated[float, Field(gt=0, le=2)] = Field(description="median annualised volatility")
    ann_vol_dispersion: NonNeg = Field(description="log-normal spread of volatility across stocks")
    market_share: Share = Field(description="variance share of the market factor")
    sector_share: Share = Field(description="variance share of the sector factor")
    crisis_enter_prob: Share = Field(description="daily calm -> crisis probability")
    crisis_exit_prob: Share = Field(description="daily crisis -> calm probability")
    crisis_vol_mult: Annotated[float, Field(ge=1)] = Field(description="volatility multiplier in a crisis")
    crisis_mean_corr: Share = Field(description="mean pairwise correlation in a crisis")
    garch_alpha: Share = Field(description="GARCH(1,1) alpha")
    garch_beta: Share = Field(description="GARCH(1,1) beta (alpha + beta < 1)")
    t_df: Annotated[float, Field(gt=2)] = Field(description="Student-t degrees of freedom of the shocks")
    overnight_var_share: Share = Field(description="share of daily variance in the overnight gap")
    jump_prob: Share = Field(description="daily probability of an overnight jump")
    jump_scale: NonNeg = Field(description="jump size in daily sds")
    range_k: NonNeg = Field(description="intraday range scale")
    dollar_volume_median: Annotated[float, Field(gt=0)] = Field(description="median daily dollar volume")
    dollar_volume_log10_spread: NonNeg = Field(description="log10 max/min of median dollar volumes")
    log_volume_ar: Annotated[float, Field(ge=0, lt=1)] = Field(description="AR(1) of the persistent log volume")
    log_volume_noise: NonNeg = Field(description="daily log-volume noise sd")
    log_volume_persistent_sd: NonNeg = Field(description="sd of the persistent log-volume component")
    log_volume_fast_ar: Annotated[float, Field(ge=0, lt=1)] = Field(description="AR(1) of the fast component")
    log_volume_fast_sd: NonNeg = Field(description="sd of the fast log-volume component")
    volume_abs_return_slope: NonNeg = Field(description="log-volume response to |return| / vol")

    @model_validator(mode="after")
    def _stationary(self) -> Calibrated:
        if self.garch_alpha + self.garch_beta >= 1:
            raise ValueError(f"garch_alpha + garch_beta must be < 1 (stationary); got "
                             f"{self.garch_alpha} + {self.garch_beta}")
        return self


class Effect(Section):
    """One planted effect (`data/simulator.py::EFFECTS` names them and their formulas)."""

    kind: Literal["edge", "decoy"] = Field(description="edge: steady through the holdout; decoy: gone by then")
    strength: NonNeg = Field(description="daily rank-IC scale of the planted effect")
    calm_mult: NonNeg = Field(description="strength multiplier outside crises (0: a crisis-only effect)")
    crisis_mult: NonNeg = Field(description="strength multiplier in a crisis")
    half_life_years: Annotated[float, Field(gt=0)] = Field(description="decay of the effect over the years")


class Effects(Section):
    planted: dict[str, Effect] = Field(description="effect name -> its strength and shape")
    effect_noise_ar: Annotated[float, Field(ge=0, lt=1)] = Field(description="AR(1) of the effect noise")
    effect_noise_scale: NonNeg = Field(description="scale of the effect noise")


class Simulator(Section):
    stocks: Annotated[int, Field(ge=2, le=5000)] = Field(
        description="universe size; sector_counts are scaled to it (largest remainder), so 46 keeps them as written")
    sector_counts: dict[str, PosInt] = Field(description="stocks per sector at 46 stocks: the sector mix")
    market_drift_annual: float = Field(ge=-1, le=1, description="market drift in calm regimes")
    crisis_drift_annual: float = Field(ge=-2, le=1, description="market drift in crises")
    calibrated: Calibrated
    max_variance_mult: Annotated[float, Field(ge=1)] = Field(description="cap of GARCH variance, x long-run")
    volume_shock_cap: Annotated[float, Field(gt=0)] = Field(description="|return|/vol at which volume saturates")
    beta_range: tuple[float, float] = Field(description="[low, high] of market betas")
    price_start_range: tuple[Annotated[float, Field(gt=0)], Annotated[float, Field(gt=0)]] = Field(
        description="[low, high] of starting prices")
    effects: Effects

    @model_validator(mode="after")
    def _ranges(self) -> Simulator:
        for name, (lo, hi) in (("beta_range", self.beta_range), ("price_start_range", self.price_start_range)):
            if lo > hi:
                raise ValueError(f"{name} must be [low, high]; got [{lo}, {hi}]")
        if sum(self.sector_counts.values()) < 2:
            raise ValueError("sector_counts must add up to at least 2 stocks")
        return self


# --- formula language -------------------------------------------------------------------------------------

class Limits(Section):
    max_tokens: Annotated[int, Field(ge=1, le=4096)] = Field(description="tokens in one formula")
    # deeper nesting than 32 overflows Python's recursion limit in the recursive-descent parser
    max_depth: Annotated[int, Field(ge=1, le=32)] = Field(description="nesting depth of one formula")
    max_window: Annotated[int, Field(ge=1, le=2520)] = Field(description="largest window of an operator")
    max_lookback: Annotated[int, Field(ge=1, le=2520)] = Field(description="largest total look-back")
    max_chars: Annotated[int, Field(ge=1, le=65536)] = Field(description="characters in one formula")


class Dsl(Section):
    limits: Limits
    window_buckets: list[PosInt] = Field(min_length=1, description="canonical form: windows snap to these")

    @field_validator("window_buckets")
    @classmethod
    def _sorted(cls, value: list[int]) -> list[int]:
        if value != sorted(set(value)):
            raise ValueError(f"must be strictly increasing; got {value}")
        return value


# --- verifier ---------------------------------------------------------------------------------------------

class Book(Section):
    min_valid_stocks: Annotated[int, Field(ge=2)] = Field(description="fewer valid signals: a flat day")
    max_flat_share: Share = Field(description="flat on more than this share of days: invalid")
    min_leg_names: Annotated[float, Field(ge=0)] = Field(
        description="a book whose thinner leg holds fewer effective names (participation ratio, median over "
                    "its days; engine.book.leg_names) is invalid: concentrated")


class TrainCosts(Section):
    fee_bps: NonNeg = Field(description="fees per unit of turnover, bps")
    slippage_bps: NonNeg = Field(description="slippage per unit of turnover, bps")
    half_spread_bps: NonNeg = Field(description="half spread per unit of turnover, bps")
    impact_bps: NonNeg = Field(description="impact per unit of turnover, bps")


class HoldoutCosts(Section):
    fee_bps: NonNeg = Field(description="fees on traded dollars, bps")
    half_spread_bps: NonNeg = Field(description="half spread on traded dollars, bps")
    impact_y: NonNeg = Field(description="square-root impact coefficient Y")
    book_usd: Annotated[float, Field(gt=0)] = Field(description="gross book size in dollars")
    vol_window: Annotated[int, Field(ge=2)] = Field(description="sessions of the volatility estimate")
    adv_window: PosInt = Field(description="sessions of the average dollar volume")
    capacity_adv_share: Annotated[float, Field(gt=0, le=1)] = Field(description="position above this ADV "
                                                                                 "share pays the capacity charge")
    capacity_penalty_bps: NonNeg = Field(description="capacity charge per unit of excess, bps a day")
    borrow_bps_annual: NonNeg = Field(description="borrow cost of the short side, bps a year")


class Costs(Section):
    train: TrainCosts
    holdout: HoldoutCosts


class Cpcv(Section):
    blocks: Annotated[int, Field(ge=2, le=64)] = Field(description="contiguous blocks of the P&L series")
    test_blocks: PosInt = Field(description="blocks in one test slice (1 <= test_blocks < blocks)")
    purge: NonNegInt = Field(description="sessions dropped before each test block")
    embargo: NonNegInt = Field(description="sessions dropped after each test block")
    std_penalty: NonNeg = Field(description="CPCV = mean(SR) - std_penalty * std(SR)")
    missing_tag_score: float = Field(ge=-10, le=0, description="R1 of an answer without <alpha> tags")
    invalid_score: float = Field(ge=-10, le=0, description="R1 of a formula that does not parse")
    degenerate_score: float = Field(ge=-10, le=0, description="R1 of a flat or static book")

    @model_validator(mode="after")
    def _slices(self) -> Cpcv:
        if not 1 <= self.test_blocks < self.blocks:
            raise ValueError(f"test_blocks must be between 1 and blocks - 1 = {self.blocks - 1}; "
                             f"got {self.test_blocks}")
        return self


class HoldoutScore(Section):
    turnover_cap: NonNeg = Field(description="turnover above this is charged in the holdout score")
    turnover_slope: NonNeg = Field(description="charge per unit of excess turnover")
    clip: Annotated[float, Field(gt=0)] = Field(description="the holdout score is clipped to [-clip, clip]")


class Crowding(Section):
    weight: NonNeg = Field(description="R13 = -weight x the family's share elsewhere in the step and recent steps")
    window: Annotated[int, Field(ge=0, le=10_000)] = Field(description="recent steps whose answers count")
    same_bet_corr: Annotated[float, Field(gt=0, le=1)] | None = Field(
        description="answers whose train P&L has |corr| >= this with a family's are that family (one bet, "
                    "whatever its canonical form); null: families are canonical forms")
    max_factor_r2: Annotated[float, Field(gt=0, le=1)] | None = Field(
        description="rarity relieves only a bet of its own: a valid answer with train CPCV > 0 whose daily P&L "
                    "the five factors explain at most this share of (R^2); any other answer (invalid, losing, "
                    "or a factor bet such as the high-beta trap) pays the full -weight; null: every valid "
                    "answer by its family's share and an invalid one 0")


class Pbo(Section):
    floor: float = Field(ge=-10, le=0, description="most negative PBO penalty")


class JepaStress(Section):
    enabled: bool = Field(description="score R3 in the world model's kept stress worlds")
    scale: NonNeg = Field(description="R3 = -min(1, scale * log(1 + mean CPCV drop))")
    sessions: Annotated[int, Field(ge=252)] | None = Field(
        description="R3 compares world and train CPCV over the last this many train sessions (each world is "
                    "evaluated on them plus dsl.limits.max_lookback sessions of warm-up); null: the whole window")


class FactorNeutrality(Section):
    scale: NonNeg = Field(description="R4 = -scale * clip(raw - residual Sharpe, 0, clip)")
    clip: NonNeg = Field(description="largest Sharpe gap charged")
    momentum_skip: NonNegInt = Field(description="momentum factor: most recent sessions skipped")
    momentum_lookback: PosInt = Field(description="momentum factor look-back")
    reversal_days: PosInt = Field(description="reversal factor look-back")
    lowvol_days: Annotated[int, Field(ge=2)] = Field(description="low-volatility factor look-back")
    size_adv_days: PosInt = Field(description="size factor: dollar-volume look-back")

    @model_validator(mode="after")
    def _momentum(self) -> FactorNeutrality:
        if self.momentum_skip >= self.momentum_lookback:
            raise ValueError(f"momentum_skip ({self.momentum_skip}) must be below momentum_lookback "
                             f"({self.momentum_lookback})")
        return self


class Turnover(Section):
    cap: NonNeg = Field(description="R5: daily turnover above this is charged")
    slope: NonNeg = Field(description="R5: charge per unit of excess")


class MinTurnover(Section):
    free: Share = Field(description="R6 is 0 at or above this daily turnover")
    ramp_to: Share = Field(description="R6 ramps to -1 at this turnover")
    invalid_below: Share = Field(description="below this turnover the book is static: invalid")

    @model_validator(mode="after")
    def _ramp(self) -> MinTurnover:
        if not self.invalid_below <= self.ramp_to < self.free:
            raise ValueError(f"must satisfy invalid_below <= ramp_to < free; got {self.invalid_below}, "
                             f"{self.ramp_to}, {self.free}")
        return self


class Ic(Section):
    scale: NonNeg = Field(description="R7 = weight * clip(scale * IC, -1, 1)")
    weight: NonNeg = Field(description="R7 weight inside the channel")
    cap_when_cpcv_nonpositive: float = Field(description="R7 cap while CPCV <= 0")


class NoveltyPnl(Section):
    weight: NonNeg = Field(description="R8 for a P&L uncorrelated with the archive")
    duplicate_corr: Share = Field(description="|corr| at or above this is a duplicate")
    duplicate_penalty: float = Field(le=0, description="R8 of a duplicate")
    capacity: PosInt = Field(description="P&L series the archive keeps")


class NoveltySyntax(Section):
    weight: NonNeg = Field(description="R9 for an unseen canonical form")
    same_group_penalty: float = Field(le=0, description="R9 for a form repeated within the group")
    same_book_corr: Annotated[float, Field(gt=0, le=1)] = Field(
        description="an unseen form whose train P&L has |corr| at least this with a book in the archive is the "
                    "same bet: no R9 bonus")


class MotifGuard(Section):
    ic_threshold: NonNeg = Field(description="a known motif with |IC| below this is guarded")
    penalty: float = Field(le=0, description="R10 of a guarded answer")


class Complexity(Section):
    free_nodes: PosInt = Field(description="nodes without charge")
    per_node: float = Field(le=0, description="R11 per node above free_nodes")


class Format(Section):
    reasoning_bonus: NonNeg = Field(description="R12 for a reasoning block before the answer")


class Compliance(Section):
    gated: bool = Field(description="R14 of an invalid answer is -1 (it earns none of the brief's checks); "
                                    "false: its checks count as for a valid one")


class Idea(Section):
    gated: bool = Field(description="R15 of an invalid answer is -1 (it has no signal to track the mechanism "
                                    "with); false: 0")


class Marginal(Section):
    size: Annotated[int, Field(ge=1, le=10_000)] = Field(
        description="R16's running book: members at most (a better newcomer replaces the member with the lowest "
                    "train CPCV)")
    max_corr: Annotated[float, Field(gt=0, le=1)] = Field(
        description="an answer joins the book only if its train P&L has |corr| below this with every member")


# The reward channels, in score-card order (R1, R2, ...), each with its params block: the one table of them.
# `REWARD_CHANNELS`, `Priorities` and the `Verifier`'s channel blocks are read off it, and the verifier's
# functions attach to it by id (`alphagym.verifier.channels.REGISTRY`, checked against it when imported).
CHANNEL_PARAMS: dict[str, type[Section]] = {
    "cpcv": Cpcv, "pbo": Pbo, "jepa_stress": JepaStress, "factor_neutrality": FactorNeutrality,
    "turnover": Turnover, "min_turnover": MinTurnover, "ic": Ic, "novelty_pnl": NoveltyPnl,
    "novelty_syntax": NoveltySyntax, "motif_guard": MotifGuard, "complexity": Complexity, "format": Format,
    "crowding": Crowding, "compliance": Compliance, "idea": Idea, "marginal": Marginal,
}
REWARD_CHANNELS: tuple[str, ...] = tuple(CHANNEL_PARAMS)

Priorities: type[Section] = create_model(
    "Priorities", __base__=Section, __doc__="Each reward channel's weight in the combined reward (0: logged, "
    "not rewarded).",
    **{c: (NonNeg, Field(description=f"R{i} weight")) for i, c in enumerate(REWARD_CHANNELS, 1)})

Verifier: type[Section] = create_model(
    "Verifier", __base__=Section, __doc__="The verifier: the book, costs, the holdout score, each reward channel's "
    "weight (`priorities`) and block (`CHANNEL_PARAMS`).",
    book=(Book, ...), costs=(Costs, ...), holdout=(HoldoutScore, ...), priorities=(Priorities, ...),
    workers=(Annotated[int, Field(ge=1, le=64)], Field(description="processes scoring a group's answers")),
    **{c: (section, ...) for c, section in CHANNEL_PARAMS.items()})


# --- world model ------------------------------------------------------------------------------------------

WORLD_CHANNELS = ("dispersion", "trend_flip", "correlation", "volatility", "crash")


class WorldModel(Section):
    window: Annotated[int, Field(ge=8)] = Field(description="sessions per window")
    stride: PosInt = Field(description="sessions between training windows")
    mask_share: Annotated[float, Field(gt=0, lt=1)] = Field(description="stock-day cells hidden from the context")
    mask_span: PosInt = Field(description="length of a hidden span, days")
    d_model: Annotated[int, Field(ge=4, le=1024)] = Field(description="latent width")
    heads: PosInt = Field(description="attention heads (divides d_model)")
    time_layers: PosInt = Field(description="transformer layers over time")
    stock_layers: PosInt = Field(description="transformer layers across stocks")
    ema: Annotated[float, Field(ge=0, lt=1)] = Field(description="EMA rate of the target encoder")
    geometry_weight: NonNeg = Field(description="loss weight of the correlation-geometry head")
    decoder_weight: NonNeg = Field(description="loss weight of the decoder")
    batch_size: PosInt = Field(description="windows per batch")
    lr: Annotated[float, Field(gt=0, le=1)] = Field(description="AdamW learning rate")
    weight_decay: NonNeg = Field(description="AdamW weight decay")
    max_epochs: PosInt = Field(description="epochs at most")
    patience: PosInt = Field(description="epochs without improvement before stopping")
    val_share: Annotated[float, Field(gt=0, lt=1)] = Field(description="validation windows at the end")
    threads: PosInt = Field(description="torch threads")
    probe_ridge: NonNeg = Field(description="ridge penalty of the latent probes")
    max_latent_step: Annotated[float, Field(gt=0)] = Field(description="largest stress shift, latent norms")
    stress_magnitude: Annotated[float, Field(gt=0)] = Field(description="stress shift, sds of the statistic")
    crash_window_share: Annotated[float, Field(gt=0, le=1)] = Field(description="windows the crash world shifts")
    min_move_sd: NonNeg = Field(description="direction gate: least move of the statistic, sds")
    auc_random_formulas: NonNegInt = Field(description="random formulas in the AUC gate")
    auc_degrade_sharpe: NonNeg = Field(description="Sharpe fall that counts as degrading")
    auc_min: Share = Field(description="channels below this AUC are dropped")
    facts_moved: dict[Literal[WORLD_CHANNELS], list[str]] = Field(  # type: ignore[valid-type]
        description="stylized facts each world may move on purpose")

    @model_validator(mode="after")
    def _heads(self) -> WorldModel:
        if self.d_model % self.heads:
            raise ValueError(f"heads ({self.heads}) must divide d_model ({self.d_model})")
        return self


class StylizedTolerance(Section):
    ann_vol_rel: NonNeg = Field(description="annualised volatility, relative")
    mean_corr_abs: NonNeg = Field(description="mean pairwise correlation, absolute")
    kurtosis_rel: NonNeg = Field(description="kurtosis, relative")
    sq_return_acf_abs: NonNeg = Field(description="ACF of squared returns, absolute")
    log_volume_acf_abs: NonNeg = Field(description="ACF of log volume, absolute")
    range_over_vol_rel: NonNeg = Field(description="intraday range over volatility, relative")


class Tracking(Section):
    enabled: bool = Field(description="log each stage run to MLflow")
    uri: str = Field(description="sqlite file of the MLflow store, relative to paths.results (or absolute)")
    experiment: str = Field(min_length=1, description="MLflow experiment name")
    lock_retries: Annotated[int, Field(ge=1, le=100)] = Field(description="tries while sqlite is locked")
    lock_backoff_s: NonNeg = Field(description="first wait between tries, doubled each time")


class Paths(Section):
    results: str = Field(min_length=1, description="folder of every stage output")


# --- design briefs ------------------------------------------------------------------------------------------

class Briefs(Section):
    train: Annotated[int, Field(ge=1, le=100_000)] = Field(description="training briefs to draw")
    holdout: Annotated[int, Field(ge=1, le=10_000)] = Field(description="holdout briefs to draw")
    holdout_family_share: Annotated[float, Field(gt=0, lt=0.5)] = Field(
        description="share of (mechanism, structure) families held out for the holdout briefs")
    horizon_tolerance: Annotated[float, Field(gt=0, le=4)] = Field(
        description="the longest window passes within [h / (1 + tol), h * (1 + tol)] of the brief's horizon h")


# --- policy, SFT and prompt filtering -------------------------------------------------------------------------

AdapterKind = Literal["none", "lora", "dora"]


class Adapter(Section):
    r: Annotated[int, Field(ge=1, le=1024)] = Field(description="LoRA rank")
    alpha: Annotated[int, Field(ge=1, le=4096)] = Field(description="LoRA alpha (scale = alpha / r)")
    dropout: Annotated[float, Field(ge=0, lt=1)] = Field(description="LoRA dropout")
    target_modules: list[str] = Field(min_length=1, description="module names the adapter wraps")


class TinyPolicy(Section):
    vocab_size: Annotated[int, Field(ge=300, le=65536)] = Field(description="BPE vocabulary trained on the corpus")
    hidden_size: Annotated[int, Field(ge=16, le=4096)] = Field(description="model width")
    intermediate_size: Annotated[int, Field(ge=16, le=16384)] = Field(description="MLP width")
    layers: Annotated[int, Field(ge=1, le=64)] = Field(description="transformer blocks")
    heads: Annotated[int, Field(ge=1, le=64)] = Field(description="attention heads")
    kv_heads: Annotated[int, Field(ge=1, le=64)] = Field(description="key/value heads (grouped-query attention)")
    max_positions: Annotated[int, Field(ge=64, le=32768)] = Field(description="longest prompt + answer")
    adapter: AdapterKind = Field(description="none (full training from scratch), lora or dora")

    @model_validator(mode="after")
    def _heads(self) -> TinyPolicy:
        if self.hidden_size % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"hidden_size {self.hidden_size} must divide by heads {self.heads}, and heads by "
                             f"kv_heads {self.kv_heads}")
        return self


class PretrainedPolicy(Section):
    adapter: AdapterKind = Field(description="lora or dora on the frozen base (none trains every weight)")


class HfPolicy(PretrainedPolicy):
    base_model: str = Field(description="a local Hugging Face model folder (config.json, weights, tokenizer)")
    nf4: bool = Field(description="load the base in NF4 with bitsandbytes (needs a CUDA GPU)")


Decoding = Literal["brief", "grammar", "free"]


class Policy(Section):
    max_new_tokens: Annotated[int, Field(ge=8, le=1024)] = Field(description="answer cap in tokens")
    micro_batch: PosInt = Field(description="sequences per forward pass")
    threads: Annotated[int, Field(ge=1, le=256)] = Field(description="torch threads")
    decoding: Decoding = Field(
        description="brief: sample only tokens that keep the answer a parseable <alpha> formula that can still "
                    "pass every hard check of its catalogue brief (other prompts: the grammar alone); grammar: "
                    "parseable only; free: the model's plain distribution")
    witness_variants: Annotated[int, Field(ge=1, le=64)] = Field(
        description="brief decoding: where the decoder writes a requirement the answer lacks, it draws the witness "
                    "among this many variants (fields, operator, window), by a hash of the answer so far, so that "
                    "the answers it completes do not share one term; 1: always the first")
    adapter: Adapter
    tiny: TinyPolicy
    smollm2: PretrainedPolicy
    hf: HfPolicy


class SelfDistill(Section):
    rounds: Annotated[int, Field(ge=0, le=10)] = Field(description="rejection-sampling rounds after SFT (0: none)")
    samples: Annotated[int, Field(ge=1, le=64)] = Field(description="answers drawn per training brief")
    epochs: Annotated[int, Field(ge=1, le=100)] = Field(description="passes over a round's pairs")
    lr: Annotated[float, Field(gt=0, le=1)] = Field(description="peak learning rate of a round")
    replay: Annotated[float, Field(ge=0, le=10)] = Field(
        description="corpus pairs mixed in per kept answer (keeps the corpus's spread)")
    min_compliance: Annotated[float, Field(ge=0, le=1)] = Field(
        description="keep only answers that pass at least this share of their brief's checks (0: every valid one)")


class SftRun(Section):
    epochs: Annotated[int, Field(ge=1, le=1000)] = Field(description="passes over the corpus")
    batch_size: PosInt = Field(description="pairs per optimizer step")
    lr: Annotated[float, Field(gt=0, le=1)] = Field(description="peak AdamW learning rate")
    weight_decay: NonNeg = Field(description="AdamW weight decay")
    warmup_share: Annotated[float, Field(ge=0, lt=1)] = Field(description="linear warm-up share of the steps")
    max_grad_norm: Annotated[float, Field(gt=0)] = Field(description="gradient clipping")
    eval_every: PosInt = Field(description="steps between held-out loss evaluations")
    eval_share: Annotated[float, Field(gt=0, lt=0.5)] = Field(description="pairs held out for the eval loss")
    max_pairs: Annotated[int, Field(ge=0)] = Field(description="train on at most this many pairs (0: all)")
    max_formula_chars: Annotated[int, Field(ge=0)] = Field(
        description="train only on pairs whose formula has at most this many characters (0: no cap)")
    self_distill: SelfDistill


class Corpus(Section):
    candidates: Annotated[int, Field(ge=10, le=10_000_000)] = Field(description="formulas drawn and scored")
    alpha101_share: Annotated[float, Field(ge=0, le=1)] = Field(description="share of Alpha101 mutations")
    one_horizon: bool = Field(description="draw every window of a sampled formula around one horizon")
    mechanism_by: Literal["form", "idea", "idea_only"] = Field(
        description="a formula's brief mechanism, drawn from those whose check it passes ('form'), or from those "
        "of them it also follows (mechanism fidelity at least briefs' idea_tau) where there is one ('idea'), the "
        "formula dropped where there is none ('idea_only')")
    pairing: Literal["formula", "brief"] = Field(
        description="formula first (each valid formula paired with one brief drawn among the options it passes) "
                    "or brief first (`briefs` briefs drawn from the training families, each paired with up to "
                    "`per_brief` valid formulas that pass all its checks: docs/policy.md)")
    briefs: Annotated[int, Field(ge=1, le=1_000_000)] = Field(description="briefs drawn for pairing: brief")
    per_brief: Annotated[int, Field(ge=1, le=1000)] = Field(description="formulas a brief for pairing: brief")


class SftEval(Section):
    samples: PosInt = Field(description="answers per holdout brief")
    temperature: Annotated[float, Field(ge=0, le=5)] = Field(description="sampling temperature (0: greedy)")


class Sft(Section):
    policies: list[Literal["tiny", "smollm2", "hf"]] = Field(min_length=1, description="one sft stage per backend")
    corpus: Corpus
    eval: SftEval
    tiny: SftRun
    smollm2: SftRun
    hf: SftRun


class Filter(Section):
    samples: Annotated[int, Field(ge=2, le=256)] = Field(description="answers per training brief")
    temperature: Annotated[float, Field(gt=0, le=5)] = Field(description="sampling temperature")
    min_kept: Annotated[int, Field(ge=0)] = Field(
        description="when fewer briefs are solved sometimes, keep this many closest to break-even")


# --- RL trainer -------------------------------------------------------------------------------------------

class Repo(Section):
    enabled: bool = Field(description="REPO-R: scale each token's advantage by its surprisal (see rl/losses.py)")
    zeta_init: Annotated[float, Field(ge=0, le=1)] = Field(description="zeta during the warm-up updates")
    zeta_floor: Annotated[float, Field(gt=0, le=1)] = Field(
        description="a halving below this sets zeta to 0; a doubling from 0 restarts here")
    zeta_max: Annotated[float, Field(ge=0, le=1)] = Field(description="zeta stays within [0, zeta_max]")
    warmup: Annotated[int, Field(ge=1, le=1000)] = Field(
        description="updates whose mean entropy is the thermostat's target (5: 'w5')")


class Adapo(Section):
    enabled: bool = Field(description="ADAPO: entropy feedback moves DAPO's upper clip")
    step: Annotated[float, Field(gt=0, le=1)] = Field(description="change of the upper clip per update")
    low: Annotated[float, Field(ge=0, le=10)] = Field(description="lowest upper clip")
    high: Annotated[float, Field(ge=0, le=10)] = Field(description="highest upper clip")
    warmup: Annotated[int, Field(ge=1, le=1000)] = Field(description="updates whose mean entropy is the target")


class Refill(Section):
    enabled: bool = Field(description="DAPO dynamic sampling: replace groups whose combined reward is constant")
    max_rounds: Annotated[int, Field(ge=1, le=10)] = Field(description="refill rounds per step at most")


class RlRecipe(Section):
    """The trainer's one config object (the role of TRL's GRPOConfig): every knob of a rung. A rung's `set`
    overrides these keys; `rl.recipe` holds the defaults. TRL's names are given where the concept exists."""

    steps: Annotated[int, Field(ge=1, le=1_000_000)] = Field(description="RL steps (TRL: max_steps)")
    briefs_per_step: Annotated[int, Field(ge=1, le=1024)] = Field(description="groups (briefs) per step")
    answers_per_brief: Annotated[int, Field(ge=2, le=1024)] = Field(
        description="answers per brief (TRL: num_generations)")
    temperature: Annotated[float, Field(gt=0, le=5)] = Field(description="sampling temperature")
    max_new_tokens: Annotated[int, Field(ge=8, le=1024)] = Field(
        description="answer cap (TRL: max_completion_length)")
    micro_batch: PosInt = Field(description="sequences per forward pass when sampling and updating")
    briefs: Literal["filtered", "all"] = Field(description="the filter stage's kept briefs, or all training briefs")
    decoding: Decoding | None = Field(
        description="how the rung samples, in training and in its probe; null: policy.decoding (the grammar-only "
                    "control rung sets grammar)")
    adapter: Literal["lora", "dora"] = Field(description="adapter on the SFT policy (its base is the reference)")
    advantage: Literal["gdpo", "combined"] = Field(
        description="gdpo: standardise each channel within the group, weight by priority, sum; combined: "
                    "standardise the priority-weighted sum (GRPO's single reward)")
    loss: Literal["grpo", "dapo", "cispo"] = Field(description="policy loss (TRL: loss_type)")
    epsilon: Annotated[float, Field(gt=0, lt=1)] = Field(description="lower clip (TRL: epsilon); GRPO's both sides")
    epsilon_high: Annotated[float, Field(gt=0, le=10)] = Field(description="DAPO's upper clip (TRL: epsilon_high)")
    cispo_max: Annotated[float, Field(gt=0, le=100)] = Field(description="CISPO's importance-weight cap")
    beta: NonNeg = Field(description="KL coefficient to the reference, k3 estimator (TRL: beta)")
    forced_weight: NonNeg = Field(
        description="weight of the distillation term on the tokens the brief decoder forced: their negative "
                    "log-probability under the plain policy, token mean (`losses.forced_nll`); 0: forced tokens "
                    "leave the loss")
    token_selection: Literal["all", "top_entropy"] = Field(
        description="loss on every answer token, or only on the highest-entropy share of the batch")
    top_entropy_share: Annotated[float, Field(gt=0, le=1)] = Field(description="share kept by top_entropy")
    advantage_floor: float | Literal["off"] = Field(
        description="answers whose core score (train CPCV) is at or below this get no positive advantage; "
                    "'off' puts the floor at minus infinity")
    min_compliance: Annotated[float, Field(gt=0, le=1)] | None = Field(
        description="answers passing less than this share of their brief's checks (R14) get no positive "
                    "advantage, as below the floor; null: brief-following does not narrow eligibility")
    off_brief: Literal["clamp", "last", "punish"] = Field(
        description="an answer below min_compliance: 'clamp' caps its advantage at 0; 'last' also at the lowest "
                    "advantage of its group's answers on brief, so each answer on brief ranks above it; "
                    "'punish' as 'last', and in a group where no answer on brief clears the floor the valid "
                    "ones on brief take the positive advantage")
    updates_per_batch: Annotated[int, Field(ge=1, le=16)] = Field(
        description="optimizer passes over each rollout batch (TRL: num_iterations)")
    lr: Annotated[float, Field(gt=0, le=1)] = Field(description="AdamW learning rate (constant)")
    disable_dropout: bool = Field(
        description="the rung's adapter without dropout (policy.adapter.dropout ignored) and every dropout of the "
                    "model at 0 (TRL: disable_dropout), so a pass's log-probs do not depend on a dropout mask")
    weight_decay: NonNeg = Field(description="AdamW weight decay")
    max_grad_norm: Annotated[float, Field(gt=0)] = Field(description="gradient clipping")
    repo: Repo
    adapo: Adapo
    refill: Refill
    checkpoint_every: PosInt = Field(description="steps between checkpoints (and probes)")
    torch_threads: Annotated[int, Field(ge=1, le=256)] = Field(description="torch threads (sampling, updates)")
    numba_threads: Annotated[int, Field(ge=1, le=256)] = Field(description="numba threads (scoring)")
    score_cache: NonNegInt = Field(
        description="answers whose archive-independent score is kept between steps (0: none)")
    reward_weights: dict[str, NonNeg] = Field(
        description="channel id -> weight that replaces verifier.priorities' for this recipe (TRL: "
                    "reward_weights); a ladder rung that changes the rewards sets it")

    @model_validator(mode="after")
    def _ranges(self) -> RlRecipe:
        unknown = sorted(set(self.reward_weights) - set(REWARD_CHANNELS))
        if unknown:
            raise ValueError(f"reward_weights: no channel named {unknown}; channels: {list(REWARD_CHANNELS)}")
        if self.repo.zeta_floor > self.repo.zeta_max:
            raise ValueError(f"repo.zeta_floor {self.repo.zeta_floor} is above repo.zeta_max {self.repo.zeta_max}")
        if self.adapo.low > self.adapo.high:
            raise ValueError(f"adapo.low {self.adapo.low} is above adapo.high {self.adapo.high}")
        if self.off_brief != "clamp" and self.min_compliance is None:
            raise ValueError(f"off_brief {self.off_brief!r} needs min_compliance (which answers are off brief)")
        return self


class Rung(Section):
    parent: str = Field(min_length=1, description="the rung this one changes ('sft': the untrained SFT policy)")
    set: dict[str, Any] = Field(
        description="recipe keys (dotted) that differ from the parent rung's recipe (rl.recipe for 'sft'); a "
                    "mapping merges into the inherited one; a key that repeats the inherited value is an error. "
                    "The rung's change (ladder table, MLflow) is this diff, computed from the recipes")
    seeds: Annotated[int, Field(ge=1, le=64)] | None = Field(
        default=None, description="replicas of this rung with seeds seed, seed+1, ... (default rl.seeds)")


class Rl(Section):
    policy: Literal["tiny", "smollm2", "hf"] = Field(description="the SFT policy every rung starts from")
    recipe: RlRecipe
    rungs: dict[str, Rung] = Field(min_length=1, description="every rung: name -> rung")
    ladder: list[str] = Field(min_length=1, description="the rungs that run (a profile may run fewer)")
    seeds: Annotated[int, Field(ge=1, le=64)] = Field(
        description="replicas per rung (seed, seed+1, ...; results/.../<rung>-s<k>); a rung's `seeds` overrides")

    @model_validator(mode="after")
    def _ladder(self) -> Rl:
        for name, rung in self.rungs.items():
            if not name.replace("_", "").replace("-", "").isalnum():
                raise ValueError(f"rung name {name!r}: letters, digits, '_' and '-' only (it names folders)")
            if re.search(r"-s\d+$", name):
                raise ValueError(f"rung name {name!r}: a name ending in -s<digits> is a seed replica's")
            if rung.parent != "sft" and rung.parent not in self.rungs:
                raise ValueError(f"rung {name!r} names parent {rung.parent!r}, which is neither 'sft' nor a rung "
                                 f"(rungs: {sorted(self.rungs)})")
            seen, p = {name}, rung.parent
            while p != "sft":
                if p in seen:
                    raise ValueError(f"rung {name!r}: its parents form a cycle through {p!r}")
                seen.add(p)
                p = self.rungs[p].parent
        for name in self.rungs:       # after every parent is known: a recipe folds its whole chain
            try:
                self.recipe_of(name)
            except ValidationError as exc:        # one line per bad key, named as in the rung's `set`
                # a key's error names the key and its value; a rule of the whole recipe (no key) only its message
                bad = "; ".join(f"{'.'.join(str(x) for x in e['loc'])} = {e.get('input')!r}: {e['msg']}"
                                if e["loc"] else e["msg"] for e in exc.errors(include_url=False))
                raise ValueError(f"rung {name!r}: its recipe does not validate: {bad}") from None
            except (ValueError, KeyError) as exc:
                msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                raise ValueError(f"rung {name!r}: its recipe does not validate: {msg}") from None
        unknown = [n for n in self.ladder if n not in self.rungs]
        if unknown or len(set(self.ladder)) != len(self.ladder):
            raise ValueError(f"rl.ladder {self.ladder}: every entry must be a distinct rung of rl.rungs "
                             f"(unknown: {unknown}; rungs: {sorted(self.rungs)})")
        return self

    def recipe_of(self, rung: str) -> RlRecipe:
        """Rung `rung`'s recipe (`alphagym.rungs.recipe_of`)."""
        return recipe_of(self, rung)


class Books(Section):
    """The books stage (docs/pipeline.md): the shipped checkpoint's answers as books on the holdout year."""

    min_turnover: Annotated[float, Field(ge=0, le=1)] = Field(
        description="capped book: skip answers trading less than this share of the book a day")
    max_corr: Annotated[float, Field(gt=0, le=1)] = Field(
        description="capped book: skip an answer whose train P&L has |corr| >= this with one already in")
    down_day: Annotated[float, Field(lt=0, gt=-1)] = Field(
        description="market down days: the market's daily return below this (e.g. -0.015)")
    archive_size: PosInt = Field(
        description="archive book: at most this many of the formulas the rung wrote in training")


class Probe(Section):
    """The probe stage's sampled answers (docs/ladder.md): besides the greedy answer, `pass_k` sampled ones
    per holdout brief, scored on the train window for pass@k and, after the checkpoint is selected, on the
    holdout year by their mean; and `reading_samples` sampled without the decoder for the reading measure."""

    pass_k: Annotated[int, Field(ge=0, le=64)] = Field(
        description="sampled answers per holdout brief for pass@k (0: none)")
    temperature: Annotated[float, Field(gt=0, le=5)] = Field(description="their sampling temperature")
    selector: Literal["train_cpcv", "capped_book", "capped_book_bets"] = Field(
        description="the checkpoint that ships, within a rung and across rungs: highest mean train CPCV of the "
                    "answers, highest train Sharpe of their correlation-capped book, or that Sharpe without "
                    "shipping fewer than 2 train effective bets over a checkpoint within 10% of it that has more "
                    "(`probe.select`; all train-window only; the probe reports every selector's pick)")
    reading_samples: Annotated[int, Field(ge=0, le=64)] = Field(
        description="answers per holdout brief sampled without the decoder at every checkpoint, for the reading "
                    "measure (`briefs.reading`: parse share, checks passed, brief-swap gaps; 0: none)")


class Params(Section):
    """Everything in params.yaml after the profile merge and the `--set` overrides."""

    profile: str = Field(description="the profile merged over the base values")
    seed: Annotated[int, Field(ge=0, lt=2**32)] = Field(description="seed of every random draw")
    paths: Paths
    data: Data
    yfinance: YFinance
    simulator: Simulator
    dsl: Dsl
    verifier: Verifier
    worldmodel: WorldModel
    stylized_tolerance: StylizedTolerance
    briefs: Briefs
    policy: Policy
    sft: Sft
    filter: Filter
    rl: Rl
    probe: Probe
    books: Books
    tracking: Tracking
