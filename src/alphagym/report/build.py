"""The report's content, from the files of each rung: the ladder table, the noise floor of seed replicas,
the shipped rung (chosen on train numbers only), and the JSON export. Pure functions of loaded tables; the
stage reads files and writes outputs.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from alphagym.artifacts import read_json, read_jsonl, read_parquet
from alphagym.books import columns as C
from alphagym.books.metrics import bootstrap_interval
from alphagym.books.ship import SELECTORS, choose
from alphagym.briefs.compliance import CHECK_COLUMNS as _CHECK_COLUMNS
from alphagym.errors import ArtifactError
from alphagym.params import Rl
from alphagym.rungs import change_vs_parent, describe, split_replica

ROLES = ("log", "train", "checkpoints", "answers", "table", "probe", "books", "daily")


@dataclass
class RungResult:
    item: str
    rung: str
    replica: int
    parent: str
    change: str
    missing: list[str] = field(default_factory=list)   # inputs not found: the rung failed or did not run
    log: list[dict[str, float]] = field(default_factory=list)
    train: dict[str, Any] = field(default_factory=dict)
    table: pd.DataFrame | None = None
    answers: pd.DataFrame | None = None
    probe: dict[str, Any] = field(default_factory=dict)
    books: dict[str, Any] = field(default_factory=dict)
    daily: pd.DataFrame | None = None
    checkpoints: Path | None = None

    @property
    def ok(self) -> bool:
        return not self.missing


def load_rung(item: str, files: Mapping[str, Path], rl: Rl) -> RungResult:
    """Ladder member `item`'s outputs (`files`: role -> path), with its parent and its change against the
    parent as computed from the recipes (`rungs.describe`)."""
    rung, k = split_replica(item)
    res = RungResult(item, rung, k, rl.rungs[rung].parent, describe(change_vs_parent(rl, rung)))
    res.missing = [f"{role}: {files[role]}" for role in ROLES if not Path(files[role]).exists()]
    if res.missing:
        return res
    res.train = read_json(files["train"], keys=("steps",), what="training summary")
    res.log = read_training_log(files["log"], res.train["steps"])
    res.table = read_parquet(files["table"], columns=("step", "shipped"), what="probe checkpoint table")
    res.answers = read_parquet(files["answers"], columns=("step", "valid", "formula"), what="probe answers")
    res.probe = read_json(files["probe"], keys=("shipped_step",), what="probe summary")
    res.books = check_books(files["books"], read_json(files["books"], what="books"), item)
    res.daily = read_parquet(files["daily"], columns=("date", "market"), what="daily book returns")
    res.checkpoints = Path(files["checkpoints"])
    shipped = res.probe["shipped_step"]
    steps = sorted(int(s) for s in res.table["step"])
    # two checks, two messages: one "or" message read "step 0 is not among [0, 2, 4]" when the books differed
    if not _is_int(shipped) or shipped not in steps:
        raise ArtifactError(files["probe"], f"rung {item}: the probe ships step {shipped!r}, which is not among its "
                                            f"checkpoints {steps} in {files['table']}; rerun the rung's probe")
    if res.books["shipped_step"] != shipped:
        raise ArtifactError(files["books"], f"rung {item}: the books are of step {res.books['shipped_step']!r}, the "
                                            f"probe ({files['probe']}) ships step {shipped}; rerun the rung's books")
    return res


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


# what the report reads of books.json (`books.stage` writes it): each book's metrics (`book_metrics`; the
# equal-weight book's market columns fill the market row), and each shipped answer's row
BOOK_KEYS = ("answers", "return", "sharpe", "max_drawdown", "beta", "market_corr", "book_mean_on_down_days",
             "mean_pairwise_corr", "effective_bets")
MARKET_KEYS = ("market_return", "market_sharpe", "market_max_drawdown", "market_mean_on_down_days", "down_days")
ANSWER_KEYS = ("count", C.TRAIN_CPCV, C.TRAIN_TURNOVER, C.HOLDOUT_SCORE, C.HOLDOUT_SHARPE, C.HOLDOUT_RETURN)


def check_books(path: str | Path, books: dict[str, Any], item: str) -> dict[str, Any]:
    """`books` (a rung's books.json) if every key the report reads is there with its type: the shipped step
    an integer, each book (equal weight, capped, positive, archive) null or an object of numbers (NaN is a number: a
    metric of a flat book), each answer a formula and numbers, the archive pool a count. Else an
    ArtifactError naming the file and the key."""

    def bad(key: str, why: str) -> ArtifactError:
        return ArtifactError(path, f"books: {key} {why}; rerun `alphagym books --rung {item}`")

    def need(node: dict[str, Any], key: str, name: str) -> Any:
        if key not in node:
            raise bad(name, "is missing")
        return node[key]

    def number(node: dict[str, Any], key: str, name: str) -> None:
        v = need(node, key, name)
        if not isinstance(v, int | float) or isinstance(v, bool):
            raise bad(name, f"is {v!r}, not a number")

    step = need(books, "shipped_step", "shipped_step")
    if not _is_int(step):
        raise bad("shipped_step", f"is {step!r}, not a step (an integer)")
    answers = need(books, "answers", "answers")
    if not isinstance(answers, list):
        raise bad("answers", "is not a list")
    for i, a in enumerate(answers):
        if not isinstance(a, dict):
            raise bad(f"answers[{i}]", "is not an object")
        if not isinstance(need(a, "formula", f"answers[{i}].formula"), str):
            raise bad(f"answers[{i}].formula", f"is {a['formula']!r}, not a formula (a string)")
        for k in ANSWER_KEYS:
            number(a, k, f"answers[{i}].{k}")
    for name, keys in (("equal_weight", BOOK_KEYS + MARKET_KEYS), ("capped", BOOK_KEYS), ("positive", BOOK_KEYS),
                       ("archive", BOOK_KEYS)):
        book = need(books, name, name)
        if book is None:
            continue                      # no answer valid on both windows, or none chosen: no book
        if not isinstance(book, dict):
            raise bad(name, "is neither null nor an object")
        for k in keys:
            number(book, k, f"{name}.{k}")
    pool = need(books, "archive_pool", "archive_pool")
    if not _is_int(pool) or pool < 0:
        raise bad("archive_pool", f"is {pool!r}, not a count")
    return books


def read_training_log(path: str | Path, steps: int) -> list[dict[str, Any]]:
    """A rung's log.jsonl, one line a step: steps 1..`steps` in order (the training summary's count), so a log
    cut at a line's end is caught too, not read as a shorter run."""
    log = read_jsonl(path, keys=("step",), what="training log")
    if [r["step"] for r in log] != list(range(1, int(steps) + 1)):
        raise ArtifactError(path, f"the training log holds steps {[r['step'] for r in log][:3]}... ({len(log)} "
                                  f"lines), not 1..{steps} as the training summary says (cut short?)")
    return log


