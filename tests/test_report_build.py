"""The report's ladder arithmetic on hand-made rung results: change against the parent (same replica when
it has one, step 0 for a rung on the SFT policy), the seed spread and the noise floor, the train-only
choice of the shipped rung, and the deduplicated pairs."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest

from alphagym.report.build import (
    RungResult,
    ladder_rows,
    mark_noise,
    pairs,
    seed_spread,
    shipped_rung,
    spread_cells,
)


def _rung(item: str, parent: str, train: float, hold: float, step0: float = -1.0, beta: float = 0.0) -> RungResult:
    r = RungResult(item, item.split("-s")[0], int(item.split("-s")[1]) if "-s" in item else 0, parent, "c")
    r.probe = {"shipped_step": 100, "shipped": {"train_cpcv": train, "holdout_score": hold, "valid": 50},
               "step0": {"holdout_score": step0}}
    r.books = {"equal_weight": {"return": 0.1, "sharpe": 1.0, "beta": beta}}
    r.train = {"steps": 100}
    return r


def test_change_vs_parent_uses_step0_for_the_first_rung_and_the_same_replica_after():
    a, a1 = _rung("a", "sft", 1.0, 0.5, step0=-1.0), _rung("a-s1", "sft", 1.1, 0.7, step0=-1.0)
    b, b1 = _rung("b", "a", 1.2, 0.9), _rung("b-s1", "a", 1.3, 0.6)
    failed = RungResult("c", "c", 0, "b", "c", missing=["log: x"])
    rows = ladder_rows([a, a1, b, b1, failed])
    by = {r["rung"]: r for r in rows}
    assert by["a"]["vs_parent"] == pytest.approx(0.5 - (-1.0))
    assert by["b"]["vs_parent"] == pytest.approx(0.9 - 0.5)
    assert by["b-s1"]["vs_parent"] == pytest.approx(0.6 - 0.7)       # against a-s1, not a
    assert by["b"]["change"] == "c"
    assert by["c"]["status"].startswith("FAILED or not run") and "vs_parent" not in by["c"]


def test_seed_spread_and_noise_floor():
    rows = [{"rung": "a", "status": "ok", "holdout_score": 1.0, "vs_parent": 0.5},
            {"rung": "a-s1", "status": "ok", "holdout_score": 2.0, "vs_parent": 0.1},
            {"rung": "a-s2", "status": "ok", "holdout_score": 3.0, "vs_parent": 3.0},
            {"rung": "b", "status": "ok", "holdout_score": 0.0, "vs_parent": 2.5}]
    spread = seed_spread(rows)
    assert spread == [{"rung": "a", "seeds": 3, "mean": 2.0, "sd": 1.0, "min": 1.0, "max": 3.0}]
    assert mark_noise(rows, spread) == 1.0
    assert [r["beyond_noise"] for r in rows] == ["no", "no", "yes", "yes"]    # |change| > 2 * sd
    assert mark_noise([{"rung": "x", "status": "ok", "holdout_score": 1.0}], []) is None


def test_seed_spread_carries_the_bet_columns():
    """Families, effective bets, coverage and compliance get a mean and sd over the seeds; a column a replica
    lacks (coverage on real data) is left out, not counted as zero."""
    rows = [{"rung": "a", "status": "ok", "holdout_score": 1.0, "families": 4.0, "compliance": 0.5,
             "planted_edges_expressed": 2.0},
            {"rung": "a-s1", "status": "ok", "holdout_score": 2.0, "families": 8.0, "compliance": 0.7}]
    (s,) = seed_spread(rows)
    assert s["families_mean"] == 6.0 and s["families_sd"] == pytest.approx(2 ** 0.5 * 2)
    assert s["compliance_mean"] == pytest.approx(0.6)
    assert "planted_edges_expressed_mean" not in s and "holdout_effective_bets_mean" not in s


def test_the_contract_measures_reach_the_seed_spread_as_mean_and_sd_cells():
    """Each rung's row carries the shipped checkpoint's compliance_idea and forced_lacking, the archive book's
    effective bets and the positive-train-CPCV book's Sharpe and beta; the spread gives them a mean and sd, and
    the cells read "mean ± sd", "-" where under two seeds have a value, a column no rung has left out."""
    rungs = [_rung("a", "sft", 1.0, 0.5), _rung("a-s1", "sft", 1.0, 1.5)]
    for r, idea, sharpe in zip(rungs, (0.2, 0.4), (1.0, 2.0), strict=True):
        r.probe["shipped"]["compliance_idea"] = idea
        r.books["positive"] = {"sharpe": sharpe, "beta": 0.01}
        r.books["archive"] = {"effective_bets": 5.0}
    rungs[0].probe["shipped"]["forced_lacking"] = 0.9          # the other probe predates the column
    rows = ladder_rows(rungs)
    assert rows[0]["positive_book_sharpe"] == 1.0 and math.isnan(rows[1]["forced_lacking"])
    (s,) = seed_spread(rows)
    assert s["compliance_idea_mean"] == pytest.approx(0.3) and s["positive_book_sharpe_sd"] == pytest.approx(0.5 ** 0.5)
    assert "forced_lacking_mean" not in s
    (cells,) = spread_cells([s], ("holdout_score", "compliance_idea", "positive_book_beta", "forced_lacking",
                                  "planted_edges_expressed"))
    assert cells == {"rung": "a", "seeds": 2, "holdout_score": "1.00 ± 0.71", "compliance_idea": "0.30 ± 0.14",
                     "positive_book_beta": "0.01 ± 0.00"}


def test_the_ladder_ships_on_train_cpcv_not_holdout():
    good_on_holdout = _rung("a", "sft", train=0.5, hold=3.0)
    good_on_train = _rung("b", "a", train=1.5, hold=-1.0)
    assert shipped_rung([good_on_holdout, good_on_train]).item == "b"
    assert shipped_rung([RungResult("c", "c", 0, "sft", "x", missing=["m"])]) is None


def test_pairs_are_deduplicated_on_brief_and_canonical_form():
    a = _rung("a", "sft", 1.0, 1.0)
    a.answers = pd.DataFrame({"step": [0, 100, 100], "brief": ["h1", "h1", "h2"], "family": ["f"] * 3,
                              "answer": ["x"] * 3, "formula": ["rank(volume)", "rank(volume) ", "rank(close)"],
                              "canonical": ["rank(volume)", "rank(volume)", "rank(close)"],
                              "valid": [True, True, True], "train_cpcv": [0.1, 0.3, -0.2]})
    b = _rung("b", "a", 1.0, 1.0)
    b.answers = a.answers.assign(valid=[True, False, False])
    out = pairs([a, b], {"h1": "brief one", "h2": "brief two"})
    assert len(out) == 2 and not math.isnan(out["train_cpcv"].iloc[0])
    first = out[out["brief"] == "h1"].iloc[0]
    assert first["train_cpcv"] == 0.3 and first["brief_text"] == "brief one"
    assert first["written_by"] == ["a@0", "a@100", "b@0"]


def test_the_bets_table_gives_step_0_and_the_shipped_checkpoint_with_the_archive_book():
    """Two rows a rung, read from its probe table (step 0 and the shipped step, other checkpoints left
    out), the shipped one with the archive book; columns the probe lacks (coverage on real data) are
    absent, not zero; a failed rung has none."""
    from alphagym.report.build import RungResult, bet_rows

    table = pd.DataFrame({"step": [0, 100, 200], "shipped": [False, False, True], "valid": [45, 48, 50],
                          "families": [40, 20, 3], "holdout_effective_bets": [9.0, 5.0, 1.2],
                          "holdout_score": [-3.5, 0.2, 1.5]})
    ok = RungResult("a", "a", 0, "sft", "x", table=table, probe={"shipped_step": 200},
                    books={"archive": {"answers": 20, "effective_bets": 6.3}})
    failed = RungResult("b", "b", 0, "a", "y", missing=["log: gone"])
    rows = bet_rows([ok, failed])
    assert [r["checkpoint"] for r in rows] == ["step 0", "shipped (200)"]
    assert rows[0]["families"] == 40 and rows[1]["families"] == 3 and rows[1]["holdout_score"] == 1.5
    assert rows[1]["archive_effective_bets"] == 6.3 and "archive_effective_bets" not in rows[0]
    assert "planted_edges_expressed" not in rows[0]


def test_coverage_columns_are_left_out_where_no_rung_has_them():
    """On real data (no planted effects) the coverage columns are absent from the Ladder and Seeds tables,
    not a column of dashes; on the simulator they stay, even when one rung lacks them."""
    from alphagym.report.stage import LADDER_COLS, SEED_COLS, present

    real = [{"rung": "a", "planted_edges_expressed": None, "decoy_trap_answers": float("nan")}]
    cols = present(real, LADDER_COLS)
    assert "planted_edges_expressed" not in cols and "decoy_trap_answers" not in cols and "families" in cols
    assert "planted_edges_expressed_mean" not in present([{"planted_edges_expressed_mean": None}], SEED_COLS)
    sim = real + [{"rung": "b", "planted_edges_expressed": 2, "decoy_trap_answers": 0}]
    assert present(sim, LADDER_COLS) == LADDER_COLS


def test_the_check_table_names_the_check_compliance_is_lost_on():
    """Step 0 and the shipped checkpoint of each rung whose probe has the per-check columns; a rung probed
    before they existed is left out rather than shown as zeros."""
    from alphagym.report.build import CHECK_COLUMNS, RungResult, check_rows

    checks = {c: [1.0, 1.0] for c in CHECK_COLUMNS} | {"compliance_horizon": [0.1, 0.3]}
    table = pd.DataFrame({"step": [0, 200], "compliance": [0.82, 0.86], "forced_lacking": [0.5, 0.75], **checks})
    new = RungResult("a", "a", 0, "sft", "x", table=table, probe={"shipped_step": 200})
    old = RungResult("b", "b", 0, "sft", "x", table=table[["step", "compliance"]], probe={"shipped_step": 200})
    rows = check_rows([new, old])
    assert [(r["rung"], r["checkpoint"]) for r in rows] == [("a", "step 0"), ("a", "shipped (200)")]
    assert rows[1]["compliance_horizon"] == 0.3 and rows[1]["compliance_mechanism"] == 1.0
    assert rows[1]["forced_lacking"] == 0.75
    # a probe written before the column: the share is unknown, not 0
    older = RungResult("c", "c", 0, "sft", "x", table=table.drop(columns="forced_lacking"), probe={"shipped_step": 200})
    assert math.isnan(check_rows([older])[1]["forced_lacking"])

    # valid_compliant: of the valid answers at that step, those passing every check (an invalid one that fails
    # a check does not count against it); unknown without the answers' per-check columns
    ok = dict.fromkeys(CHECK_COLUMNS, True)
    new.answers = pd.DataFrame([{"step": 200, "valid": True, **ok},
                                {"step": 200, "valid": True, **ok, "compliance_horizon": False},
                                {"step": 200, "valid": False, **ok, "compliance_mechanism": False},
                                {"step": 0, "valid": True, **ok}])
    step0, shipped = check_rows([new])
    assert step0["valid_compliant"] == 1.0 and shipped["valid_compliant"] == 0.5
    new.answers = new.answers.drop(columns="compliance_horizon")
    assert math.isnan(check_rows([new])[1]["valid_compliant"])


def test_the_decoder_table_gives_the_share_of_answers_whose_requirement_the_decoder_wrote():
    """First and last steps' share of a step's answers the decoder completed lacking a requirement, over the
    answers a step samples; a grammar rung (absent from `answers`) and a log without the counts are left out."""
    from alphagym.report.build import decoder_rows

    log = [{"step": i + 1, "decoding/forced_lacking": 24.0 if i < 50 else 8.0, "decoding/forced_late": float(i == 3)}
           for i in range(120)]
    brief, grammar, old = (RungResult(k, k, 0, "sft", "x", log=log) for k in ("brief", "grammar", "old"))
    old.log = [{"step": i + 1} for i in range(120)]
    rows = decoder_rows([brief, grammar, old], {"brief": 32, "old": 32})
    assert [r["rung"] for r in rows] == ["brief"]
    assert rows[0]["forced_lacking_first"] == pytest.approx(0.75)
    assert rows[0]["forced_lacking_last"] == pytest.approx(0.25)
    assert rows[0]["forced_late_answers"] == 1.0 and rows[0]["answers_per_step"] == 32
    # a shorter run: both windows are the whole run
    brief.log = log[:10]
    assert decoder_rows([brief], {"brief": 32})[0]["forced_lacking_last"] == pytest.approx(0.75)


def test_the_decoder_tables_by_check_name_the_checks_the_decoder_wrote():
    """By check, from the training log: each check's first and last shares over the answers a step samples;
    a check the log lacks is left out. From the probe table: step 0 and the shipped checkpoint's per-check
    shares; a probe that predates the columns is left out."""
    from alphagym.report.build import decoder_check_rows, lacking_rows

    log = [{"step": i + 1, "decoding/forced_lacking": 16.0, "decoding/forced_lacking_horizon": 16.0 if i < 50 else 4.0,
            "decoding/forced_lacking_mechanism": 8.0} for i in range(100)]
    brief = RungResult("brief", "brief", 0, "sft", "x", log=log)
    rows = decoder_check_rows([brief], {"brief": 32})
    assert {r["check"]: (r["first"], r["last"]) for r in rows} == {"horizon": (0.5, 0.125), "mechanism": (0.25, 0.25)}
    assert decoder_check_rows([brief], {}) == []                  # a grammar rung: no brief decoding
    checks = {f"forced_lacking_{c}": [0.4, 0.1] for c in ("mechanism", "horizon", "input_rule", "structure",
                                                          "forbidden")}
    table = pd.DataFrame({"step": [0, 200], "forced_lacking": [0.5, 0.2], **checks})
    new = RungResult("n", "n", 0, "sft", "x", table=table, probe={"shipped_step": 200})
    step0, shipped = lacking_rows([new])
    assert step0["checkpoint"] == "step 0" and step0["horizon"] == 0.4 and shipped["horizon"] == 0.1
    assert shipped["forced_lacking"] == 0.2
    old = RungResult("o", "o", 0, "sft", "x", table=table[["step", "forced_lacking"]], probe={"shipped_step": 200})
    assert lacking_rows([old]) == []


def test_the_decoder_table_takes_the_rungs_that_sample_under_brief_decoding_with_their_step_size():
    """The report's rung -> answers a step: the rungs whose recipe (or, unset, `policy.decoding`) is brief,
    not the grammar-only control."""
    from alphagym.config import load_params
    from alphagym.report.stage import _brief_answers

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    items = [RungResult(i, i.split("-s")[0], 1, "sft", "x") for i in ("cispo_repo-s1", "cispo_repo_grammar-s1")]
    recipe = params.rl.recipe
    assert _brief_answers(params, items) == {"cispo_repo-s1": recipe.briefs_per_step * recipe.answers_per_brief}
    grammar = params.model_copy(update={"policy": params.policy.model_copy(update={"decoding": "grammar"})})
    assert _brief_answers(grammar, items) == {}


BOOK = {"answers": 3.0, "return": 0.05, "sharpe": 0.8, "max_drawdown": -0.1, "beta": 0.1, "market_corr": 0.2,
        "market_return": 0.1, "market_sharpe": 1.0, "market_max_drawdown": -0.2, "down_days": 12.0,
        "book_mean_on_down_days": 0.001, "market_mean_on_down_days": -0.02, "mean_pairwise_corr": 0.3,
        "effective_bets": 2.1}


def _books(step: int = 2) -> dict:
    """books.json as the books stage writes it (every key the report reads)."""
    answer = {"formula": "rank(volume)", "canonical": "rank(volume)", "brief": "h1", "count": 3, "train_cpcv": 0.4,
              "train_turnover": 0.2, "holdout_score": 0.1, "holdout_sharpe": 0.5, "holdout_return": 0.02}
    return {"rung": "a", "shipped_step": step, "answers": [answer], "market": dict(BOOK), "equal_weight": dict(BOOK),
            "capped": dict(BOOK), "capped_members": ["rank(volume)"], "positive": dict(BOOK), "archive": dict(BOOK),
            "archive_members": ["rank(volume)"], "archive_pool": 7}


def _rung_files(tmp_path, probe_step: int = 2, books: dict | None = None) -> dict:
    """The files of one finished rung `a` (two steps, checkpoints 0, 2 and 4), as `load_rung` reads them."""
    import json

    from alphagym.artifacts import write_parquet

    f = {role: tmp_path / name for role, name in (
        ("log", "log.jsonl"), ("train", "summary.json"), ("checkpoints", "checkpoints"), ("answers", "answers.parquet"),
        ("table", "checkpoints.parquet"), ("probe", "probe.json"), ("books", "books.json"), ("daily", "daily.parquet"))}
    tmp_path.mkdir(parents=True)
    f["log"].write_text("".join(json.dumps({"step": s, "reward": 0.0}) + "\n" for s in (1, 2)))
    f["train"].write_text(json.dumps({"steps": 2}))
    f["checkpoints"].mkdir()
    write_parquet(pd.DataFrame({"step": [0, 2, 4], "valid": [1, 2, 3], "formula": ["rank(volume)"] * 3}), f["answers"])
    write_parquet(pd.DataFrame({"step": [0, 2, 4], "shipped": [s == probe_step for s in (0, 2, 4)]}), f["table"])
    f["probe"].write_text(json.dumps({"shipped_step": probe_step}))
    f["books"].write_text(json.dumps(_books(probe_step) if books is None else books))
    write_parquet(pd.DataFrame({"date": pd.to_datetime(["2026-01-02", "2026-01-05"]), "market": [0.01, -0.02]}),
                  f["daily"])
    return f


def _load(files):
    from alphagym.config import load_params
    from alphagym.params import Rl
    from alphagym.report.build import load_rung

    raw = load_params(Path(__file__).resolve().parents[1] / "params.yaml").rl.model_dump()
    raw["rungs"]["a"] = {"parent": "sft", "set": {"loss": "dapo"}}
    res = load_rung("a", files, Rl.model_validate(raw))
    assert res.change == "loss: cispo -> dapo"          # computed from the recipes
    return res


def test_a_books_file_of_another_step_is_named_as_such_not_as_a_missing_checkpoint(tmp_path):
    """The probe ships step 0 (among its checkpoints 0, 2, 4) and the books are of step 2: the error says
    that, instead of "step 0 is not among [0, 2, 4]"; a shipped step that is not among the checkpoints says
    that one."""
    from alphagym.errors import ArtifactError

    assert _load(_rung_files(tmp_path / "ok")).ok
    with pytest.raises(ArtifactError) as err:
        _load(_rung_files(tmp_path / "other", probe_step=0, books=_books(2)))
    message = str(err.value)
    assert "not among" not in message, message
    assert "the books" in message and "are of step 2" in message and "ships step 0" in message, message
    files = _rung_files(tmp_path / "missing", probe_step=2)
    files["probe"].write_text('{"shipped_step": 6}')
    with pytest.raises(ArtifactError, match=r"ships step 6, which is not among its checkpoints \[0, 2, 4\]"):
        _load(files)


def _without(d: dict, dotted: str) -> dict:
    import copy

    out = copy.deepcopy(d)
    *parents, last = dotted.split(".")
    node = out
    for p in parents:
        node = node[p]
    del node[last]
    return out


def _with(d: dict, dotted: str, value) -> dict:
    import copy

    out = copy.deepcopy(d)
    *parents, last = dotted.split(".")
    node = out
    for p in parents:
        node = node[int(p)] if isinstance(node, list) else node[p]
    node[last] = value
    return out


BAD_BOOKS = [
    (_with(_books(), "capped.sharpe", "high"), "capped.sharpe is 'high', not a number"),
    (_without(_books(), "equal_weight.beta"), "equal_weight.beta is missing"),
    (_without(_books(), "equal_weight.market_return"), "equal_weight.market_return is missing"),
    (_with(_books(), "archive.effective_bets", None), "archive.effective_bets is None, not a number"),
    (_with(_books(), "equal_weight.return", True), "equal_weight.return is True, not a number"),
    (_with(_books(), "capped", [1, 2]), "capped is neither null nor an object"),
    (_without(_books(), "archive"), "archive is missing"),
    (_without(_books(), "positive"), "positive is missing"),
    (_with(_books(), "positive.beta", "low"), "positive.beta is 'low', not a number"),
    (_with(_books(), "shipped_step", 2.0), "shipped_step is 2.0, not a step (an integer)"),
    (_with(_books(), "answers.0.holdout_sharpe", "n/a"), "answers[0].holdout_sharpe is 'n/a', not a number"),
    (_with(_books(), "answers.0.formula", 3), "answers[0].formula is 3, not a formula (a string)"),
    (_with(_books(), "answers", {}), "answers is not a list"),
    (_with(_books(), "archive_pool", "7"), "archive_pool is '7', not a count"),
]


@pytest.mark.parametrize("books, message", BAD_BOOKS, ids=[m.split(" is ")[0] for _, m in BAD_BOOKS])
def test_every_key_the_report_reads_from_books_is_checked(tmp_path, books, message):
    """A books.json that parses but holds a wrong type, or lacks a key the report reads, is an error naming
    the file and the key, not a report that exits 0 with "sharpe": "high" in it. A book of no answers is
    null, and NaN metrics are numbers (the books stage writes both)."""
    from alphagym.errors import ArtifactError

    files = _rung_files(tmp_path / "r", books=books)
    with pytest.raises(ArtifactError) as err:
        _load(files)
    assert message in str(err.value) and f"(file {files['books']})" in str(err.value), str(err.value)
    nan = _with(_with(_books(), "equal_weight.beta", float("nan")), "capped", None)
    assert _load(_rung_files(tmp_path / "ok", books=nan)).ok


def test_bets_over_training_average_each_step_over_the_replicas():
    from alphagym.report.build import convergence_rows

    def run(item, rung, corr):
        table = pd.DataFrame({"step": [0, 100], "families": [40.0, 10.0], "holdout_mean_abs_corr": corr,
                              "holdout_effective_bets": [20.0, 3.0], "train_effective_bets": [18.0, 4.0]})
        return RungResult(item, rung, 0, "sft", "x", table=table, probe={"shipped_step": 100})

    rows = convergence_rows([run("a", "a", [0.1, 0.5]), run("a-s1", "a", [0.1, 0.3]),
                             run("b", "b", [0.2, 0.2]), RungResult("c", "c", 0, "sft", "x", missing=["m"])])
    assert [(r["rung"], r["step"], r["replicas"]) for r in rows] == [("a", 0, 2), ("a", 100, 2), ("b", 0, 1),
                                                                      ("b", 100, 1)]
    assert rows[1]["holdout_mean_abs_corr"] == pytest.approx(0.4) and rows[1]["families"] == 10.0


def test_the_bootstrap_interval_recovers_a_known_sampling_distribution():
    """400 briefs' scores drawn from N(0.5, 1): the 95% interval of their mean is about 0.5 +- 1.96 / 20, and
    about 1 sd (1 / 20) on each side at 68%."""
    import numpy as np

    from alphagym.books.metrics import bootstrap_interval

    x = np.random.default_rng(3).normal(0.5, 1.0, size=400)
    lo, hi = bootstrap_interval(lambda k, b: float(x[b].mean()), 1, len(x))
    assert lo < x.mean() < hi
    assert (hi - lo) / 2 == pytest.approx(1.96 / 20, rel=0.12)
    lo68, hi68 = bootstrap_interval(lambda k, b: float(x[b].mean()), 1, len(x), level=0.6827)
    assert (hi68 - lo68) / 2 == pytest.approx(1 / 20, rel=0.12)
    assert bootstrap_interval(lambda k, b: float(x[b].mean()), 1, len(x)) == (lo, hi)      # seeded


def _paired_case(shift, noise):
    import numpy as np

    rng = np.random.default_rng(4)
    briefs = [f"holdout-{i:04d}" for i in range(60)]
    out = []
    for k in (0, 1, 2):
        base = rng.normal(0.0, 1.0, size=len(briefs))
        child = base + shift + noise * rng.normal(size=len(briefs))
        for rung, parent, scores in (("p", "sft", base), ("c", "p", child)):
            item = rung if k == 0 else f"{rung}-s{k}"
            answers = pd.DataFrame({"step": 100, "brief": briefs, "holdout_score": scores})
            out.append(RungResult(item, rung, k, parent, "x", answers=answers,
                                  table=pd.DataFrame({"step": [0, 100], "holdout_score": [0.0, float(scores.mean())]}),
                                  probe={"shipped_step": 100, "shipped": {"holdout_score": float(scores.mean())}}))
    return out


def test_a_paired_difference_is_beyond_noise_by_its_interval():
    """A child rung 0.5 above its parent on every replica and brief, with brief-level noise of sd 1: the paired
    difference is about 0.5 and its interval leaves out 0; with no shift the interval holds 0."""
    from alphagym.report.build import paired_rows

    [row] = [r for r in paired_rows(_paired_case(0.5, 1.0)) if r["rung"] == "c"]
    assert row["parent"] == "p" and row["pairs"] == 3 and row["difference"] == pytest.approx(0.5, abs=0.2)
    assert row["low"] > 0 and row["beyond_noise"] == "yes"
    [row] = [r for r in paired_rows(_paired_case(0.0, 1.0)) if r["rung"] == "c"]
    assert row["low"] < 0 < row["high"] and row["beyond_noise"] == "no"


def test_the_variance_split_names_the_briefs_share():
    """Three replicas whose scores differ only by brief noise: the brief component is about 1 / sqrt(60) and
    the seed component small against it."""
    from alphagym.report.build import variance_rows

    row = next(r for r in variance_rows(_paired_case(0.0, 0.0)) if r["rung"] == "p")
    assert row["replicas"] == 3 and row["briefs"] == pytest.approx(1 / 60 ** 0.5, rel=0.3)
    assert row["total"] ** 2 == pytest.approx(row["seed"] ** 2 + row["briefs"] ** 2, rel=1e-6) or row["seed"] == 0
