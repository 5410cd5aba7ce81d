"""The report's ladder arithmetic on hand-made rung results: change against the parent (same replica when
it has one, step 0 for a rung on the SFT policy), the seed spread and the noise floor, the train-only
choice of the shipped rung, and the deduplicated pairs."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from alphagym.report.build import RungResult, ladder_rows, mark_noise, pairs, seed_spread, shipped_rung


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
    rows = ladder_rows([a, a1, b, b1, failed], {"a": {}, "b": {"loss": ("dapo", "cispo")}, "c": {}})
    by = {r["rung"]: r for r in rows}
    assert by["a"]["vs_parent"] == pytest.approx(0.5 - (-1.0))
    assert by["b"]["vs_parent"] == pytest.approx(0.9 - 0.5)
    assert by["b-s1"]["vs_parent"] == pytest.approx(0.6 - 0.7)       # against a-s1, not a
    assert by["b"]["recipe_diff"] == "loss: dapo -> cispo"
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
    table = pd.DataFrame({"step": [0, 200], "compliance": [0.82, 0.86], **checks})
    new = RungResult("a", "a", 0, "sft", "x", table=table, probe={"shipped_step": 200})
    old = RungResult("b", "b", 0, "sft", "x", table=table[["step", "compliance"]], probe={"shipped_step": 200})
    rows = check_rows([new, old])
    assert [(r["rung"], r["checkpoint"]) for r in rows] == [("a", "step 0"), ("a", "shipped (200)")]
    assert rows[1]["compliance_horizon"] == 0.3 and rows[1]["compliance_mechanism"] == 1.0