# the shipped checkpoint's bet columns (probe table) that the ladder rows and the seed spread carry;
# planted-edge coverage exists on the simulator only
BET_COLUMNS = (C.FAMILIES, C.FAMILIES_POSITIVE, C.HOLDOUT_EFFECTIVE_BETS, C.CAPPED_EFFECTIVE_BETS,
               "compliance", "compliant_share", C.PLANTED_EDGES_EXPRESSED, C.DECOY_TRAP_ANSWERS,
               C.HOLDOUT_MEAN_ABS_CORR)
# what else each row carries for the seed spread: the shipped checkpoint's mechanism fidelity and share of
# decoder-written requirements (NaN for a probe without them), the archive book's effective bets, and the
# Sharpe and beta of the book of the answers with positive train CPCV
CONTRACT_COLUMNS = (C.COMPLIANCE_IDEA, C.FORCED_LACKING, "archive_effective_bets", "positive_book_sharpe",
                    "positive_book_beta", "capped_book_sharpe", "capped_book_beta", "archive_book_sharpe",
                    "archive_book_beta")


def _num(v: Any) -> float:
    return float("nan") if v is None else float(v)


def ladder_rows(results: Sequence[RungResult]) -> list[dict[str, Any]]:
    """One row per rung (and replica): its change, shipped step, train CPCV and holdout score of the shipped
    checkpoint, step 0's holdout score, the change in holdout score against its parent (the parent's shipped
    checkpoint, same replica if it has one; step 0 for a rung on the SFT policy), and the equal-weight book."""
    by_item = {r.item: r for r in results}
    rows = []
    for r in results:
        row: dict[str, Any] = {"rung": r.item, "parent": r.parent, "change": r.change}
        if not r.ok:
            row["status"] = f"FAILED or not run ({len(r.missing)} of {len(ROLES)} inputs missing, e.g. {r.missing[0]})"
            rows.append(row)
            continue
        ship, step0 = r.probe["shipped"], r.probe["step0"]
        ew = r.books.get("equal_weight") or {}
        pos, arch, cap = (r.books.get(k) or {} for k in ("positive", "archive", "capped"))
        row.update(status="ok", steps=r.train.get("steps"), shipped_step=r.probe["shipped_step"],
                   train_cpcv=_num(ship[C.TRAIN_CPCV]), holdout_score=_num(ship[C.HOLDOUT_SCORE]),
                   step0_holdout=_num(step0[C.HOLDOUT_SCORE]), valid=ship["valid"],
                   book_return=_num(ew.get("return")), book_sharpe=_num(ew.get("sharpe")),
                   book_beta=_num(ew.get("beta")),
                   **{k: _num(ship.get(k)) for k in BET_COLUMNS if k in ship},
                   compliance_idea=_num(ship.get(C.COMPLIANCE_IDEA)), forced_lacking=_num(ship.get(C.FORCED_LACKING)),
                   archive_effective_bets=_num(arch.get("effective_bets")),
                   positive_book_sharpe=_num(pos.get("sharpe")), positive_book_beta=_num(pos.get("beta")),
                   capped_book_sharpe=_num(cap.get("sharpe")), capped_book_beta=_num(cap.get("beta")),
                   archive_book_sharpe=_num(arch.get("sharpe")), archive_book_beta=_num(arch.get("beta")))
        if r.parent == "sft":
            ref = row["step0_holdout"]
        else:
            p = by_item.get(f"{r.parent}-s{r.replica}" if r.replica else r.parent) or by_item.get(r.parent)
            ref = _num(p.probe["shipped"][C.HOLDOUT_SCORE]) if p is not None and p.ok else float("nan")
        row["vs_parent"] = row[C.HOLDOUT_SCORE] - ref
        rows.append(row)
    return rows


# the probe's per-checkpoint bet columns the report's "Bets" table shows for step 0 and the shipped step
# (planted-edge coverage exists on the simulator only: absent columns are left out)
BET_TABLE_COLUMNS = ("valid", C.FAMILIES, C.FAMILIES_POSITIVE, C.HOLDOUT_MEAN_ABS_CORR, C.HOLDOUT_EFFECTIVE_BETS,
                     C.CAPPED_ANSWERS, C.CAPPED_EFFECTIVE_BETS, "compliance", "compliant_share", C.PASS_AT_K,
                     C.SAMPLED_FAMILIES, C.PLANTED_EDGES_EXPRESSED, C.DECOY_TRAP_ANSWERS)


CONVERGENCE_COLUMNS = (C.FAMILIES, C.HOLDOUT_MEAN_ABS_CORR, C.HOLDOUT_EFFECTIVE_BETS, C.TRAIN_EFFECTIVE_BETS)


def convergence_rows(results: Sequence[RungResult]) -> list[dict[str, Any]]:
    """Per rung and checkpoint step (step 0 included), the mean over the rung's replicas of the greedy answers'
    families, the mean |corr| and effective bets of their holdout P&L and their train effective bets: where
    over training the answers' bets merge (read after selection; nothing here selects)."""
    frames = [r.table.assign(rung=r.rung) for r in results if r.ok and r.table is not None]
    if not frames:
        return []
    t = pd.concat(frames, ignore_index=True)
    cols = [c for c in CONVERGENCE_COLUMNS if c in t.columns]
    g = t.groupby(["rung", "step"], sort=False)[cols].mean().reset_index()
    seeds = t.groupby(["rung", "step"], sort=False).size().reset_index(name="replicas")
    g = g.merge(seeds, on=["rung", "step"]).sort_values(["rung", "step"], kind="stable")
    return [{k: (int(v) if k in ("step", "replicas") else v) for k, v in row.items()} for row in g.to_dict("records")]


def _step0_and_shipped(r: RungResult) -> list[tuple[str, dict[str, Any]]]:
    """A finished rung's probe-table rows of the SFT policy (`step 0`) and the shipped checkpoint
    (`shipped (N)`), each where the table has it."""
    by_step = {int(row["step"]): row for row in r.table.to_dict("records")} if r.table is not None else {}
    shipped = int(r.probe["shipped_step"])
    return [(label, by_step[step]) for label, step in (("step 0", 0), (f"shipped ({shipped})", shipped))
            if step in by_step]


def bet_rows(results: Sequence[RungResult]) -> list[dict[str, Any]]:
    """Per rung, two rows: the SFT policy (step 0) and the shipped checkpoint, with every bet column of the
    probe's checkpoint table and its holdout score; the shipped row also carries the rung's archive book
    (answers and effective bets of the correlation-capped pick from everything the rung wrote in training)."""
    rows = []
    for r in results:
        if not r.ok or r.table is None:
            continue
        arch = r.books.get("archive") or {}
        for label, row in _step0_and_shipped(r):
            out: dict[str, Any] = {"rung": r.item, "checkpoint": label,
                                   C.HOLDOUT_SCORE: _num(row.get(C.HOLDOUT_SCORE)),
                                   **{k: _num(row[k]) for k in BET_TABLE_COLUMNS if k in row}}
            if label != "step 0":
                out["archive_answers"] = _num(arch.get("answers"))
                out["archive_effective_bets"] = _num(arch.get("effective_bets"))
            rows.append(out)
    return rows


CHECK_COLUMNS = tuple(_CHECK_COLUMNS.values())


def check_rows(results: Sequence[RungResult]) -> list[dict[str, Any]]:
    """Per rung, the SFT policy (step 0) and the shipped checkpoint: the share of the greedy holdout answers
    passing each of their brief's checks (`compliance_<check>`), next to the mean share (`compliance`), so a
    compliance short of 1 names the check it is lost on; `compliance_idea` beside them (the share of valid
    answers whose signal follows the brief's mechanism, `briefs.idea`), and `forced_lacking` (the share of
    the answers whose requirement the brief decoder wrote, not the policy: NaN for a probe without the
    column), and `valid_compliant` (the share of the valid answers that pass every check: 1 wherever the brief
    decoder wrote them). Rungs whose probe predates the check columns are left out."""
    return [{"rung": r.item, "checkpoint": label, "compliance": _num(row.get("compliance")),
             "valid_compliant": _valid_compliant(r.answers, int(row["step"])),
             **{k: _num(row[k]) for k in CHECK_COLUMNS}, C.COMPLIANCE_IDEA: _num(row.get(C.COMPLIANCE_IDEA)),
             C.FORCED_LACKING: _num(row.get(C.FORCED_LACKING))}
            for r in results if r.ok and r.table is not None and set(CHECK_COLUMNS) <= set(r.table.columns)
            for label, row in _step0_and_shipped(r)]


READING_COLUMNS = ("reading_parse", "reading_own_checks", "reading_own_all",
                   *(f"reading_gap_{k}" for k in _CHECK_COLUMNS))


def reading_rows(results: Sequence[RungResult]) -> list[dict[str, Any]]:
    """Per rung, the SFT policy (step 0), the shipped checkpoint and the last one: does the policy read its
    brief (`briefs.reading`, on answers sampled without the decoder): the share that parse, the share of
    checks they pass against their own brief and of answers passing all, and each check's gap against the
    same brief with that field swapped. Rungs whose probe predates the reading columns are left out."""
    rows = []
    for r in results:
        if not r.ok or r.table is None or not set(READING_COLUMNS) <= set(r.table.columns):
            continue
        picks = _step0_and_shipped(r)
        last = r.table.loc[r.table["step"].idxmax()].to_dict()
        if int(last["step"]) not in (0, int(r.probe["shipped_step"])):
            picks.append((f"last ({int(last['step'])})", last))
        rows += [{"rung": r.item, "checkpoint": label,
                  **{k.removeprefix("reading_"): _num(row.get(k)) for k in READING_COLUMNS}}
                 for label, row in picks]
    return rows


def _valid_compliant(answers: pd.DataFrame | None, step: int) -> float:
    """The share of the valid answers of checkpoint `step` that pass every check of their brief (NaN without
    valid answers, or for answers without the per-check columns)."""
    if answers is None or not set(CHECK_COLUMNS) <= set(answers.columns):
        return float("nan")
    valid = answers[(answers["step"] == step) & answers["valid"].astype(bool)]
    return float(valid[list(CHECK_COLUMNS)].astype(bool).all(axis=1).mean()) if len(valid) else float("nan")


def decoder_rows(results: Sequence[RungResult], answers: Mapping[str, int], window: int = 50) -> list[dict[str, Any]]:
    """Per rung trained under brief decoding (`answers`: item -> the answers a step samples, its briefs times
    their answers, for each such rung), whether training taught the policy to meet its briefs itself: the share
    of a step's answers whose brief requirement the decoder's completion wrote (`decoding/forced_lacking`,
    counted before any refill), over the first and the last `window` steps (the same steps in a run no
    longer than `window`), and the number of answers cut at the cap over the whole run
    (`decoding/forced_late`). Rungs whose log lacks the counts are left out."""
    rows = []
    for r in results:
        first_last = _first_last(r, answers, "decoding/forced_lacking", window)
        if first_last is None:
            continue
        rows.append({"rung": r.item, "steps": len(r.log), "answers_per_step": answers[r.item],
                     "forced_lacking_first": first_last[0], "forced_lacking_last": first_last[1],
                     "forced_late_answers": sum(float(x.get("decoding/forced_late", 0.0)) for x in r.log)})
    return rows


def decoder_check_rows(results: Sequence[RungResult], answers: Mapping[str, int], window: int = 50
                       ) -> list[dict[str, Any]]:
    """`decoder_rows` by check: per rung trained under brief decoding and per hard check, the share of a
    step's answers whose requirement of that check the decoder wrote (`decoding/forced_lacking_<check>`; an
    answer lacking two checks counts in both), over the first and the last `window` steps: which field the
    policy leaves to the decoder. Rungs whose log lacks the counts are left out."""
    rows = []
    for r in results:
        for check in _CHECK_COLUMNS:
            first_last = _first_last(r, answers, f"decoding/forced_lacking_{check}", window)
            if first_last is not None:
                rows.append({"rung": r.item, "check": check, "first": first_last[0], "last": first_last[1]})
    return rows


def _first_last(r: RungResult, answers: Mapping[str, int], key: str, window: int) -> tuple[float, float] | None:
    """The mean over the first and the last `window` steps of rung `r`'s logged count `key`, as a share of the
    answers a step samples; None for a failed rung, one without brief decoding or a log without the key."""
    n = answers.get(r.item)
    if not r.ok or not n or not r.log or key not in r.log[0]:
        return None
    share = [float(x[key]) / n for x in r.log]
    w = min(window, len(share))
    return sum(share[:w]) / w, sum(share[-w:]) / w


# a probe's per-check forced shares (`probe.stage.LACKING_COLUMNS` less the whole share)
LACKING_COLUMNS = tuple(f"forced_lacking_{k}" for k in _CHECK_COLUMNS)


def lacking_rows(results: Sequence[RungResult]) -> list[dict[str, Any]]:
    """Per rung, at step 0 and the shipped checkpoint: the share of the greedy holdout answers whose brief
    requirement the decoder wrote (`forced_lacking`) and, by check, the share that lacked that check's
    requirement (`forced_lacking_<check>`; 0 under the grammar alone). Rungs whose probe predates the
    columns are left out."""
    return [{"rung": r.item, "checkpoint": label, C.FORCED_LACKING: _num(row.get(C.FORCED_LACKING)),
             **{k.removeprefix("forced_lacking_"): _num(row[k]) for k in LACKING_COLUMNS}}
            for r in results if r.ok and r.table is not None and set(LACKING_COLUMNS) <= set(r.table.columns)
            for label, row in _step0_and_shipped(r)]


def selector_rows(results: Sequence[RungResult]) -> list[dict[str, Any]]:
    """Per rung and checkpoint selector (`probe.select.SELECTORS`): the step it picks on train numbers and
    that checkpoint's holdout score, equal-weight book, families and effective bets, read after the fact to
    compare the selectors; `ships` marks the one `probe.selector` names."""
    rows = []
    for r in results:
        if not r.ok:
            continue
        for name, pick in (r.probe.get("picks") or {}).items():
            rows.append({"rung": r.item, "selector": name, "ships": name == r.probe.get("selector"),
                         "step": pick.get("step"), C.TRAIN_CPCV: _num(pick.get(C.TRAIN_CPCV)),
                         C.TRAIN_CAPPED_SHARPE: _num(pick.get(C.TRAIN_CAPPED_SHARPE)),
                         C.HOLDOUT_SCORE: _num(pick.get(C.HOLDOUT_SCORE)),
                         C.HOLDOUT_BOOK_SHARPE: _num(pick.get(C.HOLDOUT_BOOK_SHARPE)),
                         C.FAMILIES: _num(pick.get(C.FAMILIES)),
                         C.HOLDOUT_EFFECTIVE_BETS: _num(pick.get(C.HOLDOUT_EFFECTIVE_BETS))})
    return rows


def seed_spread(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per rung with more than one replica: mean, sample sd, min and max of the shipped holdout score, and
    mean and sd of each bet column the rows carry (`<column>_mean`, `<column>_sd`)."""
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for r in rows:
        if r.get("status") == "ok" and not math.isnan(r[C.HOLDOUT_SCORE]):
            groups.setdefault(split_replica(r["rung"])[0], []).append(r)
    out = []
    for rung, rs in groups.items():
        if len(rs) > 1:
            s = pd.Series([r[C.HOLDOUT_SCORE] for r in rs])
            row = {"rung": rung, "seeds": len(rs), "mean": float(s.mean()), "sd": float(s.std(ddof=1)),
                   "min": float(s.min()), "max": float(s.max())}
            for k in (*BET_COLUMNS, *CONTRACT_COLUMNS):
                xs = pd.Series([_num(r.get(k)) for r in rs]).dropna()
                if len(xs) > 1:
                    row[f"{k}_mean"], row[f"{k}_sd"] = float(xs.mean()), float(xs.std(ddof=1))
            out.append(row)
    return out


def spread_cells(spread: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> list[dict[str, Any]]:
    """The seed spread as "mean ± sd" cells (two decimals), one row per replicated rung: `holdout_score` from
    the spread's mean and sd, every other column from `<column>_mean` and `<column>_sd`; "-" where fewer than
    two seeds have a value. Columns no rung has a value for are left out."""
    def cell(row: Mapping[str, Any], c: str) -> str:
        m, s = (row.get("mean"), row.get("sd")) if c == C.HOLDOUT_SCORE else (row.get(f"{c}_mean"), row.get(f"{c}_sd"))
        return "-" if m is None or s is None else f"{m:.2f} ± {s:.2f}"
    rows = [{"rung": r["rung"], "seeds": r["seeds"], **{c: cell(r, c) for c in columns}} for r in spread]
    keep = [c for c in columns if any(row[c] != "-" for row in rows)]
    return [{k: row[k] for k in ("rung", "seeds", *keep)} for row in rows]


def mark_noise(rows: list[dict[str, Any]], spread: Sequence[Mapping[str, Any]]) -> float | None:
    """The noise floor (largest seed sd among replicated rungs); each row's change vs its parent is marked
    'beyond noise' when larger than twice the floor. None (and no marks) without replicated rungs."""
    if not spread:
        return None
    floor = max(s["sd"] for s in spread)
    for r in rows:
        if r.get("status") == "ok" and not math.isnan(r.get("vs_parent", float("nan"))):
            r["beyond_noise"] = "yes" if abs(r["vs_parent"]) > 2 * floor else "no"
    return floor


def shipped_rung(results: Sequence[RungResult], selector: str = "train_cpcv") -> RungResult | None:
    """The ladder's shipped rung: the one whose shipped checkpoint `selector` picks among the rungs' shipped
    checkpoints (`books.ship.choose`, the rule that picked each within its rung; train numbers only); ties
    to the earlier rung."""
    ok = [r for r in results if r.ok]
    if not ok:
        return None
    cols = [SELECTORS[selector], C.TRAIN_EFFECTIVE_BETS]
    rows = pd.DataFrame([{c: _num(r.probe["shipped"].get(c)) for c in cols} for r in ok])
    return ok[choose(rows.fillna(float("-inf")), selector)]


def pairs(results: Sequence[RungResult], briefs: Mapping[str, str]) -> pd.DataFrame:
    """Verified brief -> formula pairs: every probe answer valid on the train window, deduplicated on
    (brief, canonical form), keeping the best train CPCV, with the rungs and steps that wrote it."""
    frames = [r.answers.assign(rung=r.item) for r in results if r.ok and r.answers is not None]
    if not frames:
        return pd.DataFrame(columns=["brief", "brief_text", "formula", "canonical", C.TRAIN_CPCV])
    a = pd.concat(frames, ignore_index=True)
    a = a[a["valid"]].copy()
    a["written_by"] = a["rung"] + "@" + a["step"].astype(str)
    who = a.groupby(["brief", "canonical"])["written_by"].apply(lambda s: sorted(set(s)))
    best = a.sort_values(C.TRAIN_CPCV, ascending=False).drop_duplicates(["brief", "canonical"])
    best = best.drop(columns=["written_by", "rung", "step", "answer"]).merge(
        who.rename("written_by").reset_index(), on=["brief", "canonical"])
    best.insert(1, "brief_text", best["brief"].map(briefs))
    return best.sort_values(["brief", C.TRAIN_CPCV], ascending=[True, False]).reset_index(drop=True)


# --- telling rungs apart: paired differences and where the variance comes from --------------------------------

def _brief_scores(r: RungResult, step: int, briefs: Sequence[str]) -> np.ndarray:
    """The holdout score of checkpoint `step`'s greedy answer to each of `briefs` (NaN where it was invalid)."""
    a = r.answers
    if a is None or C.HOLDOUT_SCORE not in a:
        return np.full(len(briefs), np.nan)
    by = a[a["step"] == step].set_index("brief")[C.HOLDOUT_SCORE]
    return np.array([float(by.get(b, np.nan)) for b in briefs], float)


def _score(m: np.ndarray, ks: np.ndarray, bs: np.ndarray) -> float:
    """Mean over the replicas `ks` of each one's mean holdout score over the valid answers to briefs `bs`."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmean(np.nanmean(m[np.ix_(ks, bs)], axis=1)))


def paired_rows(results: Sequence[RungResult], level: float = 0.95) -> list[dict[str, Any]]:
    """Per rung, its shipped holdout score against its parent's on the same replicas (replica k of every rung
    shares its seeds: brief order, adapter initialisation, sampling streams) and the same holdout briefs: the
    mean paired difference and its `level` interval from the two-way bootstrap over replicas and briefs
    (`bootstrap_interval`); `beyond_noise` when the interval leaves out 0. A rung on the SFT policy is paired
    with its own replicas' step 0."""
    done = {r.item: r for r in results if r.ok and r.answers is not None}
    briefs = sorted({b for r in done.values() for b in r.answers["brief"]})
    by_rung: dict[str, dict[int, RungResult]] = {}
    for r in done.values():
        by_rung.setdefault(r.rung, {})[r.replica] = r
    rows = []
    for rung, reps in by_rung.items():
        parent = next(iter(reps.values())).parent
        if parent == "sft":
            ks = sorted(reps)
            child = np.stack([_brief_scores(reps[k], int(reps[k].probe["shipped_step"]), briefs) for k in ks])
            base = np.stack([_brief_scores(reps[k], 0, briefs) for k in ks])
        else:
            ks = sorted(set(reps) & set(by_rung.get(parent, {})))
            if not ks:
                continue
            theirs = by_rung[parent]
            child = np.stack([_brief_scores(reps[k], int(reps[k].probe["shipped_step"]), briefs) for k in ks])
            base = np.stack([_brief_scores(theirs[k], int(theirs[k].probe["shipped_step"]), briefs) for k in ks])

        def diff(k: np.ndarray, b: np.ndarray, c: np.ndarray = child, p: np.ndarray = base) -> float:
            return _score(c, k, b) - _score(p, k, b)

        every = np.arange(len(ks))
        lo, hi = bootstrap_interval(diff, len(ks), len(briefs), level)
        rows.append({"rung": rung, "parent": "step 0" if parent == "sft" else parent, "pairs": len(ks),
                     "difference": diff(every, np.arange(len(briefs))), "low": lo, "high": hi,
                     "beyond_noise": "-" if math.isnan(lo) else "yes" if lo > 0 or hi < 0 else "no"})
    return rows


def variance_rows(results: Sequence[RungResult]) -> list[dict[str, Any]]:
    """Per rung with two or more replicas, where the shipped holdout score's spread comes from, as standard
    deviations: `total` over the replicas; `briefs`, the spread of one replica's score when its holdout briefs
    are resampled (the bootstrap over briefs, averaged over replicas: what more briefs would shrink); `seed`,
    what the training seed adds beyond that (sqrt(max(total^2 - briefs^2, 0))); `checkpoint`, the spread of the
    holdout score over a replica's trained checkpoints (what the choice of checkpoint moves, averaged over
    replicas); `answers`, the spread one answer a brief puts on the score, from the probe's sampled answers
    (`holdout_answer_sd` at the shipped checkpoint, averaged over replicas; NaN for a probe without it)."""
    done = [r for r in results if r.ok and r.answers is not None and r.table is not None]
    briefs = sorted({b for r in done for b in r.answers["brief"]})
    by_rung: dict[str, list[RungResult]] = {}
    for r in done:
        by_rung.setdefault(r.rung, []).append(r)
    rows = []
    for rung, reps in by_rung.items():
        if len(reps) < 2:
            continue
        shipped = [_num(r.probe["shipped"][C.HOLDOUT_SCORE]) for r in reps]
        total = float(np.nanstd(shipped, ddof=1))
        brief_var = []
        for r in reps:
            m = _brief_scores(r, int(r.probe["shipped_step"]), briefs)[None]
            lo, hi = bootstrap_interval(lambda k, b, m=m: _score(m, k, b), 1, len(briefs), level=0.6827)
            brief_var.append(((hi - lo) / 2) ** 2)          # the 68% interval's half-width: one sd
        ckpt = [float(r.table.loc[r.table["step"] > 0, C.HOLDOUT_SCORE].std(ddof=1)) for r in reps]
        b = float(np.sqrt(np.mean(brief_var)))
        ans = [_num(r.probe["shipped"].get(C.HOLDOUT_ANSWER_SD)) for r in reps]
        rows.append({"rung": rung, "replicas": len(reps), "total": total, "briefs": b,
                     "seed": float(np.sqrt(max(total ** 2 - b ** 2, 0.0))),
                     "answers": float(np.nanmean(ans)) if np.isfinite(ans).any() else float("nan"),
                     "checkpoint": float(np.nanmean(ckpt)) if any(np.isfinite(ckpt)) else float("nan")})
    return rows


SFT_READING_COLUMNS = ("parse", "own_checks", "own_all", "random_checks", "random_all",
                       *(f"gap_{k}" for k in _CHECK_COLUMNS))


def sft_reading_rows(sft_report: Mapping[str, Any], label: str = "") -> list[dict[str, Any]]:
    """The SFT stage's reading measure (`after_reading`, and `before_reading` for a pretrained backend) as
    table rows: the free-sampled answers' parse share, checks passed against their own brief and the random
    formulas' on the same briefs, and each check's brief-swap gap. An SFT report without it gives none."""
    rows = []
    for key, when in (("before_reading", "before SFT"), ("after_reading", "after SFT")):
        r = sft_report.get(key)
        if isinstance(r, Mapping):
            rows.append({"policy": label or str(sft_report.get("backend", "")), "when": when,
                         "answers": _num(r.get("answers")), **{c: _num(r.get(c)) for c in SFT_READING_COLUMNS}})
    return rows
